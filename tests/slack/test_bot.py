"""The Slack bot end to end: a fake Slack Web API on loopback, signed HTTP events, a real
citewise server over the demo knowledge base, the bot in between as its own HTTP app."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from citewise.api.app import create_app
from citewise.api.settings import Settings
from citewise.api.slack.api import CitewiseAPI
from citewise.api.slack.bot import Bot, build_app
from citewise.api.slack.events import events_app
from citewise.api.slack.people import People
from citewise.api.slack.settings import SlackChannelConfig
from citewise.api.slack.threads import Threads
from tests.fakes.slack_api import BOT_TOKEN, SlackAPI
from tests.kb import make_key, stored_rows
from tests.live import LiveServer, free_port

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the signing secret of Slack's docs' example
USERS = {"U0DANA": "dana@fernhill.example", "U0BOB": "bob@fernhill.example"}
RESTRICTED = "payments-provider-api-key-rotation.md"
ROTATION_Q = "How do we rotate the payment provider API keys?"


@pytest.fixture(scope="module")
def citewise(demo_kb) -> Iterator[tuple[str, str]]:
    services, _ = demo_kb
    key = make_key(services, "slack-bot", scopes="search,answer", assert_identity=True)
    with LiveServer(create_app(services=services), services.settings) as url:
        yield url, key["Authorization"].split()[1]


@pytest.fixture(scope="module")
def slack() -> Iterator[SlackAPI]:
    fake = SlackAPI(USERS, {"security-team": ["U0DANA"]}).start()
    yield fake
    fake.stop()


def make_bot(citewise_url: str, key: str, slack: SlackAPI, tmp_path, **channels) -> Bot:
    client = WebClient(token=BOT_TOKEN, base_url=slack.url,
                       retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=2)])
    return Bot(CitewiseAPI(citewise_url, key, timeout=30), client, server_url=citewise_url,
               people=People(client, {"security-team": "security"}),
               threads=Threads(tmp_path / "threads.db"),
               channels={c: SlackChannelConfig(id=c, **opts) for c, opts in channels.items()})


@pytest.fixture
def bot_url(citewise, slack, tmp_path) -> Iterator[tuple[str, Bot]]:
    bot = make_bot(*citewise, slack, tmp_path)
    with LiveServer(events_app(build_app(bot, signing_secret=SECRET)), Settings()) as url:
        yield url, bot


def signed(body: dict, secret: str = SECRET) -> tuple[bytes, dict]:
    raw = json.dumps(body).encode()
    ts = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
    return raw, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}",
                 "Content-Type": "application/json"}


_TS = [1733230000.0]


def event(event: dict) -> tuple[dict, str]:
    _TS[0] += 1
    ts = f"{_TS[0]:.6f}"
    event = {"ts": ts, "event_ts": ts, **event}
    return {"token": "unused", "team_id": "T0FERNHILL", "api_app_id": "A0CITEWISE",
            "event": event, "type": "event_callback", "event_id": f"Ev{int(_TS[0])}",
            "event_time": int(_TS[0])}, ts


def send(url: str, body: dict, secret: str = SECRET) -> httpx.Response:
    raw, headers = signed(body, secret)
    return httpx.post(f"{url}/slack/events", content=raw, headers=headers, timeout=10)


def posted_text(messages: list[dict]) -> str:
    return json.dumps([m.get("blocks") or m.get("text") for m in messages])


def test_a_mention_gets_a_threaded_answer_with_working_source_links(bot_url, slack, citewise):
    url, bot = bot_url
    body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                      "text": "<@U0BOT> how do I fail over the redis cache?"})
    sent = time.monotonic()
    resp = send(url, body)
    acked = time.monotonic() - sent
    assert resp.status_code == 200
    reaction = slack.wait_for("reactions.add", where=lambda a: a.get("timestamp") == ts)[0]
    answer = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)[0]
    print(f"HTTP ack {acked * 1000:.0f} ms, 👀 after {bot.ack_seconds[-1] * 1000:.0f} ms; "
          f"blocks posted:\n{json.dumps(answer['blocks'], indent=1)}")
    assert reaction["name"] == "eyes"
    text = json.dumps(answer["blocks"])
    assert "aws elasticache test-failover" in text
    links = re.findall(r"<(http[^|>]+)\|\[1\]>", text)
    assert links, text
    sources = [b for b in answer["blocks"] if b["type"] == "context" and
               "*Sources*" in b["elements"][0]["text"]]
    assert sources and "redis-cache failover" in sources[0]["elements"][0]["text"]
    # The link opens the cited document for someone who may read it.
    document = httpx.get(links[0].split("#")[0], headers={
        "Authorization": f"Bearer {citewise[1]}"}, timeout=10)
    assert document.status_code == 200 and "redis" in document.text.lower()
    assert any(b.get("block_id") == "citewise_feedback" for b in answer["blocks"])


def test_a_follow_up_in_the_thread_continues_the_conversation(bot_url, slack, citewise):
    url, bot = bot_url
    first, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                       "text": "<@U0BOT> how do I fail over the redis cache?"})
    send(url, first)
    slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)
    follow, _ = event({"type": "message", "channel_type": "channel", "user": "U0BOB",
                       "channel": "C0INCIDENT", "thread_ts": ts,
                       "text": "and how do I check that it worked?"})
    assert send(url, follow).status_code == 200
    replies = slack.wait_for("chat.postMessage", 2, where=lambda a: a.get("thread_ts") == ts)
    assert "redis-cache failover" in posted_text(replies[1:])
    conversation = bot.threads.get("C0INCIDENT", ts)
    turns = httpx.get(f"{citewise[0]}/v1/conversations/{conversation}", headers={
        "Authorization": f"Bearer {citewise[1]}"}, timeout=10).json()["turns"]
    assert [t["turn"] for t in turns] == [1, 2]
    assert turns[1]["standalone_question"] != turns[1]["question"]  # rewritten in context


def test_restricted_runbooks_reach_only_their_readers(bot_url, slack):
    url, _ = bot_url
    outcomes = {}
    for user, channel, kind in (("U0BOB", "D0BOB", "message"), ("U0DANA", "D0DANA", "message"),
                                ("U0DANA", "C0GENERAL", "app_mention")):
        body, ts = event({"type": kind, "channel_type": "im" if kind == "message" else
                          "channel", "user": user, "channel": channel,
                          "text": ("<@U0BOT> " if kind == "app_mention" else "") + ROTATION_Q})
        send(url, body)
        outcomes[(user, channel)] = posted_text(slack.wait_for(
            "chat.postMessage", where=lambda a, ts=ts: a.get("thread_ts") == ts))
    assert RESTRICTED not in outcomes[("U0BOB", "D0BOB")]  # not in security
    assert "Rotating payment provider API keys" not in outcomes[("U0BOB", "D0BOB")]
    assert "Rotating payment provider API keys" in outcomes[("U0DANA", "D0DANA")]  # in it
    # In a channel everyone reads, even a security member gets only what everyone may read.
    assert "Rotating payment provider API keys" not in outcomes[("U0DANA", "C0GENERAL")]


def test_a_forged_signature_is_rejected(bot_url, slack):
    url, _ = bot_url
    body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                      "text": "<@U0BOT> how do I fail over the redis cache?"})
    assert send(url, body, secret="not-the-secret").status_code == 401
    raw, headers = signed(body)
    headers["X-Slack-Request-Timestamp"] = str(int(time.time()) - 600)  # a replayed request
    assert httpx.post(f"{url}/slack/events", content=raw, headers=headers).status_code == 401
    time.sleep(0.5)
    assert not [a for a in slack.called("chat.postMessage") if a.get("thread_ts") == ts]


def test_a_timestamp_that_is_not_a_number_is_refused_not_a_crash(bot_url, slack):
    """Found by the probe (issue 30, item 7): the SDK's check does int(timestamp), a 500."""
    url, _ = bot_url
    body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                      "text": "<@U0BOT> how do I fail over the redis cache?"})
    raw, headers = signed(body)
    for stamp in ("soon", "1e9", "", "١٧٣٣٢٣٠٠٠٠"):  # the last: Arabic-Indic digits
        resp = httpx.post(f"{url}/slack/events", content=raw,
                          headers={**headers, "X-Slack-Request-Timestamp": stamp.encode()})
        assert resp.status_code == 401, (stamp, resp.text)
        assert resp.headers["content-type"] == "application/problem+json"
    time.sleep(0.5)
    assert not [a for a in slack.called("chat.postMessage") if a.get("thread_ts") == ts]


def test_a_retried_or_replayed_event_is_answered_once(citewise, slack, tmp_path):
    """Found by the probe (issue 30, item 7): a validly signed event sent again within five
    minutes was answered twice. Slack's retries carry the same event_id, with
    X-Slack-Retry-Num; the ids outlive a restart of the bot."""
    from citewise.api.slack.deliveries import Deliveries

    state = tmp_path / "slack-threads.db"
    bot = make_bot(*citewise, slack, tmp_path)
    bot.deliveries = Deliveries(state)
    body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                      "text": "<@U0BOT> how do I fail over the redis cache?"})

    def answers() -> list:
        return [a for a in slack.called("chat.postMessage") if a.get("thread_ts") == ts]

    with LiveServer(events_app(build_app(bot, signing_secret=SECRET)), Settings()) as url:
        assert send(url, body).status_code == 200
        # While the first is being answered, and after: a replay and Slack's retry.
        assert send(url, body).status_code == 200
        raw, headers = signed(body)
        retry = httpx.post(f"{url}/slack/events", content=raw, timeout=10, headers={
            **headers, "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
        assert retry.status_code == 200
        slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)
        assert send(url, body).status_code == 200
        time.sleep(1.0)
        assert len(answers()) == 1
    # A new bot process with the same state file does not answer it either.
    again = make_bot(*citewise, slack, tmp_path)
    again.deliveries = Deliveries(state)
    with LiveServer(events_app(build_app(again, signing_secret=SECRET)), Settings()) as url:
        assert send(url, body).status_code == 200
        other, other_ts = event({"type": "app_mention", "user": "U0BOB",
                                 "channel": "C0INCIDENT", "text": "<@U0BOT> redis failover?"})
        assert send(url, other).status_code == 200  # a new event is answered as usual
        slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == other_ts)
    assert len(answers()) == 1


def test_a_citewise_outage_gives_a_short_friendly_message(slack, citewise, tmp_path):
    bot = make_bot(f"http://127.0.0.1:{free_port()}", citewise[1], slack, tmp_path)
    with LiveServer(events_app(build_app(bot, signing_secret=SECRET)), Settings()) as url:
        body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                          "text": "<@U0BOT> how do I fail over the redis cache?"})
        send(url, body)
        reply = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)[0]
    assert reply["text"] == "citewise cannot be reached right now; try again in a minute."


def test_slack_rate_limits_are_waited_out(bot_url, slack):
    url, _ = bot_url
    slack.ratelimit.add("chat.postMessage")
    body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                      "text": "<@U0BOT> what does the Envoy response flag UH mean?"})
    send(url, body)
    assert slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)


def test_a_person_without_an_email_is_not_answered_as_anyone(bot_url, slack):
    url, _ = bot_url
    slack.no_email.add("U0BOB")
    try:
        body, ts = event({"type": "message", "channel_type": "im", "user": "U0BOB",
                          "channel": "D0BOB", "text": "how do I fail over the redis cache?"})
        send(url, body)
        reply = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)[0]
    finally:
        slack.no_email.discard("U0BOB")
    assert "cannot tell who you are" in reply["text"]


def test_a_code_question_gets_the_function_with_its_lines(bot_url, slack):
    url, _ = bot_url
    body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                      "text": "<@U0BOT> Which function refuses an ingest run that would delete "
                              "most of a source?"})
    send(url, body)
    answer = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)[0]
    print(f"blocks posted:\n{json.dumps(answer['blocks'], indent=1)}")
    text = json.dumps(answer["blocks"])
    assert "_check_mass_deletion" in text and "ingest/pipeline.py" in text


def test_socket_mode_answers_acknowledges_and_reconnects(citewise, slack, tmp_path):
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    from tests.fakes.slack_api import APP_TOKEN

    slack.start_socket_mode()
    bot = make_bot(*citewise, slack, tmp_path)
    handler = SocketModeHandler(build_app(bot, signing_secret=None), APP_TOKEN)
    handler.client.ping_interval = 1
    handler.connect()
    try:
        body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                          "text": "<@U0BOT> how do I fail over the redis cache?"})
        slack.push(body, "57d6a792-4d35-4d0f-b8d0-f1b1c2d3e4f5")
        answer = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)
        assert "aws elasticache test-failover" in posted_text(answer)
        assert "57d6a792-4d35-4d0f-b8d0-f1b1c2d3e4f5" in slack.acks
        # Slack cycles connections; the bot connects again and keeps answering.
        slack.drop_connection()
        end = time.monotonic() + 30
        while slack.connections < 2 and time.monotonic() < end:
            time.sleep(0.1)
        assert slack.connections >= 2
        body, ts = event({"type": "app_mention", "user": "U0BOB", "channel": "C0INCIDENT",
                          "text": "<@U0BOT> what does the Envoy response flag UH mean?"})
        slack.push(body, "0f0e0d0c-0000-4000-8000-000000000002")
        assert slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)
    finally:
        handler.close()


def signed_form(fields: dict, secret: str = SECRET) -> tuple[bytes, dict]:
    from urllib.parse import urlencode

    raw = urlencode(fields).encode()
    ts = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
    return raw, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}",
                 "Content-Type": "application/x-www-form-urlencoded"}


def test_ask_answers_only_the_asker_and_share_reasks_as_the_channel(bot_url, slack):
    url, _ = bot_url
    raw, headers = signed_form({
        "token": "unused", "team_id": "T0FERNHILL", "channel_id": "C0GENERAL",
        "user_id": "U0DANA", "command": "/ask", "text": ROTATION_Q,
        "response_url": slack.response_url, "trigger_id": "13345224609.738474920.8088930838"})
    resp = httpx.post(f"{url}/slack/events", content=raw, headers=headers, timeout=10)
    assert resp.status_code == 200
    reply = slack.wait_for("response_url")[-1]
    assert reply["response_type"] == "ephemeral"
    assert "Rotating payment provider API keys" in json.dumps(reply["blocks"])  # dana may
    share = next(b for b in reply["blocks"] if b.get("block_id") == "citewise_share")
    question = share["elements"][0]["value"]
    before = len(slack.called("chat.postMessage"))
    raw, headers = signed_form({"payload": json.dumps({
        "type": "block_actions", "user": {"id": "U0DANA"}, "team": {"id": "T0FERNHILL"},
        "channel": {"id": "C0GENERAL"}, "response_url": slack.response_url,
        "actions": [{"action_id": "citewise_share", "block_id": "citewise_share",
                     "value": question, "type": "button"}]})})
    assert httpx.post(f"{url}/slack/events", content=raw, headers=headers).status_code == 200
    shared = slack.wait_for("chat.postMessage", before + 1)[before:]
    # Shared in the channel, the answer is asked again as the channel: no restricted content.
    assert "Rotating payment provider API keys" not in posted_text(shared)


def test_feedback_buttons_reach_the_feedback_api(bot_url, slack, citewise, demo_kb):
    url, bot = bot_url
    body, ts = event({"type": "message", "channel_type": "im", "user": "U0BOB",
                      "channel": "D0BOB", "text": "how do I fail over the redis cache?"})
    send(url, body)
    answer = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)[0]
    buttons = next(b for b in answer["blocks"] if b.get("block_id") == "citewise_feedback")
    answer_id = buttons["elements"][1]["value"]
    raw, headers = signed_form({"payload": json.dumps({
        "type": "block_actions", "user": {"id": "U0BOB"}, "team": {"id": "T0FERNHILL"},
        "channel": {"id": "D0BOB"}, "message": {"ts": "1.0", "thread_ts": ts},
        "actions": [{"action_id": "citewise_not_helpful", "block_id": "citewise_feedback",
                     "value": answer_id, "type": "button"}]})})
    assert httpx.post(f"{url}/slack/events", content=raw, headers=headers).status_code == 200
    human = slack.wait_for("chat.postMessage", 2, where=lambda a: a.get("thread_ts") == ts)[1]
    assert "can help" in human["text"]
    # ...and a box for the document that held the answer, sent with Enter.
    box = next(b for b in human["blocks"] if b["type"] == "input")
    assert box["block_id"] == f"citewise_right_document:{answer_id}" and box["dispatch_action"]
    raw, headers = signed_form({"payload": json.dumps({
        "type": "block_actions", "user": {"id": "U0BOB"}, "team": {"id": "T0FERNHILL"},
        "channel": {"id": "D0BOB"}, "message": {"ts": "2.0", "thread_ts": ts},
        "actions": [{"type": "plain_text_input", "action_id": "citewise_right_document",
                     "block_id": box["block_id"], "value": "runbooks/redis-cache-failover.md"}]})})
    assert httpx.post(f"{url}/slack/events", content=raw, headers=headers).status_code == 200
    noted = slack.wait_for("chat.postMessage", 3, where=lambda a: a.get("thread_ts") == ts)[2]
    assert "runbooks/redis-cache-failover.md" in noted["text"]
    services, _ = demo_kb
    rows = stored_rows(services).execute(
        "SELECT helpful, principal, right_document FROM feedback WHERE answer_id = ? "
        "ORDER BY id", (answer_id,)).fetchall()
    assert [tuple(r) for r in rows] == [
        (0, "user:bob@fernhill.example", None),
        (0, "user:bob@fernhill.example", "runbooks/redis-cache-failover.md")]


def test_channel_settings_decide_triggers_identity_and_visibility(citewise, slack, tmp_path):
    bot = make_bot(*citewise, slack, tmp_path,
                   C0ASKME={"mention_only": False, "sources": ["runbooks"]},
                   C0SECOPS={"ephemeral": True})
    with LiveServer(events_app(build_app(bot, signing_secret=SECRET)), Settings()) as url:
        body, ts = event({"type": "message", "channel_type": "channel", "user": "U0BOB",
                          "channel": "C0ASKME", "text": "how do I fail over the redis cache?"})
        send(url, body)  # no mention needed here
        answer = slack.wait_for("chat.postMessage", where=lambda a: a.get("thread_ts") == ts)
        assert "runbooks" in json.dumps(answer) or "redis-cache failover" in posted_text(answer)
        body, ts = event({"type": "app_mention", "user": "U0DANA", "channel": "C0SECOPS",
                          "text": f"<@U0BOT> {ROTATION_Q}"})
        send(url, body)
        private = slack.wait_for("chat.postEphemeral", where=lambda a: a.get("thread_ts") == ts)
    # Ephemeral: only the asker sees it, so it is answered as the asker (a security member).
    assert private[0]["user"] == "U0DANA"
    assert "Rotating payment provider API keys" in posted_text(private)
