"""Rate limits and quotas as token buckets, per principal and per key, per route class.

A bucket holds up to ``capacity`` tokens and refills at ``capacity / window`` per second; a
request takes one token from every bucket that applies to it (the caller's per-minute and
per-day buckets for search, answer or ingest, and the key's), and is refused with the time
until the emptiest one has a token again. That arithmetic is ``TokenBuckets``' alone; where the
levels live between requests is a ``BucketLevels``, which the composition root chooses with
the stores (``Stores.bucket_levels``):

* ``LocalLevels`` (the embedded SQLite default): this process's memory, so the check costs
  microseconds; ``flush()`` writes the ones that changed to the metering store every second or
  so and ``load()`` reads them back at start, so a restart does not hand everyone a fresh
  allowance;
* ``SharedLevels`` (PostgreSQL): the metering store's own rows, read and written in one
  transaction per request with those buckets locked, so that replicas behind a load balancer
  draw on one allowance per principal, not one each.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from citewise.api.metering.store import MeteringStore

# (tokens, at): the bucket held ``tokens`` at Unix time ``at``.
Level = tuple[float, float]
# Given the kept levels of some buckets (None: none kept, a full bucket), the levels to keep
# instead, in the same order (None: keep nothing).
Step = Callable[[list[Level | None]], list[Level] | None]
# Full buckets need no row: those untouched for this long are forgotten.
IDLE_SECONDS = 2 * 86400

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


class BucketLevels(Protocol):
    """Where the buckets' levels live between requests."""

    def change(self, buckets: Sequence[str], step: Step) -> None:
        """Read the buckets' kept levels, give them to ``step`` and keep what it returns, with
        no other change to these buckets (by this process, or any other that shares them)
        between the read and the write."""
        ...

    def load(self) -> int:
        """Read the kept levels at start; how many."""
        ...

    def flush(self) -> int:
        """Keep what changed since the last flush; how many buckets."""
        ...


class LocalLevels:
    """Levels in this process's memory, kept in ``store`` (None: nowhere) by ``flush``."""

    def __init__(self, store: MeteringStore | None = None) -> None:
        self.store = store
        self._levels: dict[str, Level] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def change(self, buckets: Sequence[str], step: Step) -> None:
        with self._lock:
            changed = step(list(map(self._levels.get, buckets)))
            if changed is not None:
                self._levels.update(zip(buckets, changed, strict=True))
                self._dirty.update(buckets)

    def load(self) -> int:
        if self.store is None:
            return 0
        kept = self.store.load_buckets()
        with self._lock:
            self._levels.update(kept)
        return len(kept)

    def flush(self) -> int:
        if self.store is None:
            return 0
        with self._lock:
            dirty = {b: self._levels[b] for b in self._dirty if b in self._levels}
            self._dirty.clear()
        if dirty:
            try:
                self.store.save_buckets(dirty, forget_before=time.time() - IDLE_SECONDS)
            except Exception:
                with self._lock:  # written by a later flush, when the database answers
                    self._dirty.update(dirty)
                raise
        return len(dirty)


class SharedBucketStore(Protocol):
    """A metering store whose bucket rows every replica changes in place."""

    def change_buckets(self, buckets: Sequence[str], step: Step) -> None: ...

    def save_buckets(self, levels: dict[str, Level], forget_before: float) -> None: ...


class SharedLevels:
    """Levels kept only in a store that every replica shares (``change_buckets``, one
    transaction per request): nothing to load or flush. Now and then a flush forgets the
    buckets idle for two days."""

    FORGET_EVERY = 3600.0  # seconds

    def __init__(self, store: SharedBucketStore) -> None:
        self.store = store
        self._forgot_at = -math.inf

    def change(self, buckets: Sequence[str], step: Step) -> None:
        self.store.change_buckets(buckets, step)

    def load(self) -> int:
        return 0

    def flush(self) -> int:
        if time.monotonic() - self._forgot_at >= self.FORGET_EVERY:
            self._forgot_at = time.monotonic()
            self.store.save_buckets({}, forget_before=time.time() - IDLE_SECONDS)
        return 0


class TokenBuckets:
    def __init__(self, levels: BucketLevels | None = None) -> None:
        self.levels = levels if levels is not None else LocalLevels()  # memory only

    def take(self, policies: list[Policy], now: float | None = None) -> Decision:
        """Take a token from each policy's bucket if every one has one; otherwise take none."""
        if not policies:
            return Decision(True, None)
        at = time.time() if now is None else now
        seen: list[float] = []  # each bucket's tokens: after the take, or as refused
        allowed = False

        def step(kept: list[Level | None]) -> list[Level] | None:
            nonlocal allowed
            seen[:] = [_refilled(p, level, at) for p, level in zip(policies, kept, strict=True)]
            allowed = min(seen) >= 1.0
            if not allowed:
                return None
            seen[:] = [tokens - 1.0 for tokens in seen]
            return [(tokens, at) for tokens in seen]

        self.levels.change([p.bucket for p in policies], step)
        levels = list(zip(policies, seen, strict=True))
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
        at = time.time() if now is None else now

        def step(kept: list[Level | None]) -> list[Level]:
            return [(min(float(p.quota), _refilled(p, level, at) + 1.0), at)
                    for p, level in zip(policies, kept, strict=True)]

        self.levels.change([p.bucket for p in policies], step)

    # Persistence ----------------------------------------------------------------------------------
    def load(self) -> int:
        return self.levels.load()

    def flush(self) -> int:
        return self.levels.flush()


def _refilled(p: Policy, level: Level | None, now: float) -> float:
    """The bucket's tokens at ``now``: as kept, plus what refilled since (a bucket never
    kept is full)."""
    tokens, at = level if level is not None else (float(p.quota), now)
    return min(float(p.quota), tokens + max(0.0, now - at) * (p.quota / p.window))


def _wait(p: Policy, tokens: float) -> float:
    """Seconds until the bucket holds one token."""
    return max(0.0, (1.0 - tokens) * p.window / p.quota)
