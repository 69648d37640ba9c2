"""An ingest run gives way to the requests the same process is serving.

A run inside `citewise serve` (a job, the schedule) shares the machine's cores and Python's
interpreter lock with searches and answers. At full speed it took most of what the requests
needed: in a 30-minute soak on two cores, search p95 went from 241 ms with the same traffic
idle to 778 ms while forced ingests ran back to back
(bench/results/soak-pacing/, Dec 7).

So a run ticks after each small piece of its work (a document parsed, a batch of chunks
embedded, a document written), and while requests are in flight each tick pauses the run for
``ratio`` times the CPU time its thread spent since the previous tick: the run then takes at
most 1/(1 + ratio) of a core's time while the server is busy, and runs at full speed while it
is idle or when nothing serves (`citewise ingest` from cron, `citewise worker`). CPU time, not
wall time: a run waiting on a slow source or a remote model uses no core, and owes nothing for
it. Small pieces, not whole windows: a pause after ten seconds of work at full speed would
come after the requests it was meant for had waited. Pauses are counted in
``citewise_ingest_paused_seconds_total``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from citewise import metrics

# Pauses owed are slept once they reach this (a sleep per parsed document would cost more
# system calls than it gives back), and never longer than MAX_PAUSE at a time.
MIN_PAUSE = 0.005
MAX_PAUSE = 2.0


class Pacer:
    def __init__(self, busy: Callable[[], bool] = lambda: False, ratio: float = 0.0, *,
                 cpu: Callable[[], float] = time.thread_time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if ratio < 0:
            raise ValueError(f"the pause ratio cannot be negative ({ratio})")
        self.busy = busy
        self.ratio = ratio
        self.paused = 0.0  # seconds paused, by this pacer
        self._cpu, self._sleep = cpu, sleep
        self._thread = threading.local()  # per thread: CPU time at the last tick, pause owed

    def begin(self) -> None:
        """The calling thread starts a run's work: nothing before it is owed for."""
        self._thread.last, self._thread.owed = self._cpu(), 0.0

    def tick(self) -> None:
        """After a piece of a run's work in this thread: the pause it calls for, if any."""
        now = self._cpu()
        last = getattr(self._thread, "last", None)
        self._thread.last = now
        if last is None or not self.ratio:
            return
        if not self.busy():
            self._thread.owed = 0.0  # work done while idle is never paid for later
            return
        owed = getattr(self._thread, "owed", 0.0) + (now - last) * self.ratio
        if owed < MIN_PAUSE:
            self._thread.owed = owed
            return
        pause = min(owed, MAX_PAUSE)
        self._thread.owed = 0.0
        self._sleep(pause)
        self.paused += pause
        metrics.INGEST_PAUSED.inc(pause)
