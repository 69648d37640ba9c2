"""A replica whose database goes away answers 503 problem documents, keeps its background
threads alive, and recovers by itself when the database is back, without a restart; ``/healthz``
says what is down (to admins) and stays 200 for probes.

The real PostgreSQL of the ``postgres`` fixture is stopped and started again under a running
app. What is in that database here: the run lock and the ingest jobs (the stores' tables join it
with their PostgreSQL implementations, and the same doors answer for them).
"""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from citewise.api.app import create_app
from tests.kb import ALL_PATHS, folder_source, make_key, write_kb

PROBLEM = "application/problem+json"


def _until(read, done, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"still {value}"
        time.sleep(0.1)


def test_a_replica_answers_503_while_the_database_is_away_and_recovers(tmp_path, postgres,
                                                                        make_services):
    url = postgres.create_database()
    services = make_services(tmp_path / "data", database_url=url, database_timeout=1.0)
    services.settings.sources = [folder_source(write_kb(tmp_path / "kb"))]
    app = create_app(services=services)
    services.jobs.start()  # this replica runs jobs: its worker must outlive the outage
    with TestClient(app, headers=make_key(services, "ops", scopes="ingest,admin")) as c, \
            TestClient(app) as anyone:
        health = c.get("/healthz").json()
        assert health["status"] == "ok", health
        assert health["database"]["backend"] == "postgresql"
        assert health["database"]["reachable"] is True
        assert {"run_lock": 1, "ingest_jobs": 1}.items() <= \
            health["database"]["schema_versions"].items()
        assert health["vector_store"] == {"kind": "embedded", "reachable": True,
                                          "problem": None}

        postgres.stop()
        try:
            for method, path, body in (("GET", "/v1/ingest/jobs", None),
                                       ("GET", "/v1/ingest/jobs/0123456789ab", None),
                                       ("POST", "/v1/ingest/jobs", {"all": True})):
                resp = c.request(method, path, json=body)
                assert resp.status_code == 503, (method, path, resp.text)
                assert resp.headers["content-type"] == PROBLEM
                problem = resp.json()
                assert problem["type"] == "urn:citewise:error:backend_unavailable"
                assert "cannot be reached" in problem["detail"]
                assert "reconnects by itself" in problem["hint"]
            down = c.get("/healthz")
            assert down.status_code == 200
            assert down.json()["status"] == "degraded"
            assert down.json()["database"]["reachable"] is False
            assert down.json()["database"]["schema_versions"] == {}
            assert "cannot be reached" in down.json()["problem"]
            assert "documents" not in down.json()
            assert anyone.get("/healthz").json() == {"status": "ok"}  # probes see it alive
            time.sleep(1.5)  # the worker polls the dead database a few times meanwhile
        finally:
            postgres.start()

        # Back, without a restart: the same app and the same worker thread.
        _until(lambda: c.get("/v1/ingest/jobs").status_code, lambda s: s == 200)
        assert c.get("/healthz").json()["database"]["reachable"] is True
        job = c.post("/v1/ingest/jobs", json={"all": True})
        assert job.status_code == 202, job.text
        done = _until(lambda: c.get(f"/v1/ingest/jobs/{job.json()['id']}").json(),
                      lambda j: j["status"] in ("done", "failed"), timeout=120)
        assert done["status"] == "done", done
        assert done["reports"][0]["added"] == len(ALL_PATHS)
    services.jobs.stop()
