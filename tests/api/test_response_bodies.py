"""The typed routes send exactly the bytes they sent when they returned the services' dicts:
a response model that dropped a key, added a default, reordered keys or turned an int into a
float would change what clients read. Each route's body is compared with FastAPI's rendering
of the service's own answer, read right after from the same state (a withheld turn, a repair,
each usage grouping included)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from fastapi.encoders import jsonable_encoder
from fastapi.testclient import TestClient
from starlette.datastructures import Headers

from citewise.api.app import create_app
from citewise.api.conversations import Viewer
from citewise.ingest.jobs import run_source
from citewise.ingest.repair import verify_index
from tests.kb import REDIS, folder_source, make_key, write_kb


def rendered(value) -> bytes:
    """What FastAPI sends for a route that returns ``value`` with no response model."""
    return json.dumps(jsonable_encoder(value), ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory, dense):
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings

    base = tmp_path_factory.mktemp("bodies")
    kb = write_kb(base / "kb")
    services = build_services(Settings(
        data_dir=base / "data", require_auth=True, ingest_allowed_paths=str(base),
        rate_search_per_minute=0, rate_answer_per_minute=0, rate_ingest_per_minute=0))
    run_source(services.pipeline, folder_source(kb), trigger="t")
    admin = make_key(services, "bodies-admin", "search,answer,ingest,admin")
    with TestClient(create_app(services=services)) as client:
        client.headers.update(admin)
        who = client.app.state.door.authenticator.authenticate(Headers(admin), "testclient")
        yield client, services, who, kb
    services.close()


def test_ingest_jobs_and_runs(served):
    client, services, _, kb = served
    started = client.post("/v1/ingest/jobs", json={"path": str(kb), "name": "kb2",
                                                   "readers": ["public"]})
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    for _ in range(600):
        job = services.jobs.get(job_id)
        if job.status in ("done", "failed"):
            break
        time.sleep(0.1)
    assert job.status == "done" and job.reports, job
    assert client.get(f"/v1/ingest/jobs/{job_id}").content == rendered(job.to_dict())
    assert client.get("/v1/ingest/jobs").content == rendered(
        {"jobs": [j.to_dict() for j in services.jobs.jobs()]})
    runs = services.sources.list_runs(None, 20)
    assert client.get("/v1/ingest/runs").content == rendered({"runs": runs})
    run_id = runs[0]["id"]
    assert client.get(f"/v1/ingest/runs/{run_id}").content == rendered(
        services.sources.get_run(run_id))


def test_verify_and_repair(served):
    client, services, _, _ = served
    for body in ({}, {"repair": True}):
        got = client.post("/v1/ingest/verify", json=body)
        with services.run_lock.held("test"):
            expected = verify_index(services.pipeline, fix=bool(body), force=False)
        assert got.content == rendered(expected), body


def test_conversations_a_withheld_turn_and_feedback(served):
    client, services, who, _ = served
    first = client.post("/v1/answer", json={"question": "How do I fail over the Redis cache?"})
    conversation_id = first.json()["conversation_id"]
    client.post("/v1/answer", json={"question": "and how do I check which node is primary?",
                                    "conversation_id": conversation_id})
    cited = {c["path"] for c in first.json()["citations"]}
    assert REDIS in cited
    redis = next(d for d in services.catalog.documents_of_source("kb").values()
                 if d.path == REDIS)
    services.catalog.update_document_fields(redis.id, readers=["group:nobody"])
    try:
        viewer = Viewer.of(who)
        got = client.get(f"/v1/conversations/{conversation_id}")
        expected = services.conversations.get(conversation_id, viewer)
        assert any(t.get("withheld_reason") for t in expected["turns"])
        assert got.content == rendered(expected)
        assert client.get("/v1/conversations").content == rendered(
            {"conversations": services.conversations.owned_by(viewer, 50)})
    finally:
        services.catalog.update_document_fields(redis.id, readers=list(redis.readers))
    answer_id = first.json()["answer_id"]
    feedback = client.post(f"/v1/answers/{answer_id}/feedback",
                           json={"helpful": False, "comment": "step 2", "wrong_citation": 1})
    assert feedback.status_code == 201
    assert feedback.content == rendered({"answer_id": answer_id, "helpful": False,
                                         "comment": "step 2", "wrong_citation": 1,
                                         "right_document": None,
                                         "created_at": feedback.json()["created_at"]})


def test_keys_audit_and_usage(served):
    client, services, who, _ = served
    door = client.app.state.door
    created = client.post("/v1/keys", json={"name": "bodies-k1", "scopes": ["search"],
                                            "expires": "30d", "limits": {"search_per_day": 9}})
    assert created.status_code == 201, created.text
    secret = created.json()["secret"]
    assert created.content == rendered({**door.keys.get("bodies-k1").public(),
                                        "secret": secret})
    revoked = client.delete("/v1/keys/bodies-k1")
    assert revoked.content == rendered(door.keys.get("bodies-k1").public())
    # The calling key's last use may be written between the two reads: the others are exact.
    listed = client.get("/v1/keys").json()["keys"]
    expected = json.loads(rendered([k.public() for k in door.keys.list()]))
    for shown in (listed, expected):
        for key in shown:
            if key["id"] == who.key_id:
                key.pop("last_used_at")
    assert json.dumps(listed) == json.dumps(expected)

    got = client.get("/v1/audit", params={"action": "key.create"})
    assert got.content == rendered({"entries": door.audit.read(None, 100, "key.create")})

    time.sleep(1.1)  # every usage row so far is before `until`; this test's next ones after
    door.flush()
    until = datetime.now(UTC).replace(microsecond=0)
    since = "2000-01-01T00:00:00+00:00"
    for group_by in ("principal", "key", "route", "day"):
        got = client.get("/v1/usage", params={"since": since, "until": until.isoformat(),
                                               "group_by": group_by})
        rows = door.usage.report(datetime.fromisoformat(since), until, group_by)
        assert rows and got.content == rendered(
            {"since": since, "group_by": group_by, "rows": rows}), group_by


def test_sources(served):
    client, services, who, _ = served
    assert client.get("/v1/sources").content == rendered(
        {"sources": services.library.sources(who.identity, every_name=True)})


def test_console_routes(served):
    """The console's routes send what their services return, key for key and in order."""
    from citewise.api.console.feedback import triage
    from citewise.api.console.sources import source_statuses
    from citewise.api.console.usage import dashboard

    client, services, _, _ = served
    settings = services.settings
    assert client.get("/v1/admin/sources").content == rendered({"sources": source_statuses(
        services.sources, services.catalog, list(settings.sources), settings.default_readers,
        settings.ingest.schedule_ingest)})
    for window in ("24h", "7d", "30d"):
        # Read first (it writes the usage kept so far): the call's own row comes after it.
        expected = dashboard(client.app.state.door.usage, window)
        got = client.get("/v1/admin/usage", params={"window": window})
        assert got.content == rendered(expected), window
    models = client.get("/v1/admin/models").json()
    assert models["providers"] == []
    assert client.get("/v1/admin/feedback").content == rendered(
        triage(services.stores.conversations, None, 100))
