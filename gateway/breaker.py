"""A circuit breaker per provider: stop sending to one that keeps failing, probe it now and then.

closed: calls go through; ``threshold`` consecutive failures open it.
open: calls are refused for ``reset_after`` seconds, so a dead provider costs nothing but the
  failover to the next one.
half-open: after that, one probe call is let through; success closes the breaker, failure
  opens it again for another ``reset_after``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATE_VALUE = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


class CircuitBreaker:
    def __init__(self, threshold: int = 5, reset_after: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[str], None] | None = None) -> None:
        self.threshold = max(1, threshold)
        self.reset_after = reset_after
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._state = CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False

    @property
    def state(self) -> str:
        with self._lock:
            return self._current()

    def _current(self) -> str:
        if self._state == OPEN and self._clock() - self._opened_at >= self.reset_after:
            self._set(HALF_OPEN)
        return self._state

    def _set(self, state: str) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)

    def allow(self) -> bool:
        """Whether a call may go now; in half-open, only the first caller gets to probe."""
        with self._lock:
            state = self._current()
            if state == CLOSED:
                return True
            if state == HALF_OPEN and not self._probing:
                self._probing = True
                return True
            return False

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when it would now)."""
        with self._lock:
            if self._current() != OPEN:
                return 0.0
            return max(0.0, self.reset_after - (self._clock() - self._opened_at))

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._probing = False
            self._set(CLOSED)

    def failure(self) -> None:
        with self._lock:
            self._failures += 1
            state = self._current()
            if state == HALF_OPEN or self._failures >= self.threshold:
                self._opened_at = self._clock()
                self._probing = False
                self._set(OPEN)

    def release(self) -> None:
        """A call that neither succeeded nor failed on the provider's account (the caller went
        away): give the probe slot back."""
        with self._lock:
            self._probing = False

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"state": self._current(), "consecutive_failures": self._failures}
