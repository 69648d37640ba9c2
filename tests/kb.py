"""A small knowledge base written by the tests: runbooks with front matter (one restricted to
group:security), an HTML wiki page and a text file. A function rather than only a fixture, so
that module-scoped fixtures (one ingest per test module) can use it too."""

from __future__ import annotations

import os
import sqlite3
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REDIS = "runbooks/redis-failover.md"
POSTGRES = "runbooks/postgres-disk-full.md"
SECRET = "runbooks/secrets/rotate-payment-keys.md"
SECRET_TITLE = "Rotate the payment provider API keys"
ONBOARDING = "wiki/onboarding.html"
HOLIDAYS = "wiki/holiday-swaps.txt"
ALL_PATHS = (REDIS, POSTGRES, SECRET, ONBOARDING, HOLIDAYS)

FILES = {
    REDIS: """
        ---
        title: Redis cache failover
        service: redis-cache
        owner: team-platform
        severity: high
        alerts: [RedisPrimaryDown]
        tags: [redis, failover]
        ---
        # Redis cache failover

        RedisPrimaryDown fires when the Redis primary has not answered health checks for
        two minutes. Checkout sessions are stored in Redis, so users get logged out.

        ## Diagnosis

        Check which node Sentinel considers the primary:

        ```bash
        redis-cli -p 26379 sentinel get-master-addr-by-name cache-main
        ```

        ## Mitigation

        Promote the replica with the smallest replication offset lag by running a manual
        Sentinel failover. Then restart the checkout pods so they reconnect.
        """,
    POSTGRES: """
        ---
        title: Postgres disk almost full
        service: postgres-main
        severity: critical
        alerts: [PostgresDiskAlmostFull]
        tags: [postgres, disk]
        ---
        # Postgres disk almost full

        PostgresDiskAlmostFull fires when the data volume of the primary database is more than
        90 percent used. When the disk fills up, the database stops accepting writes.

        ## Mitigation

        Delete old WAL archives that were already shipped to object storage, then grow the
        persistent volume claim by 100 GiB with kubectl edit pvc.
        """,
    SECRET: """
        ---
        title: Rotate the payment provider API keys
        service: payments-gateway
        readers: [group:security]
        tags: [secrets]
        ---
        # Rotate the payment provider API keys

        The payment provider keys are rotated every ninety days by the security team. Generate a
        new key pair in the provider console, store it in the vault under payments/provider, and
        roll the payments-gateway deployment.
        """,
    ONBOARDING: """
        <html><head><title>Onboarding for new engineers</title></head><body>
        <h1>Onboarding for new engineers</h1>
        <p>Welcome to the platform team. In your first week you set up your laptop, request
        access to the production read-only role and shadow an on-call shift.</p>
        <h2>Access requests</h2>
        <p>File an access request in the service desk for the VPN, the Grafana dashboards and
        the deploy tool. Approvals take one business day.</p>
        </body></html>
        """,
    HOLIDAYS: """
        Swapping on-call shifts over holidays

        Post the swap in the on-call channel at least one week before the shift, and update
        the paging schedule yourself. Both engineers must confirm the swap.
        """,
}

# Words that only the restricted runbook contains: none may leak to a reader without access.
SECRET_WORDS = ("ninety days", "vault", "payments/provider", "key pair")


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def write_kb(root: Path) -> Path:
    for rel, text in FILES.items():
        write(root, rel, text)
    return root


SITE_CONFIG = """
[settings]
data_dir = "data"

[[sources]]
name = "kb"
type = "folder"
path = "kb"
readers = ["public"]
"""


def write_site(root: Path) -> Path:
    """The knowledge base as source "kb" of a ``citewise.toml`` beside it (data in
    ``root/data``): what tests that run the ``citewise`` command work in. The config's path."""
    write_kb(root / "kb")
    config = root / "citewise.toml"
    config.write_text(SITE_CONFIG)
    return config


def ingest_site(root: Path) -> Path:
    """``write_site``, ingested once (services closed again, so a subprocess may open them)."""
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings
    from citewise.ingest.jobs import run_source

    config = write_site(root)
    settings = Settings.load(config)
    services = build_services(settings)
    try:
        report = run_source(services.pipeline, settings.sources[0], trigger="test")
        assert report.status == "succeeded", report.summary()
    finally:
        services.close()
    return config


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any CITEWISE_* setting (so no stray config applies)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEWISE_")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.update(extra)
    return env


def folder_source(path: Path, name: str = "kb", readers=("public",)):
    """A folder source over ``path``; its files are public unless their front matter says."""
    from citewise.settings import SourceConfig

    return SourceConfig(name=name, type="folder", path=str(path), readers=list(readers))


def make_key(services, name: str = "test", scopes: str = "search,answer,ingest,admin",
             **options) -> dict:
    """Create an API key in these services' key store; the headers that send it."""
    from citewise.api.identity.keys import ApiKeys

    _, secret = ApiKeys(services.stores.keys).create(name, scopes, **options)
    return {"Authorization": f"Bearer {secret}"}


def stored_rows(services) -> sqlite3.Connection:
    """A connection of this test's own to the services' embedded database file: what a test
    reads to see what is on disk (never what the code under test uses)."""
    conn = sqlite3.connect(services.settings.data.catalog_path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


@contextmanager
def services_over(base: Path, files: dict[str, str]) -> Iterator[tuple]:
    """``(services, docs folder)``: ``files`` written under ``base/docs``, ingested by the real
    pipeline into a data folder in ``base``, and the services over it (closed on exit)."""
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings
    from citewise.ingest.jobs import run_source

    docs = base / "docs"
    for rel, text in files.items():
        write(docs, rel, text)
    services = build_services(Settings(data_dir=base / "data"))
    try:
        assert run_source(services.pipeline, folder_source(docs), trigger="t").status == \
            "succeeded"
        yield services, docs
    finally:
        services.close()

