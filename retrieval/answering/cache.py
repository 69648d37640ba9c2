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

Bounded in size (least recently used out first) and in age (``ttl``). The entries live in an
``AnswerCacheStore`` (``cache_store.py``): this process's memory by default.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

import numpy as np

from citewise import metrics
from citewise.index.catalog import DocumentCatalog
from citewise.retrieval.answering.cache_store import AnswerCacheStore, CacheEntry
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
class CacheHit:
    answer: Answer
    question: str  # the question it was first asked as
    similarity: float


class SemanticCache:
    def __init__(self, catalog: DocumentCatalog, entries: AnswerCacheStore, *,
                 threshold: float = 0.95, ttl: float = 86400.0) -> None:
        self.catalog = catalog
        self.entries = entries
        self.threshold = threshold
        self.ttl = ttl

    def __len__(self) -> int:
        return self.entries.count()

    def lookup(self, scope: str, vector: np.ndarray) -> CacheHit | None:
        candidates = self.entries.candidates(scope, not_before=time.time() - self.ttl)
        if not candidates:
            metrics.CACHE_LOOKUPS.labels("miss").inc()
            return None
        sims = np.stack([e.vector for _, e in candidates]) @ vector
        for i in np.argsort(-sims):
            if sims[i] < self.threshold:
                break
            key, entry = candidates[int(i)]
            if not self._fresh(entry):
                self.entries.drop(key)
                metrics.CACHE_DROPPED.labels("stale").inc()
                continue
            if not self.entries.touch(key):  # dropped meanwhile
                continue
            tokens = entry.answer.usage.tokens_in + entry.answer.usage.tokens_out \
                if entry.answer.usage else 0
            metrics.CACHE_LOOKUPS.labels("hit").inc()
            metrics.CACHE_SAVED_TOKENS.inc(tokens)
            return CacheHit(entry.answer.model_copy(deep=True), entry.question, float(sims[i]))
        metrics.CACHE_LOOKUPS.labels("miss").inc()
        return None

    def _fresh(self, entry: CacheEntry) -> bool:
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
        evicted = self.entries.add(CacheEntry(
            scope, question, np.asarray(vector, dtype=np.float32),
            answer.model_copy(deep=True), cited, time.time()))
        if evicted:
            metrics.CACHE_DROPPED.labels("evicted").inc(evicted)
        metrics.CACHE_ENTRIES.set(self.entries.count())
        return True

    def clear(self) -> None:
        self.entries.clear()
        metrics.CACHE_ENTRIES.set(0)
