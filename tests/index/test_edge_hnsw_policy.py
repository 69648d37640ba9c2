"""The embedded index's HNSW policy (index/edge_hnsw.py) on a real qdrant-edge shard: no graph
below the threshold, a graph built at the flush that crosses it and searched with a recall close
to exact, the exact fallback when the graph leaves a filtered query short, and a shard reopened
with other settings.

A few thousand seeded random vectors (dimension 16); ``full_scan_kb`` and ``indexing_kb`` are
lowered to 1 so that the engine builds and walks the graph at this size (its defaults scan
anything under ~10 MB of vectors).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from citewise.index.edge_hnsw import EdgeHnswPolicy
from citewise.index.payload import ChunkPayload
from citewise.index.qdrant_edge_index import EdgeVectorIndex, _segment_graphs
from citewise.index.vector_index import ChunkPoint, IndexFilter, SparseVector

DIM = 16
POINTS = 3000
FEW = 20  # points readable by group:few, fewer than a query's limit
SMALL = EdgeHnswPolicy(hnsw_from=1000, m=16, ef_construct=64, ef=64, quantization=False,
                       full_scan_kb=1, indexing_kb=1)
BELOW = replace(SMALL, hnsw_from=POINTS + 1)  # the same, with a threshold not reached


def _vectors(n: int, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _readers(i: int) -> list[str]:
    if i < FEW:
        return ["group:few"]
    return ["public"] if i % 2 else ["group:team"]


def _points(vectors: np.ndarray) -> list[ChunkPoint]:
    return [ChunkPoint(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"p{i}")), dense=v.tolist(),
        sparse=SparseVector([1], [1.0]),
        payload=ChunkPayload(document_id=f"d{i}", version="v", source="s",
                             readers=_readers(i), text=f"chunk {i}"))
        for i, v in enumerate(vectors)]


def _filled(path: Path, policy: EdgeHnswPolicy) -> tuple[EdgeVectorIndex, np.ndarray]:
    vectors = _vectors(POINTS)
    index = EdgeVectorIndex(path, DIM, policy)
    index.upsert(_points(vectors))
    index.flush()
    return index, vectors


def _exact_ids(vectors: np.ndarray, query: np.ndarray, allowed: list[int], k: int) -> list[str]:
    scores = vectors[allowed] @ query
    top = [allowed[i] for i in np.argsort(-scores)[:k]]
    return [str(uuid.uuid5(uuid.NAMESPACE_URL, f"p{i}")) for i in top]


def test_below_the_threshold_no_graph_is_built_and_search_is_exact(tmp_path):
    index, vectors = _filled(tmp_path, BELOW)
    try:
        assert not index.searches_graph
        assert {m for m, _ in _segment_graphs(tmp_path)} <= {0}
        query = _vectors(1, seed=9)[0]
        hits = index.rank(query.tolist(), filter=IndexFilter(), limit=10)
        assert [h.id for h in hits] == _exact_ids(vectors, query, list(range(POINTS)), 10)
    finally:
        index.close()


def test_the_flush_that_crosses_the_threshold_builds_a_graph_close_to_exact(tmp_path):
    index, vectors = _filled(tmp_path, SMALL)
    try:
        assert index.searches_graph
        assert (16, False) in _segment_graphs(tmp_path)
        queries = _vectors(30, seed=11)
        public = [i for i in range(POINTS) if "public" in _readers(i)]
        found = total = 0
        for q in queries:
            for flt, allowed in ((IndexFilter(), list(range(POINTS))),
                                 (IndexFilter(readers=["public"]), public)):
                got = {h.id for h in index.rank(q.tolist(), filter=flt, limit=10)}
                want = set(_exact_ids(vectors, q, allowed, 10))
                found += len(got & want)
                total += len(want)
        assert found / total >= 0.9
    finally:
        index.close()


def test_a_filter_the_graph_leaves_short_is_asked_again_exactly(tmp_path):
    index, vectors = _filled(tmp_path, SMALL)
    try:
        query = _vectors(1, seed=13)[0]
        hits = index.rank(query.tolist(), filter=IndexFilter(readers=["group:few"]), limit=50)
        assert [h.id for h in hits] == _exact_ids(vectors, query, list(range(FEW)), FEW)
        assert index.exact_fallbacks == 1
    finally:
        index.close()


def test_reopened_with_other_settings_the_index_keeps_working(tmp_path):
    index, vectors = _filled(tmp_path, BELOW)
    index.close()
    query = _vectors(1, seed=17)[0]
    want = _exact_ids(vectors, query, list(range(POINTS)), 5)

    # The threshold lowered: the engine takes the graph config at load; until the next flush
    # compacts, the segments have no graph and the engine scans them.
    index = EdgeVectorIndex(tmp_path, DIM, SMALL)
    try:
        assert index.searches_graph
        assert (16, False) not in _segment_graphs(tmp_path)
        assert [h.id for h in index.rank(query.tolist(), filter=IndexFilter(), limit=5)] == want
        index.flush()
        assert (16, False) in _segment_graphs(tmp_path)
    finally:
        index.close()

    # int8 quantization switched on: built at the next flush, searched with rescoring.
    index = EdgeVectorIndex(tmp_path, DIM, replace(SMALL, quantization=True))
    try:
        index.flush()
        assert (16, True) in _segment_graphs(tmp_path)
        got = [h.id for h in index.rank(query.tolist(), filter=IndexFilter(), limit=5)]
        assert len(set(got) & set(want)) >= 4
    finally:
        index.close()

    # Back to the defaults (threshold far above): exact again, whatever the segments hold.
    index = EdgeVectorIndex(tmp_path, DIM)
    try:
        assert not index.searches_graph
        assert [h.id for h in index.rank(query.tolist(), filter=IndexFilter(), limit=5)] == want
        assert index.count(IndexFilter()) == POINTS
    finally:
        index.close()


@pytest.mark.parametrize("hnsw_from,graph", [(0, True), (1, False)])
def test_an_empty_index_follows_the_threshold(tmp_path, hnsw_from, graph):
    index = EdgeVectorIndex(tmp_path, DIM, EdgeHnswPolicy(hnsw_from=hnsw_from))
    try:
        assert index.searches_graph is graph
        assert index.rank([1.0] * DIM, filter=IndexFilter(), limit=3) == []
    finally:
        index.close()
