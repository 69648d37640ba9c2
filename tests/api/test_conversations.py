"""Conversations: durable turns that survive a restart, owned by one principal (404 for anyone
else), serialised, forgotten when idle; follow-ups rewritten; feedback kept and exported."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.cli import cli
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.ingest.jobs import run_source
from tests.kb import POSTGRES, REDIS, clean_env, folder_source, stored_rows, write_kb

DANA = {"X-Citewise-User": "dana"}
BOB = {"X-Citewise-User": "bob"}
LOOPBACK = ("127.0.0.1", 5000)


@pytest.fixture
def data(tmp_path, dense):
    kb = write_kb(tmp_path / "kb")
    services = build_services(Settings(data_dir=tmp_path / "data"))
    assert run_source(services.pipeline, folder_source(kb), trigger="t").status == "succeeded"
    services.close()
    return tmp_path / "data"


@contextmanager
def client(data, **settings) -> Iterator[TestClient]:
    """The API over the data folder, as one server process: closed (the index released) at the
    end, as a restart would."""
    services = build_services(Settings(data_dir=data, **settings))
    try:
        with TestClient(create_app(services=services), client=LOOPBACK) as c:
            yield c
    finally:
        services.close()


def ask(c: TestClient, question: str, conversation_id: str | None = None, headers=DANA,
        **extra) -> dict:
    body = {"question": question, **extra}
    if conversation_id:
        body["conversation_id"] = conversation_id
    resp = c.post("/v1/answer", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_three_turns_survive_a_restart_and_follow_ups_are_rewritten(data):
    with client(data) as c:
        first = ask(c, "How do I fail over the Redis primary?")
        cid = first["conversation_id"]
        assert first["rewritten_by"] == "asked" and first["citations"][0]["path"] == REDIS
        second = ask(c, "and how do I check that it worked?", cid)
        assert second["rewritten_by"] == "rule" and second["conversation_id"] == cid
        assert "redis" in second["question"].lower()
        assert second["citations"][0]["path"] == REDIS
    with client(data) as c:  # a new process on the same data folder
        third = ask(c, "what about the postgres disk filling up?", cid)
        assert third["citations"][0]["path"] == POSTGRES
        got = c.get(f"/v1/conversations/{cid}", headers=DANA).json()
    assert [t["turn"] for t in got["turns"]] == [1, 2, 3]
    assert got["turns"][1]["standalone_question"] == second["question"]
    assert got["turns"][1]["answer"]["citations"][0]["path"] == REDIS


def test_a_conversation_is_invisible_to_anyone_else(data):
    with client(data) as c:
        first = ask(c, "How do I fail over the Redis primary?")
        cid, answer_id = first["conversation_id"], first["answer_id"]
        for resp in (c.get(f"/v1/conversations/{cid}", headers=BOB),
                     c.delete(f"/v1/conversations/{cid}", headers=BOB),
                     c.post("/v1/answer", json={"question": "and then?",
                                                "conversation_id": cid}, headers=BOB),
                     c.post(f"/v1/answers/{answer_id}/feedback", json={"helpful": True},
                            headers=BOB)):
            assert resp.status_code == 404, resp.text
            assert "Redis" not in resp.text
        assert c.get("/v1/conversations", headers=BOB).json() == {"conversations": []}
        assert c.get(f"/v1/conversations/{cid}", headers=DANA).status_code == 200
        assert c.delete(f"/v1/conversations/{cid}", headers=DANA).status_code == 204
        assert c.get(f"/v1/conversations/{cid}", headers=DANA).status_code == 404


def test_two_requests_on_one_conversation_are_serialised(data):
    with client(data) as c:
        cid = ask(c, "How do I fail over the Redis primary?")["conversation_id"]
        results: list[dict] = []

        def follow_up(q: str) -> None:
            results.append(ask(c, q, cid))

        threads = [threading.Thread(target=follow_up, args=(q,)) for q in
                   ("and how do I check it worked?", "and who owns it?",
                    "and what if that fails?")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        turns = c.get(f"/v1/conversations/{cid}", headers=DANA).json()["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    assert len({r["answer_id"] for r in results}) == 3


def test_an_idle_conversation_is_forgotten(data):
    with client(data, conversation_idle_hours=0.5 / 3600) as c:
        cid = ask(c, "How do I fail over the Redis primary?")["conversation_id"]
        time.sleep(0.6)
        assert c.get(f"/v1/conversations/{cid}", headers=DANA).status_code == 404
        resp = c.post("/v1/answer", json={"question": "and then?", "conversation_id": cid},
                      headers=DANA)
        assert resp.status_code == 404
        # Forgotten for good: the server's hourly upkeep (which also runs a second after
        # start) or this call deletes the row, whichever comes first.
        services = c.app.state.services
        services.conversations.expire()
        left = stored_rows(services).execute(
            "SELECT COUNT(*) FROM conversations WHERE id = ?", (cid,)).fetchone()[0]
        assert left == 0


def test_feedback_is_kept_and_exported_as_golden_set_candidates(data):
    with client(data) as c:
        answer = ask(c, "How do I fail over the Redis primary?")
        resp = c.post(f"/v1/answers/{answer['answer_id']}/feedback",
                      json={"helpful": True, "comment": "spot on"}, headers=DANA)
        assert resp.status_code == 201
        bad = ask(c, "what about the postgres disk filling up?")
        c.post(f"/v1/answers/{bad['answer_id']}/feedback",
               json={"helpful": False, "wrong_citation": 1}, headers=DANA)
        assert c.post(f"/v1/answers/{bad['answer_id']}/feedback", json={"helpful": "yes"},
                      headers=DANA).status_code == 422
    result = CliRunner().invoke(cli, ["--data-dir", str(data), "feedback", "export"],
                                env=clean_env())
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert rows[0]["helpful"] and rows[0]["expected_sources"] == [REDIS]
    assert rows[0]["question"] == "How do I fail over the Redis primary?"
    assert rows[1]["helpful"] is False and rows[1]["wrong_citation"] == 1


def test_usage_counts_cache_hits(data):
    from datetime import UTC, datetime, timedelta

    with client(data) as c:
        for headers in ({}, {}, {"Cache-Control": "no-cache"}):
            resp = c.post("/v1/answer", json={"question": "How do I fail over the Redis primary?"},
                          headers={**DANA, **headers})
            assert resp.status_code == 200
        assert [resp.headers["x-citewise-cache"]] == ["bypass"]
        rows = c.app.state.door.usage.report(datetime.now(UTC) - timedelta(hours=1),
                                             group_by="route")
    row = next(r for r in rows if r["route"] == "/v1/answer")
    assert row["requests"] == 3 and row["cache_hits"] == 1


def test_a_conversation_holds_at_most_the_configured_turns(data):
    with client(data, conversation_max_turns=2) as c:
        cid = ask(c, "How do I fail over the Redis primary?")["conversation_id"]
        ask(c, "and how do I check that it worked?", cid)
        resp = c.post("/v1/answer", json={"question": "and then?", "conversation_id": cid},
                      headers=DANA)
        assert resp.status_code == 409, resp.text
        problem = resp.json()
        assert "2 turns" in problem["detail"] and "conversation_id" in problem["hint"]
        assert len(c.get(f"/v1/conversations/{cid}", headers=DANA).json()["turns"]) == 2
        assert ask(c, "and then?")["conversation_id"] != cid  # a new one is fine


def test_the_right_document_is_kept_and_exported_as_golden_set_entries(data, tmp_path):
    from citewise.api.ranking.training import load_training_questions

    with client(data) as c:
        good = ask(c, "How do I fail over the Redis primary?")
        c.post(f"/v1/answers/{good['answer_id']}/feedback", json={"helpful": True},
               headers=DANA)
        bad = ask(c, "the database volume is nearly out of space, what now?")
        resp = c.post(f"/v1/answers/{bad['answer_id']}/feedback", headers=DANA,
                      json={"helpful": False, "right_document": f"  {POSTGRES} "})
        assert resp.status_code == 201, resp.text
        assert resp.json()["right_document"] == POSTGRES
        for reference in (None, "runbooks/no-such-page.md"):  # nothing to learn from these
            other = ask(c, "what is the meaning of life?")
            c.post(f"/v1/answers/{other['answer_id']}/feedback", headers=DANA,
                   json={"helpful": False, "right_document": reference})
        too_long = c.post(f"/v1/answers/{bad['answer_id']}/feedback", headers=DANA,
                          json={"helpful": False, "right_document": "x" * 1001})
        assert too_long.status_code == 422
        stored = stored_rows(c.app.state.services).execute(
            "SELECT helpful, right_document FROM feedback ORDER BY id").fetchall()
        # An operator adds the second to the golden set in the console (the route's own
        # store call; the console tests drive the route itself).
        assert c.app.state.services.stores.conversations.set_feedback_status(
            2, "added", "user:ops", "2026-12-06T00:00:00.000+00:00")
    assert [tuple(r) for r in stored] == [(1, None), (0, POSTGRES), (0, None),
                                          (0, "runbooks/no-such-page.md")]
    golden = tmp_path / "feedback-golden.jsonl"
    result = CliRunner().invoke(cli, ["--data-dir", str(data), "feedback", "export",
                                      "--golden", str(golden)], env=clean_env())
    assert result.exit_code == 0, result.output
    assert "wrote 2 golden-set entries" in result.output
    assert "no indexed document is named 'runbooks/no-such-page.md'" in result.output
    rows = [json.loads(line) for line in golden.read_text().splitlines()]
    assert [(r["question"], r["relevant"]) for r in rows] == [
        ("How do I fail over the Redis primary?", [f"kb/{REDIS}"]),
        ("the database volume is nearly out of space, what now?", [f"kb/{POSTGRES}"])]
    for r in rows:
        assert r["answerable"] is True and r["split"] == "feedback"
        assert r["must_contain_any"] == [] and r["kind"] and r["from_answer"]
    # The trainer takes the file as it is.
    assert len(load_training_questions([golden]).questions) == 2
    # --status keeps one triage state: what operators added, read from the shared store
    # rather than the serving replica's file.
    for status, expected in (("added", [f"kb/{POSTGRES}"]), ("open", [f"kb/{REDIS}"])):
        only = tmp_path / f"{status}.jsonl"
        result = CliRunner().invoke(cli, ["--data-dir", str(data), "feedback", "export",
                                          "--golden", str(only), "--status", status],
                                    env=clean_env())
        assert result.exit_code == 0, result.output
        assert [json.loads(line)["relevant"] for line in only.read_text().splitlines()] == [
            expected]
