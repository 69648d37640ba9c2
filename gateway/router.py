"""The chain of providers: routing, retries with backoff, failover, a deadline, usage and cost.

A request walks the chain in order. A provider that fails (connection refused, timeout, 5xx,
429, a malformed or dropped stream) hands the request to the next one; when a whole round has
failed, the router waits (exponential backoff with full jitter, or the soonest ``Retry-After``
if that is later) and walks it again, until ``max_attempts`` calls have been made or the
deadline would pass. A provider is skipped while its breaker is open or its ``Retry-After`` has
not elapsed, and for the rest of the request once it refused it outright (4xx). The router waits
for a ``Retry-After`` that fits the deadline, never for an open breaker: when every provider
left is open, the request gives up at once (the caller answers extractively), and the next
request after the breaker's ``reset_after`` is its half-open probe. Streams fail
over only before their first token: after it, the caller has shown text to a person, so a break
ends the stream with what was received (``StreamBroken``) instead of starting again elsewhere.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from prometheus_client import Gauge

from citewise import metrics
from citewise.errors import CitewiseError
from citewise.gateway.breaker import OPEN, STATE_VALUE, CircuitBreaker
from citewise.gateway.provider import Provider, ProviderSpec
from citewise.gateway.stats import GatewayStats
from citewise.gateway.wire import ChatUsage, ProviderError

log = logging.getLogger("citewise.gateway")
T = TypeVar("T")


class GatewayError(CitewiseError):
    """No provider answered within the deadline; ``failures`` says what each attempt met."""

    status_code = 503
    code = "model_unavailable"

    def __init__(self, message: str, failures: list[str]) -> None:
        super().__init__(message, hint="the providers' errors are in the log and in "
                         "citewise_llm_errors_total; /healthz shows their breakers")
        self.failures = failures


class StreamBroken(CitewiseError):
    """A stream broke after its first token; ``received`` is the text that had arrived."""

    status_code = 502
    code = "stream_broken"

    def __init__(self, provider: str, received: str, cause: ProviderError) -> None:
        super().__init__(f"the answer from {provider} broke off: {cause.message}",
                         hint="what was received is kept; ask again for the whole answer")
        self.provider = provider
        self.received = received


@dataclass
class Completion:
    text: str
    provider: str
    model: str
    usage: ChatUsage = field(default_factory=ChatUsage)
    failures: list[str] = field(default_factory=list)  # what the attempts before it met
    ttft: float | None = None


class Gateway:
    def __init__(self, providers: list[Provider], *, deadline: float = 60.0,
                 max_attempts: int = 4, backoff: float = 0.25, backoff_max: float = 4.0,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        if not providers:
            raise ValueError("a gateway needs at least one provider")
        self.providers = providers
        self.deadline = deadline
        self.max_attempts = max(1, max_attempts)
        self.backoff = backoff
        self.backoff_max = backoff_max
        self._sleep = sleep
        self._rng = rng
        self.stats = GatewayStats()  # this process's own counts, for the console
        for p in providers:
            metrics.LLM_BREAKER.labels(p.name).set(0)

    @classmethod
    def from_specs(cls, specs: list[ProviderSpec], *, breaker_threshold: int = 5,
                   breaker_reset: float = 30.0, **kwargs: Any) -> Gateway:
        providers = []
        for spec in specs:
            breaker = CircuitBreaker(breaker_threshold, breaker_reset,
                                     on_change=_shown_on(metrics.LLM_BREAKER.labels(spec.name)))
            providers.append(Provider(spec, breaker=breaker))
        return cls(providers, **kwargs)

    # The chain ---------------------------------------------------------------------------
    def _attempts(self, end: float) -> Generator[Provider, bool | None, None]:
        """Providers to try, in order, round after round, until attempts or time run out.
        The caller sends False for a provider that refused the request outright."""
        made = 0
        refused: set[str] = set()
        for round_no in range(self.max_attempts):
            for p in self.providers:
                if made >= self.max_attempts or time.monotonic() >= end:
                    return
                if p.name in refused or p.wait_time() > 0 or not p.breaker.allow():
                    continue
                made += 1
                ok = yield p
                if ok is False:
                    refused.add(p.name)
            if made >= self.max_attempts:
                return
            # An open breaker is waited for by the next request, not this one: it would hold
            # a person's answer for the rest of its reset period (a minute with two providers).
            live = [p for p in self.providers
                    if p.name not in refused and p.breaker.state != OPEN]
            if not live:
                return
            pause = self._rng() * min(self.backoff_max, self.backoff * 2 ** round_no)
            soonest = min(p.cooldown() for p in live)
            pause = max(pause, soonest)
            if time.monotonic() + pause >= end:
                return
            self._sleep(pause)

    def _failed(self, p: Provider, e: ProviderError, failures: list[str]) -> None:
        failures.append(str(e))
        self.stats.failed(p.name)
        metrics.LLM_ERRORS.labels(p.name, e.kind).inc()
        metrics.LLM_FAILOVERS.labels(p.name).inc()
        log.warning("model call failed, moving on: %s", e)
        if e.kind == "rate_limited":
            p.breaker.release()
            if e.retry_after is not None:
                p.cool_down(e.retry_after)
        elif e.kind == "busy":
            p.breaker.release()
        else:
            p.breaker.failure()

    def _succeeded(self, p: Provider, usage: ChatUsage, started: float,
                   failures: list[str]) -> None:
        p.breaker.success()
        self.stats.served(p.name, usage.tokens_in, usage.tokens_out, usage.cost,
                          after_failures=bool(failures))
        metrics.LLM_SECONDS.labels(p.name).observe(time.monotonic() - started)
        metrics.LLM_TOKENS.labels(p.name, "in").inc(usage.tokens_in)
        metrics.LLM_TOKENS.labels(p.name, "out").inc(usage.tokens_out)
        metrics.LLM_COST.labels(p.name).inc(usage.cost)

    def _give_up(self, failures: list[str], deadline: float) -> GatewayError:
        if not failures:
            waits = ", ".join(f"{p.name} in {p.wait_time():.0f} s" for p in self.providers)
            return GatewayError(f"every model provider is resting ({waits})", failures)
        return GatewayError(f"no model provider answered within {deadline:.0f} s: "
                            + "; ".join(failures[-3:]), failures)

    # Calls -------------------------------------------------------------------------------
    def _call(self, call: Callable[[Provider, float], tuple[T, ChatUsage]],
              deadline: float | None) -> tuple[T, Provider, ChatUsage, list[str]]:
        """``call(provider, seconds_left)`` along the chain until one succeeds."""
        deadline = deadline or self.deadline
        end = time.monotonic() + deadline
        failures: list[str] = []
        chain = self._attempts(end)
        ok: bool | None = None
        while True:
            try:
                p = chain.send(ok) if ok is not None else next(chain)
            except StopIteration:
                raise self._give_up(failures, deadline) from None
            started = time.monotonic()
            self.stats.called(p.name)
            try:
                result, usage = call(p, end - started)
            except ProviderError as e:
                self._failed(p, e, failures)
                ok = e.retryable
                continue
            self._succeeded(p, usage, started, failures)
            return result, p, usage, failures

    def complete(self, messages: list[dict[str, Any]], *, deadline: float | None = None,
                 max_tokens: int | None = None) -> Completion:
        text, p, usage, failures = self._call(
            lambda p, left: p.complete(messages, timeout=left, max_tokens=max_tokens), deadline)
        return Completion(text=text, provider=p.name, model=p.spec.model, usage=usage,
                          failures=failures)

    def embed(self, texts: list[str], *, deadline: float | None = None) -> np.ndarray:
        """Vectors for ``texts`` (one request, L2-normalised rows) from an embeddings endpoint."""
        vectors, _, _, _ = self._call(lambda p, left: p.embed(texts, timeout=left), deadline)
        return vectors

    def stream(self, messages: list[dict[str, Any]], *, deadline: float | None = None) -> Streamed:
        return Streamed(self, messages, deadline or self.deadline)

    def provider_stats(self) -> list[dict[str, Any]]:
        """Each provider, in the chain's order, with its breaker and what this process saw of
        it since it started (``stats.py``): calls, failures, take-overs, tokens, cost and time
        to first token."""
        return [{"name": p.name, "kind": "openai", "model": p.spec.model,
                 "breaker": p.breaker.state, **self.stats.snapshot(p.name)}
                for p in self.providers]

    def health(self) -> list[dict[str, Any]]:
        return [{"name": p.name, "model": p.spec.model, **p.breaker.snapshot(),
                 "retry_in_s": round(p.wait_time(), 1)} for p in self.providers]

    def close(self) -> None:
        for p in self.providers:
            p.close()


def _shown_on(gauge: Gauge) -> Callable[[str], None]:
    """A breaker's ``on_change`` that shows its state on ``gauge``."""
    return lambda state: gauge.set(STATE_VALUE[state])


class Streamed:
    """A streamed completion: iterate it for text deltas; ``completion`` is set once it ends.

    Iterating raises ``GatewayError`` when no provider produced a first token, and
    ``StreamBroken`` when the stream broke after one. Closing it (or abandoning the iteration)
    closes the upstream connection.
    """

    def __init__(self, gateway: Gateway, messages: list[dict[str, Any]], deadline: float) -> None:
        self._gateway = gateway
        self._messages = messages
        self._deadline = deadline
        self.completion: Completion | None = None
        self._gen = self._run()

    def __iter__(self) -> Iterator[str]:
        return self._gen

    def close(self) -> None:
        self._gen.close()

    def _run(self) -> Generator[str, None, None]:
        gw = self._gateway
        end = time.monotonic() + self._deadline
        failures: list[str] = []
        chain = gw._attempts(end)
        ok: bool | None = None
        while True:
            try:
                p = chain.send(ok) if ok is not None else next(chain)
            except StopIteration:
                raise gw._give_up(failures, self._deadline) from None
            started = time.monotonic()
            received: list[str] = []
            reported = None
            ttft = None
            gw.stats.called(p.name)
            upstream = p.stream(self._messages, timeout=end - started)
            try:
                for chunk in upstream:
                    if chunk.usage is not None:
                        reported = chunk.usage
                    if chunk.text:
                        if ttft is None:
                            ttft = time.monotonic() - started
                            metrics.LLM_TTFT.labels(p.name).observe(ttft)
                            gw.stats.first_token(p.name, ttft)
                        received.append(chunk.text)
                        yield chunk.text
            except ProviderError as e:
                gw._failed(p, e, failures)
                if received:
                    raise StreamBroken(p.name, "".join(received), e) from e
                ok = e.retryable
                continue
            except GeneratorExit:
                p.breaker.release()
                raise
            finally:
                upstream.close()
            text = "".join(received)
            usage = p.usage(reported, self._messages, text)
            gw._succeeded(p, usage, started, failures)
            self.completion = Completion(text=text, provider=p.name, model=p.spec.model,
                                         usage=usage, failures=failures, ttft=ttft)
            return
