"""The front door over PostgreSQL's shared rate limits: two replicas' doors (each built by
``build_door`` on its own ``build_stores``) refuse one caller at the limit, not at twice it,
and while the database is down a request is answered 503, never let through uncounted."""

from __future__ import annotations

import time

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from citewise.api.composition import build_door, build_stores
from citewise.api.frontdoor import FrontDoor
from citewise.api.settings import Settings

LOOPBACK = ("127.0.0.1", 50000)  # local mode: the caller is this machine's


def _replica(settings: Settings):
    """What a ``citewise serve`` puts in front of its routes: its stores, its door, and a
    search route behind it (the route itself is not what is tested)."""
    stores = build_stores(settings)
    app = Starlette(routes=[Route("/v1/search", lambda request: JSONResponse({"results": []}),
                                  methods=["GET"])])
    app.state.door = build_door(settings, stores)
    app.add_middleware(FrontDoor)
    return stores, TestClient(app, client=LOOPBACK)


@pytest.fixture
def settings(postgres_url, tmp_path) -> Settings:
    return Settings(data_dir=tmp_path / "data", database_url=postgres_url,
                    rate_search_per_minute=4)


def test_requests_split_across_replicas_are_refused_at_the_limit(settings):
    replicas = [_replica(settings) for _ in range(2)]
    try:
        statuses = [replicas[i % 2][1].get("/v1/search").status_code for i in range(8)]
        assert statuses == [200] * 4 + [429] * 4
        refused = replicas[1][1].get("/v1/search")
        assert refused.headers["content-type"] == "application/problem+json"
        assert int(refused.headers["retry-after"]) >= 1
    finally:
        for stores, _ in replicas:
            stores.close()


def test_a_replica_whose_database_is_down_answers_503(settings, postgres):
    stores, client = _replica(settings.replaced(database_timeout=1.0))
    try:
        assert client.get("/v1/search").status_code == 200
        postgres.stop("immediate")
        try:
            down = client.get("/v1/search")
        finally:
            postgres.start()
        assert down.status_code == 503, down.text
        assert down.json()["type"].endswith("backend_unavailable")
        assert "cannot be reached" in down.json()["detail"]
        # Back without a restart, once the pool has reconnected (it retries with a backoff).
        deadline = time.monotonic() + 30
        while (status := client.get("/v1/search").status_code) == 503:
            assert time.monotonic() < deadline, "the replica did not recover within 30 s"
            time.sleep(0.2)
        assert status == 200
    finally:
        stores.close()
