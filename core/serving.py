"""How many HTTP requests this process is answering right now.

Counted by the HTTP layer (``api/middleware.RequestMetrics``), read by work that should give
way to them: an ingest run in the server's process pauses while requests are in flight
(``ingest/pacing.py``). A process that serves nothing (`citewise ingest` from cron, a worker)
never counts one, so its runs never pause. Exported as ``citewise_http_requests_in_flight``.
"""

from __future__ import annotations

from citewise import metrics


class InFlight:
    """A count of requests under way. Changed only on the server's event loop, read from any
    thread (an int read is atomic), so it needs no lock."""

    def __init__(self) -> None:
        self.count = 0

    def started(self) -> None:
        self.count += 1

    def ended(self) -> None:
        self.count -= 1

    def busy(self) -> bool:
        return self.count > 0


# The process's one count: one HTTP server per process.
REQUESTS = InFlight()
metrics.HTTP_IN_FLIGHT.set_function(lambda: REQUESTS.count)
