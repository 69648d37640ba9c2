"""The answer cache's entries (``retrieval/answering/cache_store.py``), on every backend: a
store shared by API replicas must keep the same promises as the in-memory default."""

from __future__ import annotations

import time

import numpy as np

from citewise.retrieval.answering.cache_store import CacheEntry
from citewise.retrieval.answering.model import Answer


def entry(scope: str, question: str, created: float | None = None) -> CacheEntry:
    return CacheEntry(scope=scope, question=question,
                      vector=np.asarray([1.0, 0.0, 0.5], dtype=np.float32),
                      answer=Answer(answer=f"about {question} [1]"),
                      cited={"doc-1": ("v1", "public")},
                      created=time.time() if created is None else created)


def test_entries_are_found_by_scope_as_they_were_stored(stores):
    cache = stores.answer_cache
    cache.clear()
    assert cache.add(entry("scope-a", "redis failover")) == 0
    cache.add(entry("scope-b", "postgres disk"))
    ((key, found),) = cache.candidates("scope-a", not_before=time.time() - 60)
    assert (found.question, found.answer.answer, found.cited) == (
        "redis failover", "about redis failover [1]", {"doc-1": ("v1", "public")})
    assert np.allclose(found.vector, [1.0, 0.0, 0.5])
    assert cache.candidates("scope-c", not_before=0) == []
    assert cache.count() == 2
    cache.drop(key)
    assert cache.candidates("scope-a", not_before=0) == [] and not cache.touch(key)
    cache.clear()
    assert cache.count() == 0


def test_entries_past_their_age_are_not_candidates(stores):
    cache = stores.answer_cache
    cache.clear()
    cache.add(entry("s", "old", created=time.time() - 7200))
    cache.add(entry("s", "new"))
    assert [e.question for _, e in cache.candidates("s", not_before=time.time() - 3600)] == [
        "new"]


def test_the_least_recently_used_entry_goes_first(backend):
    from citewise.api.composition import build_stores

    stores = build_stores(backend.replaced(answer_cache_size=2))
    try:
        cache = stores.answer_cache
        cache.clear()
        cache.add(entry("s", "first"))
        cache.add(entry("s", "second"))
        first = next(k for k, e in cache.candidates("s", 0) if e.question == "first")
        assert cache.touch(first)  # used: "second" is now the least recently used
        assert cache.add(entry("s", "third")) == 1
        assert sorted(e.question for _, e in cache.candidates("s", 0)) == ["first", "third"]
    finally:
        stores.close()
