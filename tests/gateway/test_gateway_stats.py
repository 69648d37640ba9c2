"""What the gateway counts of each provider for the console's models view (``stats.py``):
calls, failures, take-overs, tokens, cost and time to first token, against providers on
loopback."""

from __future__ import annotations

import pytest

from citewise.gateway import Gateway
from citewise.gateway.provider import Provider, ProviderSpec
from tests.fakes.openai_provider import OpenAIProvider

MESSAGES = [{"role": "system", "content": "rules"}, {"role": "user", "content": "question"}]


@pytest.fixture
def fakes():
    started = [OpenAIProvider(model=f"model-{i}").start() for i in range(2)]
    for f in started:
        f.reply = "Roll back the release [1]."
    yield started
    for f in started:
        f.stop()


def test_each_provider_is_counted_as_the_chain_walks_it(fakes):
    a = Provider(ProviderSpec(name="a", base_url=fakes[0].base_url, model="model-0"))
    b = Provider(ProviderSpec(name="b", base_url=fakes[1].base_url, model="model-1",
                              input_price=1.0, output_price=2.0))
    gw = Gateway([a, b], backoff=0.01)
    fakes[0].script = ["500", "500"]
    gw.complete(MESSAGES)  # a fails, b takes over
    streamed = gw.stream(MESSAGES)  # a fails again, b streams
    text = "".join(streamed)
    assert text == fakes[1].reply and streamed.completion is not None
    gw.complete(MESSAGES)  # a answers
    stats = {p["name"]: p for p in gw.provider_stats()}
    assert (stats["a"]["requests"], stats["a"]["errors"], stats["a"]["failovers"]) == (3, 2, 0)
    assert stats["a"]["error_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert stats["a"]["ttft_p50_ms"] is None  # it streamed nothing
    assert (stats["b"]["requests"], stats["b"]["errors"], stats["b"]["failovers"]) == (2, 0, 2)
    assert stats["b"]["ttft_p50_ms"] == pytest.approx(streamed.completion.ttft * 1000, abs=0.1)
    assert stats["b"]["tokens_in"] > 0 and stats["b"]["cost"] == pytest.approx(
        (stats["b"]["tokens_in"] * 1.0 + stats["b"]["tokens_out"] * 2.0) / 1e6, abs=1e-6)
    assert [p["breaker"] for p in gw.provider_stats()] == ["closed", "closed"]
    assert stats["a"]["model"] == "model-0" and stats["a"]["kind"] == "openai"
