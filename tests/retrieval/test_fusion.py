"""Fusing dense and BM25 candidates: the arithmetic, and the same ranking on both backends."""

from __future__ import annotations

import pytest

from citewise.index.vector_index import VectorHit
from citewise.ingest.jobs import run_source
from citewise.retrieval.fusion import FusionConfig, fuse
from citewise.types import Identity
from tests.kb import folder_source


def hits(*pairs: tuple[str, float]) -> list[VectorHit]:
    return [VectorHit(id=i, score=s, payload={"id": i}) for i, s in pairs]


def test_convex_divides_by_each_lists_best_and_weights_the_two():
    dense = hits(("a", 0.8), ("b", 0.4))
    sparse = hits(("b", 20.0), ("c", 10.0))
    fused = {h.id: h.score for h in fuse(dense, sparse, FusionConfig("convex", 0.6))}
    # a: dense 1.0, missing from BM25 -> BM25's lowest (0.5); b: 0.5 and 1.0; c: 0.5 and 0.5.
    assert fused == pytest.approx({"a": 0.6 + 0.4 * 0.5, "b": 0.6 * 0.5 + 0.4, "c": 0.5})
    assert [h.id for h in fuse(dense, sparse, FusionConfig("convex", 0.6))] == ["a", "b", "c"]
    # All weight on BM25: its order wins.
    assert [h.id for h in fuse(dense, sparse, FusionConfig("convex", 0.0))][0] == "b"


def test_convex_ranking_does_not_depend_on_list_depth():
    dense = hits(*[(f"d{i}", 0.9 - i * 0.01) for i in range(60)])
    sparse = hits(*[(f"d{i}", 30.0 - i) for i in range(0, 60, 2)])
    config = FusionConfig("convex", 0.6)
    deep = [h.id for h in fuse(dense, sparse, config)][:10]
    shallow = [h.id for h in fuse(dense[:40], sparse[:20], config)][:10]
    assert deep == shallow


def test_rrf_uses_ranks_and_weights():
    dense = hits(("a", 0.9), ("b", 0.8))
    sparse = hits(("b", 5.0), ("a", 1.0))
    equal = {h.id: h.score for h in fuse(dense, sparse, FusionConfig("rrf", 0.5, 60))}
    assert equal["a"] == pytest.approx(1 / 61 + 1 / 62) == pytest.approx(equal["b"])
    dense_heavy = fuse(dense, sparse, FusionConfig("rrf", 0.8, 60))
    assert dense_heavy[0].id == "a"


def test_bad_fusion_settings_are_refused():
    with pytest.raises(ValueError, match="rrf or convex"):
        FusionConfig("sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="between 0 and 1"):
        FusionConfig("convex", 1.5)


@pytest.mark.parametrize("fusion", ["convex", "rrf"])
def test_both_backends_rank_identically(make_services, kb, tmp_path, fusion):
    source = folder_source(kb)
    edge = make_services(search_fusion=fusion)
    server = make_services(data_dir=tmp_path / "server",
                           qdrant_url=f"local:{tmp_path / 'qdrant-local'}", search_fusion=fusion)
    for s in (edge, server):
        assert run_source(s.pipeline, source, trigger="test").status == "succeeded"
    anyone = Identity.anonymous()
    for q in ("replica promotion after the primary died", "disk full WAL archives",
              "holiday on-call swap", "RedisPrimaryDown"):
        a = [(r.path, r.heading, round(r.score, 4)) for r in edge.search.search(q, anyone)]
        b = [(r.path, r.heading, round(r.score, 4)) for r in server.search.search(q, anyone)]
        assert a == b, q
        assert a, q
