"""The console's routes (``/v1/admin/...``) against real stores: the figures they give are the
ones recorded (runs ingested for real, usage seeded by ``tests/console_data.py``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.evaluation.qa import load_golden_set
from citewise.gateway.settings import ProviderConfig
from citewise.ingest.jobs import run_source
from citewise.settings import SourceConfig
from tests.console_data import seed_console
from tests.fakes.openai_provider import OpenAIProvider
from tests.kb import REDIS, clean_env, folder_source, make_key

RIGHT = f"kb/{REDIS}"  # an indexed document, as a reader names the right one


@pytest.fixture
def services(make_services, kb, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "small.md").write_text("# Small\n\nA page that fits.\n")
    (broken / "huge.md").write_text("# Huge\n\n" + "word " * 400 + "\n")
    sources = [folder_source(kb),
               SourceConfig(name="broken", type="folder", path=str(broken), readers=["public"],
                            max_file_bytes=1000, schedule="0 3 * * *")]
    s = make_services(require_auth=True, sources=sources, schedule_ingest="0 * * * *",
                      rate_answer_per_minute=0, rate_search_per_minute=0)
    for source in sources:
        run_source(s.pipeline, source, trigger="t")
    run_source(s.pipeline, sources[0], trigger="t")  # a second run: history of two
    return s


def test_sources_show_runs_failures_and_schedule(services):
    admin = make_key(services, "console-admin", "admin")
    with TestClient(create_app(services=services)) as client:
        got = client.get("/v1/admin/sources", headers=admin)
        assert got.status_code == 200, got.text
        by_name = {s["name"]: s for s in got.json()["sources"]}
        audit = client.app.state.door.audit.read(None, 10, "console.sources.read")
    kb, broken = by_name["kb"], by_name["broken"]
    assert kb["kind"] == "folder" and kb["readers"] == ["public"]
    assert kb["schedule"] == "0 * * * *" and broken["schedule"] == "0 3 * * *"
    expected = services.catalog.source_counts(None)
    assert (kb["documents"], kb["chunks"]) == expected["kb"] and kb["documents"] > 0
    assert len(kb["history"]) == 2 and kb["history"][-1] == kb["last_run"]
    assert kb["history"][0]["run_id"] < kb["history"][1]["run_id"]
    assert kb["last_run"]["added"] == 0 and kb["history"][0]["added"] == kb["documents"]
    assert kb["failed_documents"] == [] and kb["last_success_at"]
    assert broken["last_run"]["status"] == "partial" and broken["last_run"]["failed"] == 1
    assert broken["documents"] == 1
    [failed] = broken["failed_documents"]
    assert failed["uri"] == "huge.md" and "over the limit" in failed["error"]
    assert "max_file_bytes" in failed["hint"]
    assert broken["last_run"]["duration_s"] >= 0
    assert audit and audit[0]["actor"] == "key:console-admin"


# Usage -------------------------------------------------------------------------------------------
@pytest.fixture
def seeded(make_services):
    s = make_services(require_auth=True)
    return s, seed_console(s.stores, principals=6, sources=3, days=30, requests_per_day=8)


def _expected(rows, since: str, until: str) -> dict:
    """The window's figures computed from the seeded requests themselves."""
    inside = [r for r in rows if since <= r.at < until]
    latencies = sorted(r.latency_ms for r in inside)
    return {"requests": len(inside), "errors": sum(r.status >= 400 for r in inside),
            "denied": sum(r.status in (401, 403, 429) for r in inside),
            "answers": sum(r.answers for r in inside),
            "abstentions": sum(r.abstentions for r in inside),
            "cache_hits": sum(r.cache_hits for r in inside),
            "tokens_in": sum(r.tokens_in for r in inside),
            "tokens_out": sum(r.tokens_out for r in inside),
            "cost": round(sum(r.cost for r in inside), 6),
            "p50": latencies[math.ceil(0.5 * len(latencies)) - 1] if latencies else None,
            "p95": latencies[math.ceil(0.95 * len(latencies)) - 1] if latencies else None}


@pytest.mark.parametrize(("window", "points", "step"), [
    ("24h", 24, timedelta(hours=1)), ("7d", 7, timedelta(days=1)), ("30d", 30, timedelta(days=1))])
def test_usage_series_totals_and_tops_are_the_seeded_figures(seeded, window, points, step):
    services, data = seeded
    admin = make_key(services, "console-admin", "admin")
    with TestClient(create_app(services=services)) as client:
        got = client.get("/v1/admin/usage", params={"window": window}, headers=admin)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["window"] == window and len(body["series"]) == points
    starts = [datetime.fromisoformat(p["at"]) for p in body["series"]]
    assert starts[0] == datetime.fromisoformat(body["since"])
    assert all(b - a == step for a, b in zip(starts, starts[1:], strict=False))
    assert starts[-1] + step == datetime.fromisoformat(body["until"])
    assert starts[-1] <= datetime.now(UTC) < starts[-1] + step  # the current bucket is last
    seeded_only = [r for r in body["top"]["principal"] if r["name"].startswith("user:person")]
    ours = [r for r in body["top"]["principal"] if not r["name"].startswith("user:person")]
    expected = _expected(data.usage, body["since"], body["until"])
    # The admin's own calls are usage too: the totals are the seeded requests and those.
    totals = body["totals"]
    assert totals["requests"] == expected["requests"] + sum(r["requests"] for r in ours)
    assert sum(r["requests"] for r in seeded_only) == expected["requests"] > 0
    for figure in ("errors", "denied", "answers", "abstentions", "cache_hits", "tokens_in",
                   "tokens_out"):
        assert sum(r[figure] for r in seeded_only) == expected[figure], figure
        assert totals[figure] >= expected[figure], figure
    assert sum(p["answers"] for p in body["series"]) == totals["answers"]
    assert sum(p["requests"] for p in body["series"]) == totals["requests"]
    assert sum(r["cost"] for r in seeded_only) == pytest.approx(expected["cost"], abs=1e-5)
    # p50/p95: the upper bound of the true value's bucket, never below it, at most 25% above.
    if not ours:
        for q in ("p50", "p95"):
            assert expected[q] <= totals[f"{q}_ms"] <= expected[q] * 1.25, q
    providers = {r["name"] for r in body["top"]["provider"]}
    assert {"primary", "fallback", "(none)"} <= providers
    routes = {r["name"]: r for r in body["top"]["route"]}
    assert routes["/v1/answer"]["answers"] + routes["/v1/answer"]["abstentions"] > 0
    assert routes["/v1/search"]["answers"] == 0
    assert len(body["top"]["key"]) <= 20


def test_the_console_and_citewise_usage_give_the_same_numbers(seeded):
    services, _ = seeded
    admin = make_key(services, "console-admin", "admin")
    with TestClient(create_app(services=services)) as client:
        body = client.get("/v1/admin/usage", params={"window": "7d"}, headers=admin).json()
    exe = str(Path(sys.executable).with_name("citewise"))
    figures = ("requests", "errors", "denied", "tokens_in", "tokens_out", "cost", "cache_hits",
               "answers", "abstentions", "p50_ms", "p95_ms")
    compared = 0
    for group in ("principal", "provider", "route", "key"):
        proc = subprocess.run(
            [exe, "--data-dir", str(services.settings.data_dir), "usage", "--since",
             body["since"], "--by", group, "--json"],
            env=clean_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        printed = {(r[group] or "(none)"): r for r in json.loads(proc.stdout)}
        for row in body["top"][group]:
            # The console's own call (the admin key, no model) was recorded after it answered:
            # the groups it counts in are not compared.
            if row["name"] in ("key:console-admin", "console-admin", "/v1/admin/usage") or (
                    group == "provider" and row["name"] == "(none)"):
                continue
            assert {f: row[f] for f in figures} == {f: printed[row["name"]][f]
                                                     for f in figures}, (group, row["name"])
            compared += 1
    assert compared == 6 + 2 + 4 + 5  # principals, providers, routes, keys (and none)


# Models ------------------------------------------------------------------------------------------
def test_models_without_a_model_list_none(seeded):
    services, _ = seeded
    admin = make_key(services, "console-admin", "admin")
    with TestClient(create_app(services=services)) as client:
        got = client.get("/v1/admin/models", headers=admin)
    assert got.status_code == 200
    assert got.json()["providers"] == [] and str(os.getpid()) in got.json()["replica"]


# Feedback ----------------------------------------------------------------------------------------
def test_feedback_triage_adds_to_the_golden_set_and_dismisses(services, tmp_path):
    seeded_data = seed_console(services.stores, principals=3, sources=1, days=2, feedback=6,
                               right_documents=(RIGHT,))
    assert seeded_data.feedback == 6
    admin = make_key(services, "console-admin", "admin")
    with TestClient(create_app(services=services)) as client:
        listed = client.get("/v1/admin/feedback", headers=admin).json()
        items = listed["items"]
        assert len(items) == 6 and {i["status"] for i in items} == {"open"}
        assert [i["id"] for i in items] == sorted((i["id"] for i in items), reverse=True)
        assert len(listed["counts"]) == 30
        assert sum(d["helpful"] for d in listed["counts"]) == 2
        assert sum(d["not_helpful"] for d in listed["counts"]) == 4
        unhelpful = next(i for i in items if not i["helpful"])
        assert unhelpful["right_document"] == RIGHT
        assert unhelpful["citations"][0]["locator"].startswith("lines ")

        added = client.post(f"/v1/admin/feedback/{unhelpful['id']}/golden", headers=admin)
        assert added.status_code == 201, added.text
        entry = added.json()["entry"]
        assert entry["relevant"] == [RIGHT] and entry["split"] == "feedback"
        assert entry["question"] == unhelpful["question"]
        golden = Path(added.json()["path"])
        assert golden == services.settings.data_dir / "golden" / "feedback.jsonl"
        [question] = load_golden_set(golden)  # what `citewise eval --qa` reads
        assert question.relevant == [RIGHT] and question.split == "feedback"

        helpful = next(i for i in items if i["helpful"])
        assert client.post(f"/v1/admin/feedback/{helpful['id']}/dismiss",
                           headers=admin).json() == {"id": helpful["id"], "status": "dismissed"}
        by_status = {s: [i["id"] for i in client.get(
            "/v1/admin/feedback", params={"status": s}, headers=admin).json()["items"]]
            for s in ("open", "added", "dismissed")}
        assert by_status["added"] == [unhelpful["id"]]
        assert by_status["dismissed"] == [helpful["id"]] and len(by_status["open"]) == 4

        # Not helpful, and no word of which document was right: nothing to add.
        services.stores.conversations.add_feedback(unhelpful["answer_id"], "user:eve", False,
                                                   "no", None, "2026-12-01T00:00:00+00:00")
        [vague] = [i for i in client.get("/v1/admin/feedback", params={"status": "open"},
                                         headers=admin).json()["items"]
                   if i["principal"] == "user:eve"]
        refused = client.post(f"/v1/admin/feedback/{vague['id']}/golden", headers=admin)
        assert refused.status_code == 422 and "right document" in refused.json()["detail"]
        assert client.post("/v1/admin/feedback/999999/dismiss",
                           headers=admin).status_code == 404
        actions = [e["action"] for e in client.get(
            "/v1/audit", params={"actor": "key:console-admin"}, headers=admin).json()["entries"]]
    assert {"feedback.golden", "feedback.dismiss", "console.feedback.read"} <= set(actions)


def test_the_audit_log_filters_by_actor_action_and_outcome(services):
    admin = make_key(services, "console-admin", "admin")
    plain = make_key(services, "plain", "search")
    with TestClient(create_app(services=services)) as client:
        client.get("/v1/admin/sources", headers=admin)
        assert client.get("/v1/admin/sources", headers=plain).status_code == 403
        denied = client.get("/v1/audit", params={"outcome": "denied"}, headers=admin).json()
        mine = client.get("/v1/audit", params={"actor": "key:console-admin",
                                               "action": "console.sources.read",
                                               "since": "1h"}, headers=admin).json()
    assert [e["actor"] for e in denied["entries"]] == ["key:plain"]
    assert [e["action"] for e in mine["entries"]] == ["console.sources.read"]


def test_models_show_each_providers_calls_failovers_and_the_answers_provider(
        make_services, kb):
    """Two providers on loopback; the first fails once (500): its error and the second's
    take-over are counted, and the answer's usage row names the provider that wrote it."""
    first, second = OpenAIProvider(model="m-1").start(), OpenAIProvider(model="m-2").start()
    try:
        for fake in (first, second):
            fake.reply = "Fail over the cache with the sentinel command [1]."
        first.script = ["500"]
        services = make_services(
            require_auth=True, answer_cache=False, llm_max_attempts=2,
            llm_providers=[ProviderConfig(name="first", base_url=first.base_url, model="m-1"),
                           ProviderConfig(name="second", base_url=second.base_url,
                                          model="m-2", input_price=1.0, output_price=2.0)])
        run_source(services.pipeline, folder_source(kb), trigger="t")
        admin = make_key(services, "console-admin", "admin")
        asker = make_key(services, "asker", "answer")
        with TestClient(create_app(services=services)) as client:
            answered = client.post("/v1/answer", headers=asker,
                                   json={"question": "How do I fail over the redis cache?"})
            assert answered.status_code == 200 and answered.json()["provider"] == "second"
            got = client.get("/v1/admin/models", headers=admin).json()
            usage = client.get("/v1/admin/usage", headers=admin).json()
    finally:
        first.stop()
        second.stop()
    by_name = {p["name"]: p for p in got["providers"]}
    assert [p["name"] for p in got["providers"]] == ["first", "second"]
    assert by_name["first"]["model"] == "m-1" and by_name["first"]["breaker"] == "closed"
    assert (by_name["first"]["requests"], by_name["first"]["errors"]) == (1, 1)
    assert by_name["first"]["error_rate"] == 1.0 and by_name["first"]["failovers"] == 0
    second_stats = by_name["second"]
    assert second_stats["requests"] >= 1 and second_stats["errors"] == 0
    assert second_stats["failovers"] == 1 and second_stats["tokens_in"] > 0
    assert second_stats["cost"] == pytest.approx(
        (second_stats["tokens_in"] * 1.0 + second_stats["tokens_out"] * 2.0) / 1e6)
    assert got["replica"].endswith(f":{os.getpid()}")
    [provider_row] = [r for r in usage["top"]["provider"] if r["name"] == "second"]
    assert provider_row["requests"] == 1 and provider_row["answers"] == 1
    assert provider_row["tokens_in"] == answered.json()["usage"]["tokens_in"]
