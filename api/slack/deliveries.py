"""Slack delivers an event at least once: ``event_id``s the bot has taken, so that none is
answered twice.

Slack retries an event it thinks went unacknowledged (``X-Slack-Retry-Num`` 1 to 3, up to
about five minutes later; docs.slack.dev/apis/events-api/#retries), and a signed request can be
replayed within the five minutes its signature is valid. Each carries the same ``event_id``.
The ids live in the bot's SQLite file (``CITEWISE_SLACK_STATE``, next to the thread map) for an
hour, longer than both windows, so a retry that arrives after a restart is not answered again
either. The id is taken before the answer is worked on: a retry that arrives while the first
delivery is still being answered is acknowledged and dropped, not answered in parallel.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

KEEP_SECONDS = 3600.0


class Deliveries:
    def __init__(self, path: Path | str = ":memory:") -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=10)
        self._db.execute("CREATE TABLE IF NOT EXISTS slack_events (event_id TEXT PRIMARY KEY, "
                         "seen_at REAL NOT NULL)")
        self._lock = threading.Lock()

    def first(self, event_id: str, now: float | None = None) -> bool:
        """Whether this is the first delivery of ``event_id`` (and take it if so)."""
        now = time.time() if now is None else now
        with self._lock, self._db:
            self._db.execute("DELETE FROM slack_events WHERE seen_at < ?",
                             (now - KEEP_SECONDS,))
            taken = self._db.execute("INSERT OR IGNORE INTO slack_events VALUES (?, ?)",
                                     (event_id, now))
            return taken.rowcount == 1
