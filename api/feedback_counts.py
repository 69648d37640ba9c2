"""What people said of each document, counted for the learned ranking stage's features.

An answer marked helpful counts once as helpful for each document it cited, one marked not
helpful once as unhelpful for each. The counts are read from the conversation store at most
every ``ttl`` seconds (feedback trickles in; a search must not wait on reading the log), and
only while a ranking model is loaded: nothing else reads them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from citewise.api.conversation_store import ConversationStore


class StoredFeedbackCounts:
    def __init__(self, store: ConversationStore, *, ttl: float = 300.0) -> None:
        self.store = store
        self.ttl = ttl
        self._counts: dict[str, tuple[int, int]] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def counts(self) -> Mapping[str, tuple[int, int]]:
        with self._lock:
            if self._read_at is None or time.monotonic() - self._read_at > self.ttl:
                self._counts = self._read()
                self._read_at = time.monotonic()
            return self._counts

    def _read(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for given, stored in self.store.feedback_since(""):
            for document in stored.documents:
                helpful, unhelpful = out.get(document, (0, 0))
                out[document] = ((helpful + 1, unhelpful) if given["helpful"]
                                 else (helpful, unhelpful + 1))
        return out
