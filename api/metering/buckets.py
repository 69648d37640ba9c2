"""Rate limits and quotas as token buckets, per principal and per key, per route class.

A bucket holds up to ``capacity`` tokens and refills at ``capacity / window`` per second; a
request takes one token from every bucket that applies to it (the caller's per-minute and
per-day buckets for search, answer or ingest, and the key's), and is refused with the time
until the emptiest one has a token again. Buckets live in memory, so the check costs
microseconds; ``flush()`` writes the ones that changed to the store every second or so and
``load()`` reads them back at start, so a restart does not hand everyone a fresh allowance.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from citewise.api.metering.store import MeteringStore

WINDOWS = {"minute": 60, "day": 86400}


@dataclass(frozen=True)
class Policy:
    """One limit: ``quota`` requests per ``window`` seconds, for one bucket."""

    name: str  # "answer-minute": what RateLimit-Policy calls it
    bucket: str  # the bucket's key: "principal:user:dana|answer|minute"
    quota: int
    window: int


@dataclass(frozen=True)
class Decision:
    allowed: bool
    policy: Policy | None  # the tightest policy (the one to advertise)
    remaining: int = 0
    reset: int = 0  # seconds until a token is back in the tightest bucket
    policies: tuple[Policy, ...] = ()

    def headers(self) -> list[tuple[str, str]]:
        """``RateLimit-Policy`` and ``RateLimit`` (draft-ietf-httpapi-ratelimit-headers-10)."""
        if self.policy is None:
            return []
        listed = ", ".join(f'"{p.name}";q={p.quota};w={p.window}'
                           for p in dict.fromkeys(self.policies))
        out = [("RateLimit-Policy", listed),
               ("RateLimit", f'"{self.policy.name}";r={self.remaining};t={self.reset}')]
        if not self.allowed:
            out.append(("Retry-After", str(max(1, self.reset))))
        return out


class TokenBuckets:
    def __init__(self, store: MeteringStore | None = None) -> None:
        self.store = store  # None: buckets kept in memory only
        self._buckets: dict[str, tuple[float, float]] = {}  # bucket -> (tokens, at)
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def take(self, policies: list[Policy], now: float | None = None) -> Decision:
        """Take a token from each policy's bucket if every one has one; otherwise take none."""
        if not policies:
            return Decision(True, None)
        now = time.time() if now is None else now
        with self._lock:
            levels = [(p, self._level(p, now)) for p in policies]
            allowed = all(tokens >= 1.0 for _, tokens in levels)
            if allowed:
                for p, tokens in levels:
                    self._buckets[p.bucket] = (tokens - 1.0, now)
                    self._dirty.add(p.bucket)
                levels = [(p, tokens - 1.0) for p, tokens in levels]
        if allowed:
            # Advertise the tightest bucket: the smallest share left; t = until it is full.
            policy, tokens = min(levels, key=lambda pt: pt[1] / pt[0].quota)
            reset = math.ceil((policy.quota - tokens) * policy.window / policy.quota)
        else:
            # Refused: the empty bucket that refills last decides when to come back.
            policy, tokens = max(((p, t) for p, t in levels if t < 1.0),
                                 key=lambda pt: _wait(*pt))
            reset = math.ceil(_wait(policy, tokens))
        return Decision(allowed, policy, max(0, math.floor(tokens)), max(0, reset),
                        tuple(policies))

    def give_back(self, policies: tuple[Policy, ...] | list[Policy],
                  now: float | None = None) -> None:
        """Return the token a request took from each bucket (never above the bucket's size)."""
        now = time.time() if now is None else now
        with self._lock:
            for p in policies:
                self._buckets[p.bucket] = (min(float(p.quota), self._level(p, now) + 1.0), now)
                self._dirty.add(p.bucket)

    def _level(self, p: Policy, now: float) -> float:
        tokens, at = self._buckets.get(p.bucket, (float(p.quota), now))
        rate = p.quota / p.window
        return min(float(p.quota), tokens + max(0.0, now - at) * rate)

    # Persistence ----------------------------------------------------------------------------------
    def load(self) -> int:
        if self.store is None:
            return 0
        kept = self.store.load_buckets()
        with self._lock:
            self._buckets.update(kept)
        return len(kept)

    def flush(self) -> int:
        if self.store is None:
            return 0
        with self._lock:
            dirty = {b: self._buckets[b] for b in self._dirty if b in self._buckets}
            self._dirty.clear()
        if dirty:
            # Full buckets need no row: forget those idle for over a day.
            self.store.save_buckets(dirty, forget_before=time.time() - 2 * 86400)
        return len(dirty)


def _wait(p: Policy, tokens: float) -> float:
    """Seconds until the bucket holds one token."""
    return max(0.0, (1.0 - tokens) * p.window / p.quota)
