"""A key revoked through the CLI is refused by every process that checks keys, within a second
or two: keys are read from the store on every request, never cached in a process.

On PostgreSQL: two replicas' apps on one database, the key made and revoked by ``citewise keys``
run as a process of its own with the database's URL. On one machine: three processes share one
SQLite file, a ``citewise serve``, the ``citewise keys`` commands, and this test's own front
door (``build_door`` over the same file, as a second process would build it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.datastructures import Headers

from citewise.api.app import create_app
from citewise.api.composition import build_door, build_stores
from citewise.api.settings import Settings
from citewise.errors import AuthError
from tests.kb import clean_env, write_site
from tests.live import free_port, wait_healthy

CITEWISE = Path(sys.executable).with_name("citewise")
REVOKED_WITHIN = 2.0  # seconds


def _citewise(site: Path, *args: str, **env: str) -> str:
    done = subprocess.run([str(CITEWISE), *args], cwd=site, capture_output=True, text=True,
                          timeout=300, env=clean_env(**env))
    assert done.returncode == 0, done.stderr
    return done.stdout


def _refused_within(check, seconds: float = REVOKED_WITHIN) -> None:
    """``check()`` is True once every process refuses the key; it must be within ``seconds``."""
    revoked = time.monotonic()
    while not check():
        assert time.monotonic() - revoked < seconds, "a revoked key is still admitted"
        time.sleep(0.05)


def test_a_key_revoked_through_the_cli_is_refused_by_every_replica(tmp_path, postgres_url,
                                                                    make_services):
    replicas = [make_services(tmp_path / name, database_url=postgres_url)
                for name in ("replica-a", "replica-b")]
    secret = json.loads(_citewise(tmp_path, "keys", "create", "ci", "--scopes", "search",
                                  "--json", CITEWISE_DATABASE_URL=postgres_url))["secret"]
    key = {"Authorization": f"Bearer {secret}"}
    with TestClient(create_app(services=replicas[0]), headers=key) as a, \
            TestClient(create_app(services=replicas[1]), headers=key) as b:
        for replica in (a, b):
            assert replica.get("/v1/search", params={"q": "redis"}).status_code == 200
        _citewise(tmp_path, "keys", "revoke", "ci", CITEWISE_DATABASE_URL=postgres_url)
        _refused_within(lambda: all(
            r.get("/v1/search", params={"q": "redis"}).status_code == 401 for r in (a, b)))
        detail = b.get("/v1/search", params={"q": "redis"}).json()["detail"]
        assert "the API key 'ci' was revoked" in detail


def test_on_one_machine_too_every_process_refuses_a_revoked_key(tmp_path):
    config = write_site(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen([str(CITEWISE), "serve", "--port", str(port)], cwd=tmp_path,
                                  stdout=out, stderr=out,
                                  env=clean_env(CITEWISE_CONFIG_FILE=str(config)))
    stores = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, server, log)
        secret = json.loads(_citewise(tmp_path, "keys", "create", "ci", "--scopes", "search",
                                      "--json", CITEWISE_CONFIG_FILE=str(config)))["secret"]
        headers = {"Authorization": f"Bearer {secret}"}
        stores = build_stores(Settings.load(config))
        door = build_door(Settings.load(config), stores, bind_host="0.0.0.0")

        def served() -> int:
            return httpx.get(f"{url}/v1/search", params={"q": "redis"}, headers=headers,
                             timeout=30).status_code

        def admitted_here() -> bool:
            try:
                door.authenticator.authenticate(Headers(headers), "10.0.0.5")
                return True
            except AuthError:
                return False

        assert served() == 200 and admitted_here()
        _citewise(tmp_path, "keys", "revoke", "ci", CITEWISE_CONFIG_FILE=str(config))
        _refused_within(lambda: served() == 401 and not admitted_here())
        refused = httpx.get(f"{url}/v1/search", params={"q": "redis"}, headers=headers)
        assert refused.json()["type"] == "urn:citewise:error:unauthorized"
        assert "revoked" in refused.json()["detail"]
    finally:
        if stores is not None:
            stores.close()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            pytest.fail(f"the server did not stop:\n{log.read_text()}")
