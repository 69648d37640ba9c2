"""Where the semantic cache (``cache.py``) keeps its entries.

The cache's rules (scope, freshness against the catalog, the similarity threshold, only
settled answers) are ``SemanticCache``'s; a store keeps entries, finds a scope's, and bounds
their number, least recently used out first. ``InMemoryAnswerCache`` is the embedded default,
one per process; a store shared by several API replicas (a database table) implements the same
contract, and the contract tests (``tests/stores/test_answer_cache_store_contract.py``) say what
it must do.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from citewise.retrieval.answering.model import Answer


@dataclass
class CacheEntry:
    scope: str  # ``scope_of``: who may receive it
    question: str  # as it was first asked
    vector: np.ndarray  # the question's embedding
    answer: Answer
    cited: dict[str, tuple[str, str]]  # document id -> (version, readers) when it was stored
    created: float  # Unix seconds


class AnswerCacheStore(Protocol):
    def candidates(self, scope: str, not_before: float) -> list[tuple[str, CacheEntry]]:
        """The scope's entries created at ``not_before`` or later, each with its key (entries
        older than that are past their age and may be forgotten now)."""
        ...

    def add(self, entry: CacheEntry) -> int:
        """Keep ``entry``; how many least recently used entries went to keep the store within
        its size."""
        ...

    def touch(self, key: str) -> bool:
        """Mark the entry used now (it goes last among those to evict); False when it is gone."""
        ...

    def drop(self, key: str) -> None: ...

    def count(self) -> int: ...

    def clear(self) -> None: ...


class InMemoryAnswerCache:
    """``AnswerCacheStore`` in this process's memory, bounded to ``max_entries``."""

    def __init__(self, max_entries: int = 5000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()

    def candidates(self, scope: str, not_before: float) -> list[tuple[str, CacheEntry]]:
        with self._lock:
            mine = [(k, e) for k, e in self._entries.items() if e.scope == scope]
            for k, e in mine:
                if e.created < not_before:
                    del self._entries[k]
            return [(k, e) for k, e in mine if e.created >= not_before]

    def add(self, entry: CacheEntry) -> int:
        evicted = 0
        with self._lock:
            self._entries[str(self._next)] = entry
            self._next += 1
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                evicted += 1
        return evicted

    def touch(self, key: str) -> bool:
        with self._lock:
            if key not in self._entries:
                return False
            self._entries.move_to_end(key)
            return True

    def drop(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def count(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
