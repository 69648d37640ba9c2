"""Which citewise conversation a Slack thread is: a small SQLite file next to the bot, so that a
follow-up in a thread continues its conversation after the bot restarts."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from citewise.private_files import private_file


class Threads:
    def __init__(self, path: Path | str = ":memory:") -> None:
        if str(path) != ":memory:":
            # Which conversation each thread is: private, like the data folder it sits in.
            private_file(Path(path))
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS threads (channel TEXT, thread_ts TEXT, "
                         "conversation_id TEXT NOT NULL, PRIMARY KEY (channel, thread_ts))")
        self._lock = threading.Lock()

    def get(self, channel: str, thread_ts: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT conversation_id FROM threads WHERE channel = ? AND "
                                   "thread_ts = ?", (channel, thread_ts)).fetchone()
        return row[0] if row else None

    def put(self, channel: str, thread_ts: str, conversation_id: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO threads VALUES (?, ?, ?)",
                             (channel, thread_ts, conversation_id))

    def forget(self, channel: str, thread_ts: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM threads WHERE channel = ? AND thread_ts = ?",
                             (channel, thread_ts))
