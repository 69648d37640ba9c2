"""The Confluence test site: the fake server started with credentials in the environment, a
connector pointed at it, and a run through the real pipeline. Shared by the Confluence tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from citewise.connectors.confluence import ConfluenceConnector
from citewise.connectors.confluence.config import ConfluenceConfig
from tests.fakes.confluence_server import ConfluenceModel, FakeConfluence

CREDENTIALS = {"CW_TEST_EMAIL": "bot@example.com", "CW_TEST_TOKEN": "cloud-secret-token",
               "CW_TEST_PAT": "dc-secret-pat"}


@contextmanager
def serving(model: ConfluenceModel, monkeypatch, max_limit: int = 5) -> Iterator[FakeConfluence]:
    """The fake site on loopback, with the connector's credentials in the environment."""
    server = FakeConfluence(model, max_limit=max_limit).start()
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    try:
        yield server
    finally:
        server.stop()


def connector(server, flavour: str, **options) -> ConfluenceConnector:
    options.setdefault("exclude_labels", ["draft"])
    options.setdefault("overlap_minutes", 0)
    config = ConfluenceConfig(
        base_url=server.cloud_url if flavour == "cloud" else server.dc_url,
        flavour=flavour,
        email_env="CW_TEST_EMAIL",
        token_env="CW_TEST_TOKEN" if flavour == "cloud" else "CW_TEST_PAT",
        requests_per_second=0,  # no spacing against a loopback server
        max_retry_wait=0.05,
        **options,
    )
    return ConfluenceConnector(config, sleep=lambda s: None)


def run(services, conn, **kw):
    return services.pipeline.run("wiki", "confluence", conn, **kw)


def docs_by_title(services) -> dict:
    return {d.title: d for d in services.catalog.documents_of_source("wiki").values()}
