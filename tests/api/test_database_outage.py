"""A replica whose database goes away answers 503 problem documents at every door, keeps its
background threads alive (the usage flush, its ingest worker), and recovers by itself when the
database is back, without a restart; ``/healthz`` stays 200 for probes and tells an admin what
is down.

The real PostgreSQL of the ``postgres`` fixture is stopped and started again under a running
app whose every store, run lock and job queue is in it.
"""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from citewise.api.app import create_app
from tests.kb import ALL_PATHS, folder_source, make_key, write_kb

PROBLEM = "application/problem+json"
LOOPBACK = ("127.0.0.1", 50000)  # local mode: this machine's caller is the operator


def _until(read, done, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"still {value}"
        time.sleep(0.1)


def _unavailable(resp) -> None:
    assert resp.status_code == 503, (resp.request.method, resp.request.url, resp.text)
    assert resp.headers["content-type"] == PROBLEM
    problem = resp.json()
    assert problem["type"] == "urn:citewise:error:backend_unavailable"
    assert "cannot be reached" in problem["detail"]
    assert problem["hint"]


def test_a_replica_answers_503_while_the_database_is_away_and_recovers(tmp_path, postgres,
                                                                        make_services):
    url = postgres.create_database()
    services = make_services(tmp_path / "data", database_url=url, database_timeout=1.0)
    services.settings.sources = [folder_source(write_kb(tmp_path / "kb"))]
    key = make_key(services, "reader", scopes="search,answer")
    app = create_app(services=services)
    services.jobs.start()  # this replica runs jobs: its worker must outlive the outage
    try:
        # One client runs the app's lifespan (its usage flush); the others only send.
        keyed, anyone = TestClient(app, headers=key), TestClient(app)
        with TestClient(app, client=LOOPBACK) as local:
            first = local.post("/v1/ingest/jobs", json={"all": True}).json()
            _until(lambda: local.get(f"/v1/ingest/jobs/{first['id']}").json()["status"],
                   lambda s: s in ("done", "failed"), timeout=120)
            assert keyed.get("/v1/search", params={"q": "redis"}).status_code == 200
            health = local.get("/healthz").json()
            assert health["status"] == "ok", health
            assert health["database"]["backend"] == "postgresql"
            assert health["database"]["reachable"] is True
            assert {"documents", "identity", "run_lock", "ingest_jobs"} <= \
                set(health["database"]["schema_versions"])
            assert health["vector_store"] == {"kind": "embedded", "reachable": True,
                                              "problem": None}
            assert health["documents"] == len(ALL_PATHS)

            postgres.stop()
            try:
                # The job queue, the catalog behind search, and the key store behind the front
                # door: each says the outage, none is a 500.
                _unavailable(local.get("/v1/ingest/jobs"))
                _unavailable(local.get(f"/v1/ingest/jobs/{first['id']}"))
                _unavailable(local.post("/v1/ingest/jobs", json={"all": True}))
                _unavailable(local.get("/v1/search", params={"q": "redis"}))
                _unavailable(keyed.get("/v1/search", params={"q": "redis"}))
                down = local.get("/healthz")
                assert down.status_code == 200
                assert down.json()["status"] == "degraded"
                assert down.json()["database"] == {
                    "backend": "postgresql", "reachable": False, "schema_versions": {},
                    "problem": down.json()["database"]["problem"]}
                assert "cannot be reached" in down.json()["problem"]
                assert "documents" not in down.json()
                assert anyone.get("/healthz").json() == {"status": "ok"}  # probes see it alive
                time.sleep(2.5)  # the usage flush and the worker try the dead database meanwhile
            finally:
                postgres.start()

            # Back, without a restart: the same app, the same flush and worker threads.
            _until(lambda: keyed.get("/v1/search", params={"q": "redis"}).status_code,
                   lambda s: s == 200)
            assert local.get("/healthz").json()["database"]["reachable"] is True
            job = local.post("/v1/ingest/jobs", json={"all": True, "force": True})
            assert job.status_code == 202, job.text
            done = _until(lambda: local.get(f"/v1/ingest/jobs/{job.json()['id']}").json(),
                          lambda j: j["status"] in ("done", "failed"), timeout=120)
            assert done["status"] == "done", done
            assert done["reports"][0]["seen"] == len(ALL_PATHS)
    finally:
        services.jobs.stop()
