"""Shared fixtures: real engines, a real model (loaded once per session), real files.

Nothing of ours is mocked. The embedding model is the packaged all-MiniLM-L6-v2; it is loaded
once per test session (``citewise.index.dense`` shares loaded models per process).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

from citewise.api.composition import Services, build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.index.dense import DenseEncoder  # noqa: E402
from tests.kb import write_kb  # noqa: E402
from tests.live import free_port  # noqa: E402,F401  (re-exported for the tests)

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def dense() -> DenseEncoder:
    encoder = DenseEncoder()
    encoder.warm_up()
    return encoder


@pytest.fixture
def make_services(tmp_path, dense):
    """Build the real services over a fresh data folder; closes them after the test."""
    built: list[Services] = []

    def make(data_dir: Path | None = None, **overrides) -> Services:
        settings = Settings(data_dir=data_dir or tmp_path / "data", **overrides)
        services = build_services(settings)
        built.append(services)
        return services

    yield make
    for s in built:
        try:
            s.close()
        except Exception:
            pass


@pytest.fixture
def kb(tmp_path) -> Path:
    """The small knowledge base of ``tests/kb.py``, in a fresh folder."""
    return write_kb(tmp_path / "kb")


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 HTTP server on loopback, with a bucket; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL 16 server with pgvector on loopback (``tests/postgres_server.py``),
    shared by the session; a test that needs a database asks for ``postgres_url``."""
    from tests.postgres_server import remove, start_or_skip_reason

    server = start_or_skip_reason()
    if isinstance(server, str):
        pytest.skip(server)
    yield server
    remove(server)


@pytest.fixture
def postgres_url(postgres) -> str:
    """A fresh, empty database of its own (with the vector extension) on that server."""
    return postgres.create_database()


@pytest.fixture
def s3_bucket(s3_server):
    import uuid

    import boto3

    name = f"citewise-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def demo_kb(tmp_path_factory, dense):
    """The bundled demo, ingested once per session exactly as `make run` does (citewise.toml).

    Shared by the demo tests and the golden set; they only read it. Yields (services, reports).
    """
    from citewise.api.settings import Settings
    from citewise.ingest.jobs import run_source

    root = Path(__file__).resolve().parents[1]
    settings = Settings.load(root / "citewise.toml",
                             data_dir=tmp_path_factory.mktemp("demo") / "data")
    services = build_services(settings)
    reports = [run_source(services.pipeline, s, trigger="test") for s in settings.sources]
    yield services, reports
    services.close()

