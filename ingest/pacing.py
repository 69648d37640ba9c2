"""An ingest run gives way to the requests the same process is serving.

A run inside `citewise serve` (a job, the schedule) shares the machine's cores and Python's
interpreter lock with searches and answers. At full speed it took most of what the requests
needed: in a 30-minute soak on two cores, search p95 went from 241 ms with the same traffic
idle to 778 ms while forced ingests ran back to back (bench/results/soak.md, Dec 7). So while
requests are in flight, each step of a run (reading and parsing a batch, embedding a window,
writing it) is followed by a pause of ``ratio`` times the step's duration: the run works at
most 1/(1 + ratio) of the time while the server is busy, and at full speed while it is idle or
when nothing serves (`citewise ingest` from cron). Pauses are counted in
``citewise_ingest_paused_seconds_total``.

Steps nest (with the local model a batch's step embeds and writes the window it completes, in
the same thread): only the outermost step of a thread pauses, for the whole of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from citewise import metrics

# No single pause longer than this: a step that ran long (a compaction, a slow source) should
# not park the run for minutes after it.
MAX_PAUSE = 5.0


class Pacer:
    def __init__(self, busy: Callable[[], bool] = lambda: False, ratio: float = 0.0, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if ratio < 0:
            raise ValueError(f"the pause ratio cannot be negative ({ratio})")
        self.busy = busy
        self.ratio = ratio
        self.paused = 0.0  # seconds paused, by this pacer
        self._clock, self._sleep = clock, sleep
        self._depth = threading.local()

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step of a run's work; on leaving the outermost one, the pause it calls for."""
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        started = self._clock()
        try:
            yield
        finally:
            self._depth.n = depth
        if depth == 0 and self.ratio and self.busy():
            pause = min((self._clock() - started) * self.ratio, MAX_PAUSE)
            self._sleep(pause)
            self.paused += pause
            metrics.INGEST_PAUSED.inc(pause)
