"""Shared fixtures: real engines, a real model (loaded once per session), real files.

Nothing of ours is mocked. The embedding model is the packaged all-MiniLM-L6-v2; it is loaded
once per test session (``citewise.index.embedder`` shares loaded models per process).
"""

from __future__ import annotations

import logging
import os
import socket
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

from citewise.api.composition import Services, build_services  # noqa: E402
from citewise.index.embedder import DenseEncoder  # noqa: E402
from citewise.settings import Settings  # noqa: E402

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


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


@pytest.fixture
def kb(tmp_path) -> Path:
    """A small knowledge base: runbooks with front matter, a restricted page, HTML, text."""
    root = tmp_path / "kb"
    write(root, "runbooks/redis-failover.md", """
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
        """)
    write(root, "runbooks/postgres-disk-full.md", """
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
        """)
    write(root, "runbooks/secrets/rotate-payment-keys.md", """
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
        """)
    write(root, "wiki/onboarding.html", """
        <html><head><title>Onboarding for new engineers</title></head><body>
        <h1>Onboarding for new engineers</h1>
        <p>Welcome to the platform team. In your first week you set up your laptop, request
        access to the production read-only role and shadow an on-call shift.</p>
        <h2>Access requests</h2>
        <p>File an access request in the service desk for the VPN, the Grafana dashboards and
        the deploy tool. Approvals take one business day.</p>
        </body></html>
        """)
    write(root, "wiki/holiday-swaps.txt", """
        Swapping on-call shifts over holidays

        Post the swap in the on-call channel at least one week before the shift, and update
        the paging schedule yourself. Both engineers must confirm the swap.
        """)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.fixture
def s3_bucket(s3_server):
    import uuid

    import boto3

    name = f"citewise-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=name)
    return name
