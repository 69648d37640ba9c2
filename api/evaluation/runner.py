"""Run a BEIR benchmark through citewise: isolated ingest, then every query, per configuration.

The corpus is ingested by the real pipeline into its own data folder under
``<data dir>/eval/``, named by a hash of the corpus and the index settings, so a second run with
the same corpus and settings finds it done (the pipeline skips unchanged documents) and a
change to chunking, the model or BM25 gets a fresh index instead of overwriting the old one.
All evaluation indexes share one embedding cache, so variants that embed the same chunk texts
embed them once.

Queries go through ``SearchService.search``, the function behind ``/v1/search``: same
permission filter, same fusion, same version check. The only difference is a deeper page
(``depth`` chunks), since ranking 100 documents takes more than 100 chunks.
"""

from __future__ import annotations

import hashlib
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from citewise.api.evaluation.beir import BeirDataset, corpus_fingerprint
from citewise.api.evaluation.ir_metrics import evaluate, pool_best_chunk
from citewise.api.settings import Settings
from citewise.errors import InvalidRequestError
from citewise.index.dense import EmbeddingCache
from citewise.index.sparse import Bm25Encoder
from citewise.retrieval.fusion import FusionConfig
from citewise.retrieval.search import SearchMode
from citewise.settings import SourceConfig
from citewise.types import Identity

DEFAULT_DEPTH = 300


@dataclass(frozen=True)
class RetrievalConfig:
    """One way of searching, as ``--configs`` names it."""

    name: str
    mode: SearchMode
    fusion: FusionConfig | None = None  # hybrid only; None = the service's default

    def describe(self, default: FusionConfig, encoder: str = "all-MiniLM-L6-v2") -> str:
        if self.mode == "dense":
            # The encoder's own name (a tuned model's folder, a remote model): a table of
            # results must say which vectors it measured.
            return f"dense only ({encoder})"
        if self.mode == "sparse":
            return "BM25 only"
        return f"hybrid, {(self.fusion or default).describe()}"


CONFIG_HELP = (
    "dense, bm25, default (the configured hybrid), rrf[:W[:K]] (reciprocal rank fusion, "
    "dense weight W, constant K), convex[:W] (scores divided by each list's best, dense "
    "weight W)"
)


def parse_config(name: str) -> RetrievalConfig:
    """``dense``, ``bm25``, ``default``, ``rrf``, ``rrf:0.4``, ``rrf:0.5:20``, ``convex:0.3``."""
    name = name.strip()
    head, *args = name.split(":")
    try:
        if head == "dense" and not args:
            return RetrievalConfig(name, "dense")
        if head in ("bm25", "sparse") and not args:
            return RetrievalConfig(name, "sparse")
        if head == "default" and not args:
            return RetrievalConfig(name, "hybrid")
        if head == "rrf" and len(args) <= 2:
            weight = float(args[0]) if args else 0.5
            k = int(args[1]) if len(args) > 1 else 60
            return RetrievalConfig(name, "hybrid", FusionConfig("rrf", weight, k))
        if head == "convex" and len(args) <= 1:
            weight = float(args[0]) if args else 0.5
            return RetrievalConfig(name, "hybrid", FusionConfig("convex", weight))
    except ValueError as e:
        raise InvalidRequestError(f"bad configuration {name!r}: {e}", hint=CONFIG_HELP) from None
    raise InvalidRequestError(f"unknown configuration {name!r}", hint=CONFIG_HELP)


@dataclass
class ConfigResult:
    config: str
    description: str
    metrics: dict[str, float]
    p50_ms: float  # a first page: top_k=10, as /v1/search serves by default
    p95_ms: float
    deep_p50_ms: float  # the ``depth``-chunk calls the metrics come from
    is_default: bool = False
    query_embedding_p50_ms: float = 0.0  # on top of search, for dense and hybrid
    per_query: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "description": self.description,
            "default": self.is_default,
            **{k: round(v, 4) for k, v in self.metrics.items()},
            "p50_ms": round(self.p50_ms, 2),
            "p95_ms": round(self.p95_ms, 2),
            "deep_p50_ms": round(self.deep_p50_ms, 2),
            "query_embedding_p50_ms": round(self.query_embedding_p50_ms, 2),
        }


def index_folder(eval_root: Path, dataset: BeirDataset, settings: Settings) -> Path:
    """``<eval root>/<dataset>-<hash of corpus and index settings>``."""
    from citewise.ingest.chunking.sections import SectionChunker

    model = str(settings.embedding.embedding_model_path or "all-MiniLM-L6-v2")
    key = "|".join([corpus_fingerprint(dataset.folder), SectionChunker.version,
                    str(settings.ingest.chunk_max_tokens), model, Bm25Encoder.version])
    slug = re.sub(r"[^a-z0-9]+", "-", dataset.name.lower()).strip("-") or "dataset"
    return eval_root / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def open_services(settings: Settings, folder: Path, eval_root: Path):
    """Services over the isolated folder: its own SQLite catalog, embedded Qdrant and local
    blobs, whatever the deployment uses (a shared database, a Qdrant server, S3), so an
    evaluation never touches production data."""
    from citewise.api.composition import build_services

    isolated = settings.replaced(data_dir=folder, database_url=None, vector_store="qdrant",
                                 qdrant_url=None, blob_store="local")
    services = build_services(isolated)
    own_cache = services.dense.cache
    services.dense.cache = EmbeddingCache(eval_root / "embeddings.db")
    if own_cache is not None:
        own_cache.close()
    return services


def ingest_corpus(services, dataset: BeirDataset, progress=None):
    """Bring the isolated index in line with the corpus; a no-op when nothing changed."""
    from citewise.ingest.jobs import run_source

    source = SourceConfig(name=_source_name(dataset), type="beir", path=str(dataset.folder))
    return run_source(services.pipeline, source, trigger="eval", progress=progress)


def _source_name(dataset: BeirDataset) -> str:
    return ("beir-" + re.sub(r"[^a-z0-9._-]+", "-", dataset.name.lower()))[:63].strip("-")


def run_configs(
    services,
    dataset: BeirDataset,
    configs: list[RetrievalConfig],
    *,
    depth: int = DEFAULT_DEPTH,
    limit: int | None = None,
    on_config: Callable[[ConfigResult], None] | None = None,
) -> list[ConfigResult]:
    """Every query of the split through ``SearchService.search`` for each configuration."""
    from citewise.api.composition import build_evaluation_search

    search = build_evaluation_search(services, max_top_k=max(depth, 100))
    query_ids = list(dataset.queries)[:limit] if limit else list(dataset.queries)
    qrels = {q: dataset.qrels[q] for q in query_ids}
    # Embed every query once up front: latency below is then search alone, the same for
    # every configuration (embedding a query is a constant ~10-30 ms on top).
    embed_ms = []
    for qid in query_ids:
        started = time.perf_counter()
        search.query_vector(dataset.queries[qid])
        embed_ms.append((time.perf_counter() - started) * 1000)
    query_embedding_p50_ms = statistics.median(embed_ms) if embed_ms else 0.0
    anyone = Identity.anonymous()
    results = []
    for config in configs:
        run: dict[str, dict[str, float]] = {}
        rankings: dict[str, list[str]] = {}
        timings, deep_timings = [], []
        for qid in query_ids:
            query = dataset.queries[qid]
            started = time.perf_counter()
            search.search(query, anyone, top_k=10, mode=config.mode, fusion=config.fusion)
            timings.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            hits = search.search(query, anyone, top_k=depth, mode=config.mode,
                                 fusion=config.fusion)
            deep_timings.append((time.perf_counter() - started) * 1000)
            # Hits are best first; give documents rank-based scores so that ties in fused
            # scores cannot reorder them under trec_eval's tie-breaking.
            pooled = pool_best_chunk((h.path or h.document_id, -i) for i, h in enumerate(hits))
            run[qid] = {doc: float(len(hits) + score) for doc, score in pooled.items()}
            rankings[qid] = list(pooled)[:10]
        fusion = config.fusion or search.fusion
        result = ConfigResult(
            config=config.name,
            description=config.describe(search.fusion, search.dense.model_id),
            metrics=evaluate(run, qrels),
            p50_ms=statistics.median(timings) if timings else 0.0,
            p95_ms=percentile(timings, 95),
            deep_p50_ms=statistics.median(deep_timings) if deep_timings else 0.0,
            is_default=config.mode == "hybrid" and fusion == search.fusion,
            per_query=rankings,
            query_embedding_p50_ms=query_embedding_p50_ms,
        )
        results.append(result)
        if on_config:
            on_config(result)
    return results


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile (``pct`` in 0..100) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]
