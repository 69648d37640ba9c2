"""A semantic cache of answers that never serves one to somebody who could not have received it.

A question close enough to one answered before (cosine of their embeddings at or above the
threshold) gets that answer again, without searching or calling a model. Three rules keep it
honest:

* **Scope.** An entry is only ever looked up by callers of the same scope: the fingerprint of
  their principals, the filters and the answering configuration. Two people who may read
  different things never share an entry, even for the same words.
* **Freshness.** An entry records every document it cites, with the version and the readers
  they had. Before it is served, each is checked against the catalog; if any changed, was
  deleted or changed readers, the entry is dropped and the question answered afresh.
* **Only settled answers.** Abstentions (a new document could answer them tomorrow) and answers
  that fell back because a model failed (a passing outage) are not stored.

Bounded in size (least recently used out first) and in age (``ttl``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from citewise import metrics
from citewise.index.catalog import DocumentCatalog
from citewise.retrieval.answering.model import Answer
from citewise.types import Identity, SearchFilters


def scope_of(identity: Identity, filters: SearchFilters | None, config: str) -> str:
    """The fingerprint of what a caller may see and asked to see."""
    f = filters or SearchFilters()
    raw = json.dumps({"principals": sorted(identity.principals()),
                      "filters": [sorted(f.sources or []), f.path_prefix or "",
                                  sorted(f.tags or []), sorted(f.services or [])],
                      "config": config}, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()


def _readers_key(readers: list[str]) -> str:
    return ",".join(sorted(readers))


@dataclass
class _Entry:
    scope: str
    question: str
    vector: np.ndarray
    answer: Answer
    cited: dict[str, tuple[str, str]]  # document id -> (version, readers)
    created: float
    hits: int = 0
    saved_tokens: int = field(default=0)


@dataclass
class CacheHit:
    answer: Answer
    question: str  # the question it was first asked as
    similarity: float


class SemanticCache:
    def __init__(self, catalog: DocumentCatalog, *, threshold: float = 0.95, ttl: float = 86400.0,
                 max_entries: int = 5000) -> None:
        self.catalog = catalog
        self.threshold = threshold
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, scope: str, vector: np.ndarray) -> CacheHit | None:
        now = time.monotonic()
        with self._lock:
            candidates = [(k, e) for k, e in self._entries.items() if e.scope == scope]
            expired = [k for k, e in candidates if now - e.created > self.ttl]
            for k in expired:
                del self._entries[k]
            candidates = [(k, e) for k, e in candidates if k not in expired]
        if not candidates:
            metrics.CACHE_LOOKUPS.labels("miss").inc()
            return None
        sims = np.stack([e.vector for _, e in candidates]) @ vector
        for i in np.argsort(-sims):
            if sims[i] < self.threshold:
                break
            key, entry = candidates[int(i)]
            if not self._fresh(entry):
                with self._lock:
                    self._entries.pop(key, None)
                metrics.CACHE_DROPPED.labels("stale").inc()
                continue
            with self._lock:
                if key not in self._entries:
                    continue
                self._entries.move_to_end(key)
                entry.hits += 1
            tokens = entry.answer.usage.tokens_in + entry.answer.usage.tokens_out \
                if entry.answer.usage else 0
            metrics.CACHE_LOOKUPS.labels("hit").inc()
            metrics.CACHE_SAVED_TOKENS.inc(tokens)
            return CacheHit(entry.answer.model_copy(deep=True), entry.question, float(sims[i]))
        metrics.CACHE_LOOKUPS.labels("miss").inc()
        return None

    def _fresh(self, entry: _Entry) -> bool:
        """Every cited document is still there, at the version and with the readers it had."""
        for doc_id, (version, readers) in entry.cited.items():
            record = self.catalog.get_document(doc_id)
            if record is None or record.version != version or \
                    _readers_key(record.readers) != readers:
                return False
        return True

    def store(self, scope: str, question: str, vector: np.ndarray, answer: Answer) -> bool:
        if answer.abstained or answer.reason or not answer.citations:
            return False
        cited = {}
        for c in answer.citations:
            record = self.catalog.get_document(c.document_id)
            if record is None:
                return False
            cited[c.document_id] = (record.version, _readers_key(record.readers))
        entry = _Entry(scope, question, np.asarray(vector, dtype=np.float32),
                       answer.model_copy(deep=True), cited, time.monotonic())
        with self._lock:
            self._entries[self._next] = entry
            self._next += 1
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                metrics.CACHE_DROPPED.labels("evicted").inc()
            metrics.CACHE_ENTRIES.set(len(self._entries))
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            metrics.CACHE_ENTRIES.set(0)
