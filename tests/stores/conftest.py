"""The backends every store contract runs against.

``stores`` yields one installation's stores as the composition root builds them
(``api/composition.py``: ``build_stores``). Today that is the embedded SQLite database; a second
backend (PostgreSQL, CITEWISE_DATABASE_URL) is one more entry in ``BACKENDS`` whose settings
point at it, and every contract test runs against it unchanged. So the contract tests say
nothing of SQLite: they use the stores' methods only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from citewise.api.composition import Stores, build_stores
from citewise.api.settings import Settings


def _sqlite(folder: Path) -> Settings:
    return Settings(data_dir=folder / "data")


# name -> the settings of a fresh, empty installation on that backend, in a test's own folder.
BACKENDS: dict[str, Callable[[Path], Settings]] = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, tmp_path) -> Settings:
    return BACKENDS[request.param](tmp_path)


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
