"""Streamed answers over HTTP: server-sent events from a real server, with a model provider on
loopback behind the gateway; usage and cost land with the caller."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.gateway.settings import ProviderConfig
from citewise.ingest.jobs import run_source
from tests.fakes.openai_provider import OpenAIProvider, cite_first_passage
from tests.kb import folder_source, make_key, write_kb
from tests.live import LiveServer

QUESTION = {"question": "how do I fail over the redis cache?"}


@pytest.fixture(scope="module")
def provider() -> Iterator[OpenAIProvider]:
    fake = OpenAIProvider(model="llama-3.1-8b").start()
    yield fake
    fake.stop()


@pytest.fixture(autouse=True)
def reset(provider):
    provider.mode, provider.script, provider.delay_s, provider.chunk_chars = "ok", [], 0.05, 8
    provider.disconnected_after = None
    provider.reply = cite_first_passage


@pytest.fixture(scope="module")
def live(tmp_path_factory, dense, provider) -> Iterator[tuple[str, object, dict]]:
    base = tmp_path_factory.mktemp("stream")
    kb = write_kb(base / "kb")
    settings = Settings(
        data_dir=base / "data", require_auth=True, sse_keepalive=0.2, answer_cache=False,
        llm_providers=[ProviderConfig(name="loop", base_url=provider.base_url,
                                      model=provider.model, input_price=3.0,
                                      output_price=15.0, timeout=10)])
    services = build_services(settings)
    assert run_source(services.pipeline, folder_source(kb), trigger="t").status == "succeeded"
    headers = make_key(services, "streamer", scopes="search,answer,admin")
    app = create_app(services=services)
    with LiveServer(app, settings) as url:
        yield url, app, headers
    services.close()


def read_events(resp: httpx.Response) -> tuple[list[tuple[str, dict]], list[str]]:
    """Events and comment lines of an SSE response."""
    events, comments, name, data = [], [], None, []
    for line in resp.iter_lines():
        if line.startswith(":"):
            comments.append(line)
        elif line.startswith("event:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data.append(line.split(":", 1)[1].strip())
        elif line == "" and data:
            events.append((name or "message", json.loads("\n".join(data))))
            name, data = None, []
    return events, comments


@pytest.mark.parametrize("how", ["body", "accept"])
def test_answer_streams_server_sent_events(live, how):
    url, _, headers = live
    body = {**QUESTION, "stream": True} if how == "body" else QUESTION
    extra = {"Accept": "text/event-stream"} if how == "accept" else {}
    with httpx.stream("POST", f"{url}/v1/answer", json=body, headers={**headers, **extra},
                      timeout=30) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-request-id"]
        events, _ = read_events(resp)
    names = [n for n, _ in events]
    assert names[0] == "citations" and names[-1] == "done" and "delta" in names
    done = events[-1][1]["answer"]
    assert done["mode"] == "llm" and done["provider"] == "loop" and done["took_ms"] > 0
    assert "".join(d["text"] for n, d in events if n == "delta").strip() == done["answer"]


PROSE = ("Fail over the cache by promoting the replica with the smallest lag [1]. Check that "
         "replication has caught up before you switch [1].\n\n"
         "1. Run a manual Sentinel failover [1]\n2. Restart the checkout pods [1]\n\n"
         "Then watch the hit rate until it recovers [1].")


@pytest.mark.parametrize("door", ["/v1/answer", "/v1/chat/completions"])
def test_a_model_streaming_token_by_token_is_relayed_at_its_pace(live, provider, door):
    """The output guardrail held text to a line or sentence end: a paragraph came as one delta
    at its end, and the last block before its text. Now text follows the model, a few words
    behind, and each block follows its text."""
    url, _, headers = live
    provider.mode, provider.delay_s, provider.chunk_chars = "slow", 0.01, 4
    provider.reply = PROSE
    chunks = -(-len(PROSE) // 4)
    body = {**QUESTION, "stream": True} if door == "/v1/answer" else {
        "model": "citewise", "stream": True,
        "messages": [{"role": "user", "content": QUESTION["question"]}]}
    text, deltas, sent_at_first = "", 0, None
    with httpx.stream("POST", f"{url}{door}", json=body, headers=headers, timeout=30) as resp:
        name = None
        for line in resp.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            data = json.loads(line.split(":", 1)[1])
            if door == "/v1/chat/completions":
                choice = (data.get("choices") or [{}])[0]
                piece = choice.get("delta", {}).get("content")
                if not piece or choice.get("finish_reason"):
                    continue
            elif name == "block":
                block = data["block"]
                last = (block["text"] or block["steps"][-1]["text"]).strip()[-12:]
                assert last in text, f"block {data['index']} came before its text"
                continue
            elif name == "delta":
                piece = data["text"]
            else:
                continue
            if sent_at_first is None:
                sent_at_first = provider.chunks_sent
            deltas += 1
            text += piece
    assert sent_at_first is not None and sent_at_first < chunks * 2 // 3
    assert deltas >= chunks // 3, (deltas, chunks)
    assert text.startswith(PROSE) and "---" not in text  # chat adds its references after it


def test_usage_and_cost_are_recorded_for_the_caller(live):
    url, app, headers = live
    for stream in (False, True):
        resp = httpx.post(f"{url}/v1/answer", json={**QUESTION, "stream": stream},
                          headers=headers, timeout=30)
        assert resp.status_code == 200
    app.state.door.usage.flush()
    rows = {r["route"]: r for r in app.state.door.usage.report(
        datetime.now(UTC) - timedelta(hours=1), group_by="route")}
    row = rows["/v1/answer"]
    assert row["tokens_in"] >= 2 * 812 and row["tokens_out"] > 0
    assert row["cost"] == pytest.approx((row["tokens_in"] * 3.0 + row["tokens_out"] * 15.0)
                                        / 1e6, rel=1e-3)
    by_key = app.state.door.usage.report(datetime.now(UTC) - timedelta(hours=1),
                                         group_by="key")
    assert any(r["key"] == "streamer" and r["tokens_in"] > 0 for r in by_key)
    # Every answer, streamed or not and through either door, names the provider that wrote
    # it: the provider's tokens are all the routes' tokens, and no model call goes unnamed.
    by_provider = {r["provider"]: r for r in app.state.door.usage.report(
        datetime.now(UTC) - timedelta(hours=1), group_by="provider")}
    assert by_provider["loop"]["tokens_in"] == sum(r["tokens_in"] for r in rows.values())
    assert by_provider.get(None, {"tokens_in": 0})["tokens_in"] == 0
    assert by_provider["loop"]["answers"] >= 2


def test_a_quiet_stream_sends_keep_alive_comments(live, provider):
    url, _, headers = live
    provider.mode, provider.delay_s, provider.chunk_chars = "slow", 0.5, 40
    with httpx.stream("POST", f"{url}/v1/answer", json={**QUESTION, "stream": True},
                      headers=headers, timeout=30) as resp:
        events, comments = read_events(resp)
    assert ": ping" in comments and events[-1][0] == "done"


def test_a_client_that_disconnects_cancels_the_upstream_request(live, provider):
    url, _, headers = live
    provider.mode, provider.delay_s = "slow", 0.05
    provider.reply = lambda body: "word [1] " * 200  # 225 chunks, over ten seconds
    with httpx.stream("POST", f"{url}/v1/answer", json={**QUESTION, "stream": True},
                      headers=headers, timeout=30) as resp:
        for line in resp.iter_lines():
            if line.startswith("event: delta"):
                break
    for _ in range(100):
        if provider.disconnected_after is not None:
            break
        time.sleep(0.05)
    assert provider.disconnected_after is not None and provider.disconnected_after < 100


def test_a_client_that_leaves_early_stops_the_model_and_keeps_no_turn(live, provider):
    """Text the guardrails hold back (no line or sentence end yet) sends no event, so the
    producer used to learn of the client's leaving only at the answer's end: the model was read
    to its last token and the turn kept. Now the model's stream stops at its next token."""
    url, app, headers = live
    provider.mode, provider.delay_s, provider.chunk_chars = "slow", 0.03, 8
    # No space, line or sentence end: the guardrails hold all of it back (226 chunks, ~7 s).
    provider.reply = lambda body: "[1]" + "-step" * 360
    conversations = app.state.services.conversations
    with httpx.stream("POST", f"{url}/v1/answer", json={**QUESTION, "stream": True},
                      headers=headers, timeout=30) as resp:
        for line in resp.iter_lines():
            if line.startswith("event: citations"):
                break
    for _ in range(100):
        if provider.disconnected_after is not None:
            break
        time.sleep(0.05)
    assert provider.disconnected_after is not None and provider.disconnected_after < 30
    listed = httpx.get(f"{url}/v1/conversations", headers=headers).json()["conversations"]
    assert listed and listed[0]["turns"] == 0  # started, but no turn was kept
    assert conversations.store.answers(listed[0]["id"]) == []


def test_a_broken_stream_ends_with_an_error_event(live, provider):
    url, _, headers = live
    provider.mode, provider.chunk_chars = "drop", 24  # three chunks: more than the window
    with httpx.stream("POST", f"{url}/v1/answer", json={**QUESTION, "stream": True},
                      headers=headers, timeout=30) as resp:
        events, _ = read_events(resp)
    assert events[-1][0] == "error" and events[-1][1]["received"]
    assert events[-1][1]["type"] == "urn:citewise:error:stream_broken"
    sent = "".join(data["text"] for name, data in events if name == "delta")
    assert events[-1][1]["received"] == sent  # what the reader has, to keep


def test_a_broken_stream_says_what_was_sent_never_the_raw_text(live, provider):
    """The error event's ``received`` used to be the model's raw text: a credential the
    guardrails were still holding back (or had redacted in the deltas) came out there."""
    url, _, headers = live
    token = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"
    provider.mode, provider.chunk_chars = "drop", 20
    provider.reply = lambda body: f"Log in with {token} [1] and then roll back the release [1]."
    with httpx.stream("POST", f"{url}/v1/answer", json={**QUESTION, "stream": True},
                      headers=headers, timeout=30) as resp:
        events, _ = read_events(resp)
    assert events[-1][0] == "error"
    sent = "".join(data["text"] for name, data in events if name == "delta")
    assert token not in json.dumps(events)
    assert events[-1][1]["received"] == sent


def test_every_provider_down_still_answers_extractively(live, provider):
    url, _, headers = live
    provider.mode = "500"
    resp = httpx.post(f"{url}/v1/answer", json=QUESTION, headers=headers, timeout=60)
    assert resp.status_code == 200
    body = resp.json()
    assert body["mode"] == "extractive" and body["citations"] and "no model" in body["reason"]


def test_healthz_shows_the_providers_breakers_to_admins(live):
    url, _, headers = live
    health = httpx.get(f"{url}/healthz", headers=headers).json()
    assert health["answers"] == "llm"
    assert health["llm"]["providers"][0]["name"] == "loop"
    assert health["llm"]["providers"][0]["state"] in ("closed", "open", "half_open")
    assert set(httpx.get(f"{url}/healthz").json()) == {"status"}

