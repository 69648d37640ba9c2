"""When the embedded index (``qdrant_edge_index.py``) builds an HNSW graph, and how it searches it.

Exact search never misses and, on this 2-core machine, costs ~14 ms for an unfiltered dense
query at 113k points (bench/results/ann.md); it grows with the points a caller may read, ~10x
at a million (bench/results/ann-1m.md). So, like the pgvector backend (``EXACT_BELOW``):

* **Below ``hnsw_from`` points** the shard keeps Qdrant's "no graph" (``m = 0``): nothing is
  built at compaction, every dense query is exact. The demo, the tests and a small installation
  pay for no graph.
* **From ``hnsw_from`` points** the shard's config asks for a graph (``m``, ``ef_construct``,
  optionally int8 scalar quantization of the vectors); the engine builds it at the next
  compaction (``EdgeShard.optimize``), which the index runs when a run ends with the threshold
  crossed or a tenth of the points not yet in the graph (``needs_build``). Dense queries then
  walk the graph with ``ef = max(ef, limit)``, on the int8 vectors when quantized, their
  candidates (``oversampling`` x limit) rescored with the originals. A filter whose points
  link mostly to points it excludes starves the walk (seen at 38k points: 1 result of 50):
  a query the graph leaves short of ``limit`` is asked again exactly, as pgvector does; a
  caller who may read few points then gets every one of them, and that exact pass is cheap
  because the engine reads only their points through the ``readers`` payload index. ACORN
  (the engine's filtered walk over two-hop neighbours) was measured and left out: at a
  million points it found no more of the exact neighbours for callers reading a sixth or a
  third of the points, and took 2-3x as long (bench/results/ann-1m.md).

The engine accepts a changed HNSW or quantization config when a shard is loaded (it rewrites
its stored config; measured on qdrant-edge 0.9.0), and rebuilds the segments at the next
compaction: changing these settings never makes an existing index unreadable, and takes effect
at the next ingest run that compacts, or at once with ``citewise reindex``.
"""

from __future__ import annotations

from dataclasses import dataclass

import qdrant_edge as qe

from citewise.index.settings import IndexSettings

# Qdrant's "no graph": segments are plain, every query scans.
NO_GRAPH = 0
# A compaction (graph build) is due when this share of the points is outside the graph.
UNINDEXED_SHARE = 0.10
_EXACT = qe.SearchParams(exact=True)


@dataclass(frozen=True)
class EdgeHnswPolicy:
    """The settings of ``CITEWISE_EDGE_*`` (``index/settings.py``) as the index uses them."""

    hnsw_from: int = 100_000
    m: int = 16
    ef_construct: int = 100
    ef: int = 1024
    quantization: bool = True
    oversampling: float = 2.0
    # Below this many KB of vectors (a segment's, or a filter's estimated points') the engine
    # scans instead of walking the graph: Qdrant's default, ~6.7k points of 384 floats. The
    # tests lower it to reach the graph with a few thousand points.
    full_scan_kb: int = 10_000
    # A segment under this many KB of vectors gets no graph at compaction (it is scanned);
    # None = the engine's default. The tests set 1.
    indexing_kb: int | None = None

    @classmethod
    def from_settings(cls, settings: IndexSettings) -> EdgeHnswPolicy:
        return cls(hnsw_from=settings.edge_hnsw_from, m=settings.edge_hnsw_m,
                   ef_construct=settings.edge_hnsw_ef_construct, ef=settings.edge_hnsw_ef,
                   quantization=settings.edge_quantization == "int8")

    def wants_graph(self, points: int) -> bool:
        return points >= self.hnsw_from

    def hnsw_config(self, graph: bool) -> qe.HnswIndexConfig:
        return qe.HnswIndexConfig(m=self.m if graph else NO_GRAPH,
                                  ef_construct=self.ef_construct,
                                  full_scan_threshold=self.full_scan_kb)

    def optimizers(self) -> qe.EdgeOptimizersConfig | None:
        if self.indexing_kb is None:
            return None
        return qe.EdgeOptimizersConfig(indexing_threshold=self.indexing_kb)

    def quantization_config(self, graph: bool) -> qe.ScalarQuantizationConfig | None:
        if not (graph and self.quantization):
            return None
        return qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99,
                                           always_ram=True)

    def stored_form(self, graph: bool) -> tuple[int, int, int, bool]:
        """(m, ef_construct, full_scan_kb, quantized) as the engine stores this config."""
        return (self.m if graph else NO_GRAPH, self.ef_construct, self.full_scan_kb,
                graph and self.quantization)

    def search_params(self, graph: bool, limit: int) -> qe.SearchParams:
        if not graph:
            return _EXACT
        quantization = (qe.QuantizationSearchParams(rescore=True, oversampling=self.oversampling)
                        if self.quantization else None)
        return qe.SearchParams(hnsw_ef=max(self.ef, limit), quantization=quantization)

    def needs_build(self, graph: bool, built: set[tuple[int, bool]], points: int,
                    indexed: int) -> bool:
        """Whether a compaction should run now to (re)build the graph: none of the shard's
        segments has this policy's graph (``built``: (m, quantized) of each segment's HNSW
        index; the engine counts an m = 0 segment's vectors as indexed), or a tenth of the
        points are outside the graph (the appendable segments the last runs wrote to)."""
        if not graph:
            return False
        if (self.m, self.quantization) not in built:
            return True
        return points - indexed >= max(1, int(points * UNINDEXED_SHARE))


def exact_params() -> qe.SearchParams:
    return _EXACT
