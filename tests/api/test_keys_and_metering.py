"""API keys (hashed, scoped, bound to a principal, revocable), rate limits and quotas with the
standard headers, usage and cost per principal, the append-only audit log, and the hardening
every response gets (request ids, security headers, CORS only when allowed)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.identity.keys import ApiKeys
from citewise.api.metering.store import Usage
from citewise.ingest.jobs import run_source
from tests.kb import SECRET, SECRET_WORDS, clean_env, folder_source, make_key, stored_rows

LOOPBACK = ("127.0.0.1", 50000)
SECRET_Q = {"question": "How are the payment provider API keys rotated?"}


@pytest.fixture
def services(make_services, kb):
    s = make_services(require_auth=True, rate_answer_per_minute=0, rate_search_per_minute=0)
    assert run_source(s.pipeline, folder_source(kb), trigger="t").status == "succeeded"
    return s


def _leaks(resp) -> bool:
    body = resp.json()
    return any(c["path"] == SECRET for c in body.get("citations", [])) or any(
        w in body.get("answer", "") for w in SECRET_WORDS)


# Keys ------------------------------------------------------------------------------------------


def test_only_a_hash_of_the_secret_is_stored(services):
    key, secret = ApiKeys(services.stores.keys).create("ci-bot", "search",
                                                       principal="user:ci-bot")
    assert secret.startswith("cw_") and len(secret) > 50
    dump = "\n".join(stored_rows(services).iterdump())
    # The token after "cw_<key id>_" is base64url and may itself hold "_", so it is taken
    # by position: splitting on the last "_" once tested a one-letter tail (a CI flake).
    token = secret.split("_", 2)[2]
    assert len(token) == 43
    assert secret not in dump and token not in dump
    assert hashlib.sha256(secret.encode()).hexdigest() in dump
    assert "secret" not in json.dumps(ApiKeys(services.stores.keys).get("ci-bot").public())
    # The redaction every document goes through recognises a leaked key.
    from citewise.ingest.redact import redact_text

    redacted, found = redact_text(f"the bot uses {secret} for now\n")
    assert secret not in redacted and found[0]["kind"] == "citewise-key"


def test_a_key_acts_as_its_principal_within_its_scopes(services):
    security = make_key(services, "sec-bot", "search,answer", principal="group:security")
    plain = make_key(services, "plain", "search,answer")
    search_only = make_key(services, "reader", "search")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        assert _leaks(c.post("/v1/answer", json=SECRET_Q, headers=security))
        assert not _leaks(c.post("/v1/answer", json=SECRET_Q, headers=plain))
        resp = c.post("/v1/answer", json=SECRET_Q, headers=search_only)
        assert resp.status_code == 403 and "'answer' scope" in resp.json()["detail"]
        assert c.post("/v1/search", json={"query": "redis"}, headers=search_only).status_code \
            == 200
        for path in ("/v1/usage", "/v1/audit", "/v1/keys", "/metrics"):
            assert c.get(path, headers=security).status_code == 403, path


def test_only_keys_with_the_right_may_name_the_end_user(services):
    bot = make_key(services, "slack-bot", "search,answer", assert_identity=True)
    plain = make_key(services, "plain", "search,answer")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        as_dana = {"X-Citewise-User": "dana", "X-Citewise-Groups": "security"}
        assert _leaks(c.post("/v1/answer", json=SECRET_Q, headers={**bot, **as_dana}))
        assert not _leaks(c.post("/v1/answer", json=SECRET_Q, headers=bot))  # nobody named
        resp = c.post("/v1/answer", json=SECRET_Q, headers={**plain, **as_dana})
        assert resp.status_code == 403 and "--assert-identity" in resp.json()["hint"]
        bad = c.post("/v1/search", json={"query": "x"},
                     headers={**bot, "X-Citewise-Groups": "sec urity, ;drop"})
        assert bad.status_code == 400


def test_revoked_and_expired_keys_are_refused(services):
    store = ApiKeys(services.stores.keys)
    revoked = make_key(services, "old", "search")
    expiring = make_key(services, "temp", "search", expires="1m")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        assert c.post("/v1/search", json={"query": "x"}, headers=revoked).status_code == 200
        store.revoke("old")
        resp = c.post("/v1/search", json={"query": "x"}, headers=revoked)
        assert resp.status_code == 401 and "revoked" in resp.json()["detail"]
        assert c.post("/v1/search", json={"query": "x"}, headers=expiring).status_code == 200
        past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat(timespec="seconds")
        stored_rows(services).execute(
            "UPDATE api_keys SET expires_at = ? WHERE name = 'temp'", [past])
        resp = c.post("/v1/search", json={"query": "x"}, headers=expiring)
        assert resp.status_code == 401 and "expired" in resp.json()["detail"]
    with pytest.raises(Exception, match="already exists"):
        store.create("old", "search")  # names are never reused


def test_keys_over_http_are_admin_only_and_audited(services):
    admin = make_key(services, "admin", "admin")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        created = c.post("/v1/keys", headers=admin, json={
            "name": "ci", "scopes": ["search"], "principal": "user:ci-bot", "expires": "30d",
            "limits": {"search_per_minute": 5}})
        assert created.status_code == 201, created.text
        secret = created.json()["secret"]
        listed = c.get("/v1/keys", headers=admin).json()["keys"]
        assert {k["name"] for k in listed} == {"admin", "ci"}
        assert secret not in json.dumps(listed)
        ci = {"Authorization": f"Bearer {secret}"}
        assert c.post("/v1/search", json={"query": "x"}, headers=ci).status_code == 200
        bad = c.post("/v1/keys", headers=admin, json={"name": "x", "scopes": ["root"]})
        assert bad.status_code == 422
        assert c.delete("/v1/keys/ci", headers=admin).json()["status"] == "revoked"
        assert c.post("/v1/search", json={"query": "x"}, headers=ci).status_code == 401
        entries = c.get("/v1/audit", headers=admin).json()["entries"]
    actions = [e["action"] for e in entries]
    assert {"key.create", "key.revoke", "keys.list", "request.refused"} <= set(actions)
    create = next(e for e in entries if e["action"] == "key.create")
    assert create["actor"] == "key:admin" and create["target"] == "ci"
    assert secret not in json.dumps(entries)


def test_the_audit_log_is_append_only(services):
    audit = stored_rows(services)
    make_key(services, "admin", "admin")
    from citewise.api.metering.audit import AuditLog

    AuditLog(services.stores.metering).record("key.create", actor="operator:test", target="admin")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        audit.execute("UPDATE audit SET actor = 'someone else'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        audit.execute("DELETE FROM audit")


def test_a_flood_of_refusals_is_logged_in_bounded_form(services):
    from citewise.api.metering import audit as audit_module

    sent = audit_module.DENIED_PER_MINUTE + 30
    started = time.time()
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for _ in range(sent):
            assert c.post("/v1/search", json={"query": "x"},
                          headers={"Authorization": "Bearer cw_nope"}).status_code == 401
    # The bound is per calendar minute, and the flood may straddle one (CI's run did: 40 rows).
    minutes = int(time.time() // 60) - int(started // 60) + 1
    from citewise.api.metering.audit import AuditLog

    count = len(AuditLog(services.stores.metering).read(action="request.refused", limit=10**4))
    assert count <= minutes * audit_module.DENIED_PER_MINUTE < sent, (count, minutes)


# Rate limits and quotas ------------------------------------------------------------------------


def test_over_the_limit_is_429_with_the_standard_headers(make_services, kb):
    services = make_services(require_auth=True, rate_answer_per_minute=3)
    run_source(services.pipeline, folder_source(kb), trigger="t")
    bot = make_key(services, "bot", "search,answer", assert_identity=True)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        dana = {**bot, "X-Citewise-User": "dana"}
        for remaining in (2, 1, 0):
            resp = c.post("/v1/answer", json={"question": "redis?"}, headers=dana)
            assert resp.status_code == 200
            assert resp.headers["ratelimit"].startswith(f'"answer-minute";r={remaining};t=')
            # The person's limit, and the bot key's as a whole (CITEWISE_IDENTITY_KEY_LIMITS).
            assert resp.headers["ratelimit-policy"] == \
                '"answer-minute";q=3;w=60, "key-answer-minute";q=300;w=60'
        refused = c.post("/v1/answer", json={"question": "redis?"}, headers=dana)
        assert refused.status_code == 429
        problem = refused.json()
        assert problem["type"] == "urn:citewise:error:rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 20
        assert refused.headers["ratelimit"].startswith('"answer-minute";r=0;t=')
        # Other people, and other route classes, have their own buckets.
        assert c.post("/v1/answer", json={"question": "redis?"},
                      headers={**bot, "X-Citewise-User": "li"}).status_code == 200
        assert c.post("/v1/search", json={"query": "redis"}, headers=dana).status_code == 200


def test_a_key_of_its_own_caps_everyone_it_acts_for(make_services, kb):
    services = make_services(require_auth=True, rate_answer_per_minute=100)
    run_source(services.pipeline, folder_source(kb), trigger="t")
    bot = make_key(services, "bot", "answer", assert_identity=True,
                   limits=["answer_per_minute=2"])
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for user in ("a", "b"):
            assert c.post("/v1/answer", json={"question": "redis?"},
                          headers={**bot, "X-Citewise-User": user}).status_code == 200
        refused = c.post("/v1/answer", json={"question": "redis?"},
                         headers={**bot, "X-Citewise-User": "c"})
        assert refused.status_code == 429
        assert "key-answer-minute" in refused.json()["detail"]


def test_the_ingest_limit_counts_jobs_started_not_refusals(make_services, tmp_path):
    """The docs say ``ingest`` counts jobs started; the probe (issue 30, item 15a) found that
    refused requests (403, 422) used up the minute's allowance too."""
    allowed = tmp_path / "allowed"
    (allowed / "docs").mkdir(parents=True)
    (allowed / "docs" / "guide.md").write_text("# Guide\n\nDeploys go out on Tuesdays.\n")
    services = make_services(require_auth=True, rate_ingest_per_minute=2,
                             ingest_allowed_paths=str(allowed), default_readers="group:eng")
    key = make_key(services, "ci", "ingest")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for _ in range(3):  # a folder outside the allowed ones: 403
            resp = c.post("/v1/ingest/jobs", json={"path": str(tmp_path)}, headers=key)
            assert resp.status_code == 403, resp.text
        for _ in range(3):  # a body that does not validate: 422
            resp = c.post("/v1/ingest/jobs", json={"path": 7, "nonsense": True}, headers=key)
            assert resp.status_code == 422, resp.text
        started = c.post("/v1/ingest/jobs", json={"path": str(allowed / "docs")}, headers=key)
        assert started.status_code == 202, started.text
        # The six refusals took nothing: one job started, one left of two.
        assert started.headers["ratelimit"].startswith('"ingest-minute";r=1;'), \
            started.headers["ratelimit"]
        wait_for_job(c, started.json()["id"], key)
        assert c.post("/v1/ingest/jobs", json={"path": str(allowed / "docs")},
                      headers=key).status_code == 202
        refused = c.post("/v1/ingest/jobs", json={"path": str(allowed / "docs")}, headers=key)
        assert refused.status_code == 429, refused.text


def wait_for_job(client: TestClient, job_id: str, headers: dict) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = client.get(f"/v1/ingest/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def test_a_key_that_names_its_users_is_capped_as_a_whole_by_default(make_services):
    """Found by the probe (issue 30, item 5): without --limit, a key that may assert identity
    named a new X-Citewise-User on each request and got a fresh per-person allowance each
    time."""
    services = make_services(require_auth=True, rate_search_per_minute=100,
                             identity_key_limits="search_per_minute=3")
    bot = make_key(services, "bot", "search", assert_identity=True)
    ci = make_key(services, "ci", "search", principal="user:ci")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for user in ("a", "b", "c"):
            resp = c.post("/v1/search", json={"query": "redis"},
                          headers={**bot, "X-Citewise-User": user})
            assert resp.status_code == 200, resp.text
        refused = c.post("/v1/search", json={"query": "redis"},
                         headers={**bot, "X-Citewise-User": "d"})
        assert refused.status_code == 429, refused.text
        assert "key-search-minute" in refused.json()["detail"]
        assert '"key-search-minute";q=3;w=60' in refused.headers["ratelimit-policy"]
        # A key that acts only as itself has its principal's limit, not the bot default.
        for _ in range(4):
            assert c.post("/v1/search", json={"query": "redis"}, headers=ci).status_code == 200


def test_a_key_s_own_limits_win_over_the_identity_key_default(make_services):
    services = make_services(require_auth=True)  # the shipped default
    bot = make_key(services, "bot", "search,answer", assert_identity=True,
                   limits=["answer_per_minute=0"])
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        resp = c.post("/v1/search", json={"query": "redis"},
                      headers={**bot, "X-Citewise-User": "a"})
        assert resp.status_code == 200, resp.text
        assert '"key-search-minute";q=1200;w=60' in resp.headers["ratelimit-policy"]
        resp = c.post("/v1/answer", json={"question": "redis?"},
                      headers={**bot, "X-Citewise-User": "a"})
        assert "key-answer" not in resp.headers["ratelimit-policy"]  # its own 0: unlimited


def test_limits_survive_a_restart(make_services, kb):
    services = make_services(require_auth=True, rate_search_per_minute=0,
                             quota_search_per_day=2)
    key = make_key(services, "bot", "search")
    app = create_app(services=services)
    with TestClient(app, client=LOOPBACK) as c:
        for _ in range(2):
            assert c.post("/v1/search", json={"query": "x"}, headers=key).status_code == 200
    # The lifespan's shutdown flushed the buckets; a new server reads them back.
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        resp = c.post("/v1/search", json={"query": "x"}, headers=key)
        assert resp.status_code == 429, resp.text
        assert resp.headers["ratelimit-policy"] == '"search-day";q=2;w=86400'
        assert int(resp.headers["retry-after"]) > 3600


# Usage -----------------------------------------------------------------------------------------


def test_usage_per_principal_key_route_and_day(services):
    admin = make_key(services, "admin", "admin")
    bot = make_key(services, "bot", "search,answer", assert_identity=True)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for user, n in (("dana", 3), ("li", 1)):
            for _ in range(n):
                c.post("/v1/search", json={"query": "redis", "top_k": 2},
                       headers={**bot, "X-Citewise-User": user})
        c.post("/v1/answer", json={"question": "redis?"}, headers={**bot, "X-Citewise-User": "li"})
        c.post("/v1/search", json={"query": "x"}, headers={"Authorization": "Bearer cw_bad"})
        by_principal = {r["principal"]: r for r in c.get(
            "/v1/usage", params={"group_by": "principal"}, headers=admin).json()["rows"]}
        by_route = {r["route"]: r for r in c.get(
            "/v1/usage", params={"group_by": "route"}, headers=admin).json()["rows"]}
        by_key = {r["key"]: r for r in c.get(
            "/v1/usage", params={"group_by": "key"}, headers=admin).json()["rows"]}
        by_day = c.get("/v1/usage", params={"group_by": "day", "since": "1d"},
                       headers=admin).json()["rows"]
    assert by_principal["user:dana"]["requests"] == 3
    assert by_principal["user:dana"]["results"] == 6  # two results per search
    assert by_principal["user:li"]["requests"] == 2
    assert by_principal["unauthenticated"]["denied"] == 1
    assert by_route["/v1/search"]["requests"] == 5 and by_route["/v1/answer"]["requests"] == 1
    assert by_key["bot"]["requests"] == 5
    assert by_day[0]["day"] == datetime.now(UTC).date().isoformat()
    assert all(r["mean_latency_ms"] > 0 for r in by_principal.values())


def test_old_usage_folds_into_hours_and_expires(services):
    usage = stored_rows(services)
    log = _usage_log(services)
    now = datetime.now(UTC)
    for days, n in ((10, 4), (500, 2), (0, 1)):
        at = (now - timedelta(days=days)).isoformat(timespec="milliseconds")
        for _ in range(n):
            log.record(Usage(at, "user:dana", "bot", "/v1/search", "POST", 200, 12.0, 3))
    log.flush()
    assert log.compact() == 6
    assert usage.execute("SELECT count(*) FROM usage").fetchone()[0] == 1
    hourly = usage.execute("SELECT * FROM usage_hourly").fetchall()
    assert len(hourly) == 1 and hourly[0]["requests"] == 4  # the 500-day-old ones expired
    report = log.report(now - timedelta(days=30), group_by="principal")
    assert report[0]["requests"] == 5 and report[0]["results"] == 15


def _usage_log(services):
    from citewise.api.metering.usage import UsageLog

    return UsageLog(services.stores.metering, services.stores.keys, raw_days=7,
                    retention_days=400)


def test_the_cli_prints_usage_and_manages_keys(services):
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        key = make_key(services, "bot", "search")
        for _ in range(3):
            c.post("/v1/search", json={"query": "redis"}, headers=key)
    data = str(services.settings.data_dir)
    exe = str(Path(sys.executable).with_name("citewise"))

    def run(*args):
        proc = subprocess.run([exe, "--data-dir", data, *args], env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = run("usage", "--by", "key")
    line = next(line for line in out.splitlines() if line.startswith("bot"))
    assert line.split()[1] == "3"
    created = run("keys", "create", "ci", "--scopes", "search", "--expires", "90d")
    assert created.splitlines()[1].startswith("cw_")
    assert "limits" not in created  # a key acting as itself has its principal's limits
    bot = run("keys", "create", "slack-bot", "--scopes", "search,answer", "--assert-identity",
              "--limit", "answer_per_minute=600")
    assert bot.splitlines()[1].startswith("cw_")
    assert ("limits for the key as a whole, over everyone it acts for: answer_per_minute=600, "
            "search_per_minute=1200 (search_per_minute from CITEWISE_IDENTITY_KEY_LIMITS"
            in bot.splitlines()[2]), bot
    assert "ci" in run("keys", "list") and "active" in run("keys", "list")
    assert "revoked key 'ci'" in run("keys", "revoke", "ci")
    assert "key.revoke" in run("audit", "--action", "key.revoke")


# Hardening -------------------------------------------------------------------------------------


def test_request_ids_and_security_headers(services):
    admin = make_key(services, "admin", "admin")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        given = c.post("/v1/search", json={"query": "x"},
                       headers={**admin, "X-Request-Id": "trace-42"})
        assert given.headers["x-request-id"] == "trace-42"
        odd = c.post("/v1/search", json={"query": "x"},
                     headers={**admin, "X-Request-Id": "no spaces or\tcontrol"})
        assert odd.headers["x-request-id"] != "no spaces or\tcontrol"
        assert len(odd.headers["x-request-id"]) == 32
        for resp in (given, c.get("/healthz"), c.post("/v1/search", json={})):
            assert resp.headers["x-content-type-options"] == "nosniff"
            assert resp.headers["x-frame-options"] == "DENY"
            assert resp.headers["x-request-id"]
        assert given.headers["cache-control"] == "no-store"
        refused = c.post("/v1/search", json={"query": "x"}, headers={"X-Request-Id": "r-1"})
        assert refused.status_code == 401 and refused.headers["x-request-id"] == "r-1"
        entry = c.get("/v1/audit", headers=admin,
                      params={"action": "request.refused"}).json()["entries"][0]
        assert entry["request_id"] == "r-1"


def test_cors_is_off_unless_origins_are_allowed(make_services):
    preflight = {"Origin": "https://portal.example.com", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    closed = make_services()
    with TestClient(create_app(services=closed), client=LOOPBACK) as c:
        resp = c.options("/v1/search", headers=preflight)
        assert "access-control-allow-origin" not in resp.headers
    open_ = make_services(data_dir=closed.settings.data_dir.parent / "d2",
                          cors_origins="https://portal.example.com")
    with TestClient(create_app(services=open_), client=LOOPBACK) as c:
        resp = c.options("/v1/search", headers=preflight)
        assert resp.headers["access-control-allow-origin"] == "https://portal.example.com"
        other = c.options("/v1/search", headers={**preflight, "Origin": "https://evil.test"})
        assert "access-control-allow-origin" not in other.headers
