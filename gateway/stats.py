"""What the gateway saw of each provider since this process started: calls, failures,
take-overs, tokens, cost and time to first token. The operator console's models view reads
them (``Gateway.stats``); Prometheus has the same events as counters (``metrics.LLM_*``).

They live in this process's memory: each API replica counts the calls it made itself, from its
own start, and a restart begins again at zero. Across replicas, sum the Prometheus counters.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass, field

TTFT_SAMPLES = 1000  # the latest streams' times to first token kept per provider


@dataclass
class ProviderCounts:
    requests: int = 0  # calls made to it (each attempt of a request is one)
    errors: int = 0  # calls that failed (connection, timeout, 5xx, 429, a broken stream)
    failovers: int = 0  # requests it served after an earlier provider (or attempt) failed
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    ttft: deque[float] = field(default_factory=lambda: deque(maxlen=TTFT_SAMPLES))

    def ttft_p50_ms(self) -> float | None:
        return round(statistics.median(self.ttft) * 1000, 1) if self.ttft else None


class GatewayStats:
    """Thread-safe counts per provider name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, ProviderCounts] = {}

    def _of(self, provider: str) -> ProviderCounts:
        return self._counts.setdefault(provider, ProviderCounts())

    def called(self, provider: str) -> None:
        with self._lock:
            self._of(provider).requests += 1

    def failed(self, provider: str) -> None:
        with self._lock:
            self._of(provider).errors += 1

    def served(self, provider: str, tokens_in: int, tokens_out: int, cost: float, *,
               after_failures: bool) -> None:
        with self._lock:
            counts = self._of(provider)
            counts.tokens_in += tokens_in
            counts.tokens_out += tokens_out
            counts.cost += cost
            counts.failovers += int(after_failures)

    def first_token(self, provider: str, seconds: float) -> None:
        with self._lock:
            self._of(provider).ttft.append(seconds)

    def snapshot(self, provider: str) -> dict[str, float | int | None]:
        with self._lock:
            c = self._of(provider)
            return {"requests": c.requests, "errors": c.errors,
                    "error_rate": round(c.errors / c.requests, 4) if c.requests else 0.0,
                    "ttft_p50_ms": c.ttft_p50_ms(), "failovers": c.failovers,
                    "tokens_in": c.tokens_in, "tokens_out": c.tokens_out,
                    "cost": round(c.cost, 6)}
