"""The backends every store contract runs against.

``stores`` yields one installation's stores as the composition root builds them
(``api/composition.py``: ``build_stores``): the embedded SQLite database of a data folder, and
PostgreSQL (``CITEWISE_DATABASE_URL``: a fresh database of its own on the session's server,
``tests/postgres_server.py``; skipped, saying why, where the pgserver wheel is absent). Every
contract test runs against each unchanged, so the contract tests say nothing of either: they use
the stores' methods only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from citewise.api.composition import Stores, build_stores
from citewise.api.settings import Settings


def _sqlite(request: pytest.FixtureRequest, folder: Path) -> Settings:
    return Settings(data_dir=folder / "data")


def _postgresql(request: pytest.FixtureRequest, folder: Path) -> Settings:
    server = request.getfixturevalue("postgres")  # skips with its reason without pgserver
    return Settings(data_dir=folder / "data", database_url=server.create_database())


# name -> the settings of a fresh, empty installation on that backend, in a test's own folder.
BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Settings]] = {
    "sqlite": _sqlite, "postgresql": _postgresql}


@pytest.fixture(params=sorted(BACKENDS))
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def backend(request, backend_name, tmp_path) -> Settings:
    return BACKENDS[backend_name](request, tmp_path)


@pytest.fixture
def open_stores(backend) -> Iterator[Callable[[], Stores]]:
    """Open the installation's stores (again: a second process, or after a restart)."""
    opened: list[Stores] = []

    def open_() -> Stores:
        stores = build_stores(backend)
        opened.append(stores)
        return stores

    yield open_
    for stores in opened:
        stores.close()


@pytest.fixture
def stores(open_stores) -> Stores:
    return open_stores()


@pytest.fixture
def other_stores(request, backend_name, tmp_path) -> Iterator[Stores]:
    """A second installation on the same backend, empty: what a copy of the whole store
    (``citewise migrate-catalog``) is brought into by the stores' ``import_*`` methods."""
    stores = build_stores(BACKENDS[backend_name](request, tmp_path / "other"))
    yield stores
    stores.close()
