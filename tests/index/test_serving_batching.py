"""Concurrent queries and answers share model calls: the vectors are those of one caller at a
time, fewer calls are made under concurrency, and a failing model call fails every caller of
its batch."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from citewise.index.dense import ServingBatcher

QUESTIONS = [f"how do I fail over the cache in region {i}?" for i in range(24)]


def test_concurrent_queries_get_their_own_vectors_in_fewer_model_calls(dense):
    alone = {q: np.array(dense.embed_query(q)) for q in QUESTIONS}
    calls: list[int] = []

    def counting(texts):  # the real model, counted
        calls.append(len(texts))
        return dense._encode(texts)

    batcher = ServingBatcher(counting)
    start = threading.Barrier(12)

    def ask(q):
        start.wait() if q in QUESTIONS[:12] else None
        return q, np.array(batcher.embed(q))

    with ThreadPoolExecutor(12) as pool:
        together = dict(pool.map(ask, QUESTIONS))
    for q in QUESTIONS:
        # Same vector as alone, within what padding to a longer batch changes (float noise).
        assert float(together[q] @ alone[q]) > 0.9999, q
    assert sum(calls) >= len(QUESTIONS)
    assert len(calls) < len(QUESTIONS), f"no batching happened: {calls}"
    assert max(calls) <= ServingBatcher.MAX_TEXTS


def test_answers_texts_share_calls_with_other_answers_and_questions(dense):
    """Each caller's list comes back whole and in order, as the model gives it alone."""
    lists = [[f"step {i}.{j}: restart the {j}th replica of cache {i}" for j in range(1 + i % 5)]
             for i in range(10)]
    alone = [dense._encode(texts) for texts in lists]
    calls: list[int] = []

    def counting(texts):
        calls.append(len(texts))
        return dense._encode(texts)

    batcher = ServingBatcher(counting)
    start = threading.Barrier(len(lists) + 2)

    def weigh(texts):
        start.wait()
        return batcher.embed_many(texts)

    def ask(q):
        start.wait()
        return np.array(batcher.embed(q))

    with ThreadPoolExecutor(len(lists) + 2) as pool:
        weighed = [pool.submit(weigh, texts) for texts in lists]
        questions = [pool.submit(ask, q) for q in QUESTIONS[:2]]
        answers = [f.result(timeout=120) for f in weighed]
        asked = [f.result(timeout=120) for f in questions]
    for got, want in zip(answers, alone, strict=True):
        assert got.shape == want.shape
        assert np.all(np.sum(got * want, axis=1) > 0.9999)
    for q, vec in zip(QUESTIONS[:2], asked, strict=True):
        assert float(vec @ np.array(dense.embed_query(q))) > 0.9999
    assert sum(calls) == sum(map(len, lists)) + 2
    assert len(calls) < len(lists) + 2, f"no batching happened: {calls}"
    assert max(calls) <= ServingBatcher.MAX_TEXTS


def test_a_quiet_server_runs_each_query_at_once(dense):
    calls: list[int] = []

    def counting(texts):
        calls.append(len(texts))
        return dense._encode(texts)

    batcher = ServingBatcher(counting)
    for q in QUESTIONS[:3]:
        batcher.embed(q)
    assert calls == [1, 1, 1]


def test_a_failing_model_call_fails_its_batch_and_the_next_caller_runs():
    gate = threading.Event()
    fail = {"on": True}

    def flaky(texts):
        gate.wait(5)
        if fail["on"]:
            raise RuntimeError("model crashed")
        return np.ones((len(texts), 3), dtype=np.float32)

    batcher = ServingBatcher(flaky)
    errors = []

    def ask(q):
        try:
            batcher.embed(q)
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=ask, args=(f"q{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert errors and all(e == "model crashed" for e in errors)
    fail["on"] = False
    assert batcher.embed("after") == [1.0, 1.0, 1.0]  # nothing is left stuck


@pytest.mark.parametrize("n", [1, 5])
def test_an_interrupted_leader_leaves_no_one_waiting(n):
    """A leader killed by something that is not an error (KeyboardInterrupt) hands the queue
    back: the queries waiting on it run their own batch instead of waiting forever."""
    entered = threading.Event()
    release = threading.Event()
    first = {"call": True}

    def encode(texts):
        if first["call"]:
            first["call"] = False
            entered.set()
            release.wait(5)
            raise KeyboardInterrupt
        return np.zeros((len(texts), 2), dtype=np.float32)

    batcher = ServingBatcher(encode)
    results: list = []
    lead = threading.Thread(target=lambda: pytest.raises(KeyboardInterrupt, batcher.embed, "x"))
    lead.start()
    entered.wait(5)
    waiters = [threading.Thread(target=lambda i=i: results.append(batcher.embed(f"w{i}")))
               for i in range(n)]
    for t in waiters:
        t.start()
    release.set()
    for t in [lead, *waiters]:
        t.join(10)
    assert results == [[0.0, 0.0]] * n
