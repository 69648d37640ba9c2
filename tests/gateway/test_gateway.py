"""The model gateway against a provider on loopback that speaks the chat-completions protocol
and misbehaves on request: every failure ends as the router promises."""

from __future__ import annotations

import time

import pytest

from citewise import metrics
from citewise.gateway import Gateway, GatewayError, StreamBroken
from citewise.gateway.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from citewise.gateway.provider import Provider, ProviderSpec
from citewise.gateway.wire import retry_after_seconds, sse_data
from tests.fakes.openai_provider import OpenAIProvider

MESSAGES = [{"role": "system", "content": "rules"}, {"role": "user", "content": "question"}]


@pytest.fixture
def fakes():
    started = [OpenAIProvider(model=f"model-{i}").start() for i in range(2)]
    for f in started:
        f.reply = "Roll back the release [1]. Then check the dashboards [1]."
    yield started
    for f in started:
        f.stop()


def provider(fake: OpenAIProvider, name: str, **spec) -> Provider:
    breaker = spec.pop("breaker", None)
    return Provider(ProviderSpec(name=name, base_url=fake.base_url, model=fake.model, **spec),
                    breaker=breaker)


def gateway(*providers: Provider, **options) -> Gateway:
    options.setdefault("backoff", 0.01)
    return Gateway(list(providers), **options)


def counter(metric, *labels) -> float:
    return metric.labels(*labels)._value.get()


def test_a_completion_carries_the_providers_usage_and_its_cost(fakes):
    gw = gateway(provider(fakes[0], "a", input_price=0.5, output_price=1.5))
    done = gw.complete(MESSAGES)
    assert done.text == fakes[0].reply and done.provider == "a" and done.model == "model-0"
    assert (done.usage.tokens_in, done.usage.tokens_out) == (812, 37)
    assert done.usage.cost == pytest.approx((812 * 0.5 + 37 * 1.5) / 1e6)
    assert not done.usage.estimated and done.failures == []
    assert fakes[0].requests[0]["messages"] == MESSAGES
    assert fakes[0].requests[0]["stream"] is False


def test_usage_is_estimated_when_the_provider_reports_none(fakes):
    fakes[0].send_usage = False
    done = gateway(provider(fakes[0], "a", output_price=2.0)).complete(MESSAGES)
    assert done.usage.estimated and done.usage.tokens_out == round(len(fakes[0].reply) / 4)
    assert done.usage.cost > 0


@pytest.mark.parametrize("mode", ["500", "429", "malformed", "hang"])
def test_a_failing_provider_hands_the_request_to_the_next(fakes, mode):
    fakes[0].script = [mode]
    fakes[0].retry_after = "30"
    fakes[0].hang_s = 2.0
    before = counter(metrics.LLM_FAILOVERS, "first")
    gw = gateway(provider(fakes[0], "first", timeout=0.5), provider(fakes[1], "second"))
    done = gw.complete(MESSAGES)
    assert done.provider == "second" and done.text == fakes[1].reply
    assert len(done.failures) == 1 and done.failures[0].startswith("first:")
    assert counter(metrics.LLM_FAILOVERS, "first") == before + 1
    kind = {"500": "status", "429": "rate_limited", "malformed": "malformed",
            "hang": "timeout"}[mode]
    assert counter(metrics.LLM_ERRORS, "first", kind) >= 1


def test_retry_after_is_honoured_when_it_fits_the_deadline(fakes):
    fakes[0].script = ["429"]
    fakes[0].retry_after = "1"
    gw = gateway(provider(fakes[0], "only"), deadline=10)
    started = time.monotonic()
    done = gw.complete(MESSAGES)
    assert done.provider == "only" and fakes[0].modes_served == ["429", "ok"]
    # The second call waited for the provider's Retry-After, not just the short backoff.
    assert time.monotonic() - started >= 0.95


def test_retry_after_past_the_deadline_gives_up_without_waiting(fakes):
    fakes[0].mode = "429"
    fakes[0].retry_after = "120"
    gw = gateway(provider(fakes[0], "only"), deadline=3)
    started = time.monotonic()
    with pytest.raises(GatewayError) as raised:
        gw.complete(MESSAGES)
    assert time.monotonic() - started < 2.5
    assert len(fakes[0].requests) == 1
    assert raised.value.status_code == 503 and "429" in raised.value.message


def test_retries_stop_at_max_attempts_with_every_failure_named(fakes):
    for f in fakes:
        f.mode = "500"
    gw = gateway(provider(fakes[0], "a"), provider(fakes[1], "b"), max_attempts=3)
    with pytest.raises(GatewayError) as raised:
        gw.complete(MESSAGES)
    assert len(fakes[0].requests) + len(fakes[1].requests) == 3
    assert [f.split(":")[0] for f in raised.value.failures] == ["a", "b", "a"]


def test_a_provider_that_refuses_the_request_is_not_asked_again(fakes):
    gw = gateway(Provider(ProviderSpec(name="wrong", base_url=fakes[0].base_url + "/nowhere",
                                       model="x")), max_attempts=4)
    with pytest.raises(GatewayError):
        gw.complete(MESSAGES)
    assert len(fakes[0].requests) == 0  # 404 on the path: refused, not retried


def test_the_breaker_opens_skips_the_provider_and_closes_after_a_probe(fakes):
    fakes[0].mode = "500"
    breaker = CircuitBreaker(threshold=2, reset_after=0.5)
    a = provider(fakes[0], "a", breaker=breaker)
    gw = gateway(a, provider(fakes[1], "b"), max_attempts=2)
    for _ in range(2):
        assert gw.complete(MESSAGES).provider == "b"
    assert breaker.state == OPEN
    calls = len(fakes[0].requests)
    assert gw.complete(MESSAGES).provider == "b"
    assert len(fakes[0].requests) == calls  # open: not even tried
    health = {h["name"]: h for h in gw.health()}
    assert health["a"]["state"] == OPEN and health["b"]["state"] == CLOSED
    fakes[0].mode = "ok"
    time.sleep(0.6)
    assert breaker.state == HALF_OPEN
    assert gw.complete(MESSAGES).provider == "a"  # the probe
    assert breaker.state == CLOSED


def _closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@pytest.mark.parametrize("call", ["complete", "stream"])
def test_with_every_breaker_open_the_request_gives_up_at_once(fakes, call):
    """The operator's outage: the primary answers 500, the secondary refuses connections. Once
    both breakers were open, each answer waited out the breakers' reset period (57-60 s of a
    90 s deadline) before falling back; now it gives up at once, and the next request after the
    reset period is the probe."""
    fakes[0].mode = "500"
    a = provider(fakes[0], "a", breaker=CircuitBreaker(threshold=1, reset_after=30))
    b = Provider(ProviderSpec(name="b", base_url=_closed_port(), model="m"),
                 breaker=CircuitBreaker(threshold=1, reset_after=30))
    gw = gateway(a, b, deadline=90, backoff=0.25)

    def ask() -> None:
        if call == "complete":
            gw.complete(MESSAGES)
        else:
            list(gw.stream(MESSAGES))

    with pytest.raises(GatewayError):
        ask()
    assert a.breaker.state == OPEN and b.breaker.state == OPEN
    calls = len(fakes[0].requests)
    started = time.monotonic()
    with pytest.raises(GatewayError) as raised:
        ask()
    assert time.monotonic() - started < 2.0  # generous: the figure is in bench_gateway.py
    assert "resting" in raised.value.message and len(fakes[0].requests) == calls
    # After the reset period the next request probes the primary, which has recovered.
    fakes[0].mode = "ok"
    for breaker in (a.breaker, b.breaker):
        breaker.reset_after = 0.2
    time.sleep(0.3)
    assert gw.complete(MESSAGES).provider == "a" and a.breaker.state == CLOSED


def test_half_open_lets_one_probe_through():
    now = [0.0]
    breaker = CircuitBreaker(threshold=1, reset_after=10, clock=lambda: now[0])
    breaker.failure()
    assert breaker.state == OPEN and not breaker.allow()
    now[0] = 10.0
    assert breaker.allow() and not breaker.allow()  # one probe at a time
    breaker.failure()
    assert breaker.state == OPEN and breaker.retry_in() == 10


# Streams -------------------------------------------------------------------------------------


def test_a_stream_yields_the_text_and_ends_with_usage(fakes):
    gw = gateway(provider(fakes[0], "a", input_price=1.0, output_price=1.0))
    streamed = gw.stream(MESSAGES)
    text = "".join(streamed)
    assert text == fakes[0].reply
    done = streamed.completion
    assert done.provider == "a" and done.ttft is not None
    assert done.usage.tokens_in == 812 and not done.usage.estimated
    body = fakes[0].requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("mode", ["drop_early", "malformed", "500", "429"])
def test_a_stream_that_fails_before_its_first_token_fails_over(fakes, mode):
    fakes[0].script = [mode]
    gw = gateway(provider(fakes[0], "a"), provider(fakes[1], "b"))
    streamed = gw.stream(MESSAGES)
    assert "".join(streamed) == fakes[1].reply
    assert streamed.completion.provider == "b" and len(streamed.completion.failures) == 1


def test_a_stream_that_breaks_after_its_first_token_ends_with_what_was_received(fakes):
    fakes[0].script = ["drop"]
    gw = gateway(provider(fakes[0], "a"), provider(fakes[1], "b"))
    received = []
    with pytest.raises(StreamBroken) as raised:
        for delta in gw.stream(MESSAGES):
            received.append(delta)
    assert raised.value.received == "".join(received) == fakes[0].reply[:3 * 8]
    assert fakes[1].requests == []  # never restarted elsewhere: the reader saw text already


def test_a_stream_that_stalls_past_the_timeout_fails_over(fakes):
    fakes[0].script = ["hang"]
    fakes[0].hang_s = 2.0
    gw = gateway(provider(fakes[0], "a", timeout=0.4), provider(fakes[1], "b"))
    streamed = gw.stream(MESSAGES)
    assert "".join(streamed) == fakes[1].reply


def test_closing_a_stream_closes_the_upstream_request(fakes):
    fakes[0].mode = "slow"
    fakes[0].delay_s = 0.05
    fakes[0].reply = "x" * 8 * 60  # sixty chunks, three seconds
    streamed = gateway(provider(fakes[0], "a")).stream(MESSAGES)
    it = iter(streamed)
    next(it), next(it)
    streamed.close()
    for _ in range(100):
        if fakes[0].disconnected_after is not None:
            break
        time.sleep(0.05)
    assert fakes[0].disconnected_after is not None and fakes[0].disconnected_after < 20


def test_sse_parsing_follows_the_event_stream_format():
    lines = [": comment", "data: one", "", "event: x", "data:two", "data: lines", "", "data: 3"]
    assert list(sse_data(lines)) == ["one", "two\nlines", "3"]


def test_retry_after_takes_seconds_or_an_http_date():
    from datetime import UTC, datetime

    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("Thu, 03 Dec 2026 12:00:30 GMT", now) == 30.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None
