"""Exact or HNSW dense search on pgvector at ~113k points: recall and latency through
``PgvectorIndex`` (``index/pgvector_index.py``), beside the embedded engine's figures of
``bench/results/ann.md``.

The points are built as ``bench/bench_ann.py`` builds them, so the two results compare: the
18.8k real chunk vectors of the shared corpora (the embedding cache
``data/corpora/embeddings.db``, which ``make eval`` writes) and ``--copies - 1`` perturbed
copies of each (Gaussian noise ``--noise`` per dimension, renormalised), copy 0 readable by
``public`` and copy k by ``group:team-k``; the queries are ~200 real questions embedded with the
packaged model. Where the embedding cache is absent, the originals are synthetic instead (unit
vectors around 2,000 random centres) and so are the queries (perturbed originals): the
figures then say less about a real corpus, and the results say which data they are from.

PostgreSQL is the bundled server of the tests (pgserver's PostgreSQL 16 with pgvector 0.6.2,
``tests/postgres_server.py``: run with ``fsync=off``, which only speeds up the writes), or the
database of ``--database-url``. The points go in through ``PgvectorIndex.upsert`` (batches of
512, one transaction each, BM25 postings empty: this measures dense search). Maintaining the
graph row by row costs several milliseconds a point on these 2 cores, too slow for 113k points
in a run of a few minutes, so the first points go in with the HNSW index dropped, which is
then built in one go (``CREATE INDEX`` with the index's own m and ef_construction,
maintenance_work_mem 1 GB, as an operator would bulk-load), and the last ``--incremental``
points are upserted with the graph in place, timed: what an ingest pays per point. Then
``optimize()`` (VACUUM ANALYZE).

Per query (interleaved, so outside load hits every variant alike), in three filter modes (no
filter; readers any of ``group:team-1``, 1/6 of the points; readers any of ``public``,
``group:team-1``, 2/6), at limit 10 and 50 (50 is ``search_prefetch``, what hybrid search asks
of the dense method):

* exact: ``PgvectorIndex(exact=True)`` (index scans off: a sequential or GIN bitmap scan and a
  sort by distance). Its results are the ground truth, checked against a numpy brute force;
* ``hnsw ef=N``: ``hnsw.ef_search`` N whatever the limit (``ef_per_result=0``), so the table
  shows what the graph alone gives; a query left short still falls back to exact search,
  which the ``fallbacks`` column counts;
* ``citewise``: the index as the service builds it (``ef_search`` 200, 8 candidates per
  result: ef 200 at limit 10, 400 at limit 50).

BM25, through the postings table: up to ``--bm25-chunks`` paragraphs of the shared corpora
(``../shared/corpora``) as chunks, with their real BM25 vectors (``Bm25Encoder``) and 8-dimension
placeholder dense vectors, in a generation of their own (``g2``: tables of their own), and the
same in qdrant-edge. Per question: latency of ``index.search`` with the BM25 query (no filter,
and readers any of ``public``, ``group:team-1``, 2/3 of the chunks), and the share of
qdrant-edge's top 10 found in pgvector's (their scores agree to ~1e-6, so only near-ties may
differ). Skipped where the corpora are absent.

Recall@k = share of the k results whose score reaches the k-th exact score (ties count as
found), as in bench_ann. Latency = wall time of one ``index.search`` call from Python: the
transaction and its ``SET LOCAL``s, the query, and the payloads of the hits (bench_ann's
engine calls fetch no payload). The environment line records the load average: compare
variants within one run.

    .venv/bin/python bench/bench_pgvector.py [--copies 6] [--queries 200] [--efs 200,400]
    # -> bench/results/pgvector.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from psycopg import sql

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_ann import (  # noqa: E402  (the same data as the embedded engine's benchmark)
    DIM,
    _cached_vectors,
    _collection,
    _nearest_other,
    _pct,
    _questions,
    _readers,
    _recall,
)

from citewise.index.payload import ChunkPayload  # noqa: E402
from citewise.index.pgvector_index import (  # noqa: E402
    EF_PER_RESULT,
    EF_SEARCH,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    PgvectorIndex,
)
from citewise.index.vector_index import ChunkPoint, IndexFilter, SparseVector  # noqa: E402
from citewise.postgres import PostgresDatabase  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpora"
LIMITS = (10, 50)
WARMUP = 5
FILTERS = {
    "none": None,
    "team-1 (1/6)": ["group:team-1"],
    "public+team-1 (2/6)": ["public", "group:team-1"],
}
BATCH = 512


# -- data ------------------------------------------------------------------------------------


def _synthetic_originals(n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors around 2,000 random centres: clustered, as text embeddings are."""
    centres = rng.normal(size=(2000, DIM)).astype(np.float32)
    picks = rng.integers(0, len(centres), n)
    vectors = centres[picks] + rng.normal(0.0, 0.6, (n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _queries(args: argparse.Namespace, originals: np.ndarray,
             rng: np.random.Generator) -> tuple[list[list[float]], dict, str]:
    """The query vectors, how long embedding one took, and what they are."""
    if args.synthetic:
        picks = rng.choice(len(originals), args.queries + WARMUP, replace=False)
        noisy = originals[picks] + rng.normal(0.0, 0.05, (len(picks), DIM)).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        return noisy.astype(float).tolist(), {}, "perturbed synthetic originals"
    from citewise.index.dense import DenseEncoder

    encoder = DenseEncoder()
    encoder.warm_up()
    vectors, took = [], []
    for q in _questions(args.queries + WARMUP):
        t = time.perf_counter()
        vectors.append(encoder.embed_query(q))
        took.append((time.perf_counter() - t) * 1000)
    return vectors, _pct(took[WARMUP:]), "real questions embedded with the packaged model"


def _point(i: int, vector: np.ndarray, copy: int) -> ChunkPoint:
    return ChunkPoint(
        id=str(uuid.UUID(int=i + 1)), dense=vector.tolist(), sparse=SparseVector([], []),
        payload=ChunkPayload(document_id=f"doc-{i // 4}", version="v1", source="bench",
                             readers=_readers(copy), ordinal=i % 4))


def _upsert(index: PgvectorIndex, points: np.ndarray, copy_of: np.ndarray, first: int,
            end: int) -> None:
    started = time.perf_counter()
    for start in range(first, end, BATCH):
        index.upsert([_point(i, points[i], int(copy_of[i]))
                      for i in range(start, min(start + BATCH, end))])
        if (start - first) % (BATCH * 40) == 0:
            print(f"  {start - first} points, {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)


# -- database --------------------------------------------------------------------------------


def _database(args: argparse.Namespace):
    """(database URL, the server this started or None), or None with a reason printed."""
    if args.database_url:
        return args.database_url, None
    from tests.postgres_server import start_or_skip_reason

    server = start_or_skip_reason()
    if isinstance(server, str):
        print(f"skipping: {server} (or give --database-url)", file=sys.stderr)
        return None
    return server.create_database("citewise_bench"), server


def _sizes(db: PostgresDatabase) -> dict:
    rows = db.rows("SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes "
                   "FROM pg_class c WHERE c.relname IN ('chunk_vectors', 'chunk_vectors_dense')")
    return {r["name"]: round(r["bytes"] / 2**20, 1) for r in rows}


# -- measuring -------------------------------------------------------------------------------


def _filter(readers: list[str] | None) -> IndexFilter:
    return IndexFilter() if readers is None else IndexFilter(readers=list(readers))


def _search(index: PgvectorIndex, vector: list[float], limit: int, flt: IndexFilter):
    t = time.perf_counter()
    hits = index.search(vector, filter=flt, limit=limit)
    return (time.perf_counter() - t) * 1000, [(h.id, h.score) for h in hits]


def _measure(variants: dict[str, PgvectorIndex], queries: list[list[float]]) -> dict:
    """Every (variant, mode, limit) for every query, interleaved query by query; the exact
    variant's results are the truth the others are scored against."""
    lat: dict = {}
    rec: dict = {}
    falls: dict = {}
    truth: dict = {}
    for qi, vector in enumerate(queries):
        for mode, readers in FILTERS.items():
            flt = _filter(readers)
            for limit in LIMITS:
                for name, index in variants.items():
                    before = index.exact_fallbacks
                    ms, hits = _search(index, vector, limit, flt)
                    key = (name, mode, limit)
                    if name == "exact":
                        truth[(mode, limit, qi)] = hits
                    lat.setdefault(key, []).append(ms)
                    rec.setdefault(key, []).append(_recall(hits, truth[(mode, limit, qi)], limit))
                    falls[key] = falls.get(key, 0) + index.exact_fallbacks - before
    out: dict = {}
    for (name, mode, limit), values in lat.items():
        out.setdefault(name, {}).setdefault(mode, {})[f"limit_{limit}"] = {
            "latency_ms": _pct(values),
            f"recall_at_{limit}": round(statistics.fmean(rec[(name, mode, limit)]), 4),
            f"min_recall_at_{limit}": round(min(rec[(name, mode, limit)]), 3),
            "exact_fallbacks": falls[(name, mode, limit)],
        }
    return {"search": out, "truth": truth}


def _numpy_check(truth: dict, qmat: np.ndarray, points: np.ndarray, copy_of: np.ndarray,
                 copies: int) -> float:
    """Recall of the database's exact search against a numpy brute force (should be 1)."""
    scores = qmat @ points.T
    agree = []
    for mode, readers in FILTERS.items():
        allowed = np.ones(len(points), bool) if readers is None else np.isin(
            copy_of, [i for i in range(copies) if set(_readers(i)) & set(readers)])
        masked = np.where(allowed[None, :], scores, -np.inf)
        top = np.argsort(-masked, axis=1)[:, :max(LIMITS)]
        for limit in LIMITS:
            for qi in range(len(qmat)):
                brute = [(str(uuid.UUID(int=int(i) + 1)), float(scores[qi, i]))
                         for i in top[qi][:limit]]
                agree.append(_recall(brute, truth[(mode, limit, qi)], limit))
    return round(statistics.fmean(agree), 4)


# -- BM25 ------------------------------------------------------------------------------------


def _paragraphs(limit: int) -> list[str]:
    """Paragraphs of the shared corpora's Markdown (8 words or more), in a fixed order."""
    out: list[str] = []
    for md in sorted(CORPORA.rglob("*.md")) if CORPORA.is_dir() else []:
        for para in md.read_text(errors="replace").split("\n\n"):
            if len(para.split()) >= 8:
                out.append(para.strip())
                if len(out) >= limit:
                    return out
    return out


def _bm25(db: PostgresDatabase, limit: int, questions: list[str]) -> dict | None:
    """BM25 latency through the postings, and agreement with qdrant-edge's ranking."""
    import shutil
    import tempfile

    from citewise.index.qdrant_edge_index import EdgeVectorIndex
    from citewise.index.sparse import Bm25Encoder

    texts = _paragraphs(limit)
    if not texts:
        print(f"skipping BM25: {CORPORA} is absent", file=sys.stderr)
        return None
    encoder = Bm25Encoder()
    points = []
    for i, text in enumerate(texts):
        readers = ["public"] if i % 3 == 0 else [f"group:team-{i % 3}"]
        points.append(ChunkPoint(
            id=str(uuid.UUID(int=i + 1)), dense=[1.0] + [0.0] * 7,
            sparse=encoder.embed_document(text),
            payload=ChunkPayload(document_id=f"p-{i}", version="v1", source="bench",
                                 readers=readers, text=text[:200])))
    postings = sum(len(p.sparse.indices) for p in points)
    print(f"BM25: {len(points)} chunks, {postings} postings", file=sys.stderr)
    index = PgvectorIndex(db, 8, generation="g2")
    t = time.perf_counter()
    for start in range(0, len(points), BATCH):
        index.upsert(points[start:start + BATCH])
    upsert_s = time.perf_counter() - t
    index.optimize()
    folder = Path(tempfile.mkdtemp(prefix="citewise-bench-edge-"))
    edge = EdgeVectorIndex(folder, 8)
    try:
        edge.upsert(points)
        modes = {"none": IndexFilter(), "public+team-1 (2/3)":
                 IndexFilter(readers=["public", "group:team-1"])}
        queries = [encoder.embed_query(q) for q in questions]
        queries = [q for q in queries if q.indices]
        lat: dict[str, list[float]] = {m: [] for m in modes}
        overlap: list[float] = []
        for q in queries[:WARMUP]:
            index.search(q, filter=IndexFilter(), limit=50)
        for q in queries[WARMUP:]:
            for mode, flt in modes.items():
                t = time.perf_counter()
                hits = index.search(q, filter=flt, limit=50)
                lat[mode].append((time.perf_counter() - t) * 1000)
                if mode == "none":
                    want = {h.id for h in edge.search(q, filter=flt, limit=10)}
                    if want:
                        overlap.append(len(want & {h.id for h in hits[:10]}) / len(want))
        sizes = {r["name"]: round(r["bytes"] / 2**20, 1) for r in db.rows(
            "SELECT relname AS name, pg_total_relation_size(oid) AS bytes FROM pg_class "
            "WHERE relname IN ('chunk_postings_g2', 'chunk_terms_g2')")}
    finally:
        edge.close()
        shutil.rmtree(folder, ignore_errors=True)
    return {"chunks": len(points), "postings": postings, "upsert_s": round(upsert_s, 1),
            "queries": len(queries) - WARMUP, "sizes_mib": sizes,
            "bytes_per_posting": round(sizes.get("chunk_postings_g2", 0) * 2**20 / postings),
            "latency_ms": {mode: _pct(values) for mode, values in lat.items()},
            "top10_overlap_with_edge": round(statistics.fmean(overlap), 4) if overlap else None}


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--noise", type=float, default=0.025)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--efs", default="200,400")
    parser.add_argument("--bm25-chunks", type=int, default=50_000,
                        help="corpus paragraphs for the BM25 phase (0: skip it)")
    parser.add_argument("--incremental", type=int, default=3000,
                        help="points upserted (and timed) with the HNSW graph in place")
    parser.add_argument("--embedding-cache", type=Path,
                        default=ROOT / "data" / "corpora" / "embeddings.db")
    parser.add_argument("--database-url", help="an existing database (default: start the "
                        "tests' bundled PostgreSQL in a temporary folder)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    args.synthetic = not args.embedding_cache.exists()
    efs = [int(x) for x in args.efs.split(",")]
    run_started = time.perf_counter()
    load_start = os.getloadavg()
    when = datetime.now(UTC).isoformat(timespec="seconds")
    rng = np.random.default_rng(11)

    if args.synthetic:
        print(f"{args.embedding_cache} is absent (`make eval` writes it): synthetic vectors",
              file=sys.stderr)
        originals = _synthetic_originals(18_800, rng)
    else:
        originals = _cached_vectors(args.embedding_cache)
    nearest = _nearest_other(originals, 2000, rng)
    points, copy_of, copy_cos = _collection(originals, args.copies, args.noise, seed=12)
    print(f"{len(points)} points ({len(originals)} originals x {args.copies})", file=sys.stderr)
    vectors, embed_ms, query_kind = _queries(args, originals, rng)
    warm, queries = vectors[:WARMUP], vectors[WARMUP:]

    found = _database(args)
    if found is None:
        return
    url, server = found
    results: dict = {
        "when": when, "data": "synthetic" if args.synthetic else "real chunk vectors",
        "points": len(points), "originals": len(originals), "copies": args.copies,
        "noise_sigma": args.noise, "copy_cosine_to_original": copy_cos,
        "nearest_other_cosine": nearest, "queries": len(queries), "query_kind": query_kind,
        "query_embedding_ms": embed_ms, "efs": efs,
        "hnsw": {"m": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION},
        "citewise_ef": {"ef_search": EF_SEARCH, "ef_per_result": EF_PER_RESULT},
    }
    db = PostgresDatabase(url, pool_size=4)
    try:
        results["server"] = db.row("SELECT version() AS v")["v"]
        results["pgvector"] = db.row(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'")["extversion"]
        index = PgvectorIndex(db, DIM)
        if index.count():
            raise SystemExit(f"{db.display} already holds points: give an empty database")
        bulk = max(0, len(points) - args.incremental)
        with db.connection() as conn:
            conn.execute("DROP INDEX chunk_vectors_dense")
        print(f"upserting {bulk} points without the graph", file=sys.stderr)
        t = time.perf_counter()
        _upsert(index, points, copy_of, 0, bulk)
        results["bulk_points"] = bulk
        results["bulk_upsert_s"] = round(time.perf_counter() - t, 1)
        print(f"building the graph over {bulk} points", file=sys.stderr)
        t = time.perf_counter()
        with db.transaction() as conn:
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            conn.execute(sql.SQL(
                "CREATE INDEX chunk_vectors_dense ON chunk_vectors USING hnsw "
                "(dense vector_cosine_ops) WITH (m = {}, ef_construction = {})").format(
                sql.Literal(HNSW_M), sql.Literal(HNSW_EF_CONSTRUCTION)))
        results["build_s"] = round(time.perf_counter() - t, 1)
        print(f"upserting {len(points) - bulk} points with the graph in place", file=sys.stderr)
        t = time.perf_counter()
        _upsert(index, points, copy_of, bulk, len(points))
        results["incremental_points"] = len(points) - bulk
        results["incremental_upsert_s"] = round(time.perf_counter() - t, 1)
        results["incremental_points_per_s"] = round(
            results["incremental_points"] / max(results["incremental_upsert_s"], 0.001))
        t = time.perf_counter()
        index.optimize()
        results["optimize_s"] = round(time.perf_counter() - t, 1)
        results["sizes_mib"] = _sizes(db)
        print(f"bulk {results['bulk_upsert_s']} s, graph {results['build_s']} s, incremental "
              f"{results['incremental_points_per_s']} points/s, optimize "
              f"{results['optimize_s']} s, {results['sizes_mib']}", file=sys.stderr)

        variants = {"exact": PgvectorIndex(db, DIM, exact=True)}
        for ef in efs:
            variants[f"hnsw ef={ef}"] = PgvectorIndex(db, DIM, ef_search=ef, ef_per_result=0)
        variants["citewise"] = PgvectorIndex(db, DIM)
        for v in warm:
            for variant in variants.values():
                _search(variant, v, 50, IndexFilter())
        t = time.perf_counter()
        measured = _measure(variants, queries)
        results["search_s"] = round(time.perf_counter() - t, 1)
        results["search"] = measured["search"]
        qmat = np.asarray(queries, dtype=np.float32)
        results["exact_vs_numpy_recall"] = _numpy_check(measured["truth"], qmat, points,
                                                        copy_of, args.copies)
        if args.bm25_chunks:
            results["bm25"] = _bm25(db, args.bm25_chunks, _questions(args.queries + WARMUP))
    finally:
        db.close()
        if server is not None:
            from tests.postgres_server import remove

            remove(server)

    ann = ROOT / "bench" / "results" / "ann.json"
    if ann.exists():
        results["edge"] = json.loads(ann.read_text())
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(),
                          "load_at_start": [round(x, 2) for x in load_start],
                          "load_at_end": [round(x, 2) for x in os.getloadavg()]}
    results["run_s"] = round(time.perf_counter() - run_started, 1)
    results["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    saved = {k: v for k, v in results.items() if k != "edge"}
    (args.out / "pgvector.json").write_text(json.dumps(saved, indent=2))
    (args.out / "pgvector.md").write_text(_markdown(results))
    print(_markdown(results))


# -- report ----------------------------------------------------------------------------------


def _row(name: str, mode: str, limits: dict) -> str:
    l10, l50 = limits["limit_10"], limits["limit_50"]
    return (f"| {name} | {mode} | {l10['recall_at_10']:.4f} | {l50['recall_at_50']:.4f} "
            f"({l50['min_recall_at_50']:.2f}) | {l10['latency_ms']['p50']} / "
            f"{l10['latency_ms']['p95']} | {l50['latency_ms']['p50']} / "
            f"{l50['latency_ms']['p95']} | {l10['exact_fallbacks']} / "
            f"{l50['exact_fallbacks']} |")


def _edge_lines(r: dict) -> list[str]:
    """The embedded engine's figures of ann.json at limit 50, beside ours."""
    edge = r.get("edge")
    if not edge:
        return ["No `bench/results/ann.json` to compare with (`bench/bench_ann.py` writes it)."]
    config = edge["configs"].get("default") or next(iter(edge["configs"].values()))
    rows = [
        f"Limit 50. qdrant-edge from `ann.md` ({edge['when']}, another run, another load: "
        "its latency is one engine call without payloads, ours one `index.search` with its "
        "transaction and the hits' payloads).", "",
        "| Filter | edge exact p50 / p95 | edge hnsw ef=128 recall@50, p50 | edge hnsw ef=256 "
        "recall@50, p50 | pgvector exact p50 / p95 | pgvector citewise recall@50, p50 / p95 |",
        "|---|---|---|---|---|---|",
    ]
    for mode in FILTERS:
        def cell(entry: dict, mode: str = mode) -> dict:
            return entry[mode]["limit_50"]

        edge_search = config["search"]
        e_exact = cell(edge_search["exact"])
        e128 = cell(edge_search.get("hnsw ef=128", edge_search["exact"]))
        e256 = cell(edge_search.get("hnsw ef=256", edge_search["exact"]))
        p_exact = cell(r["search"]["exact"])
        ours = cell(r["search"]["citewise"])
        rows.append(
            f"| {mode} | {e_exact['latency_ms']['p50']} / {e_exact['latency_ms']['p95']} | "
            f"{e128['recall_at_50']:.4f}, {e128['latency_ms']['p50']} | "
            f"{e256['recall_at_50']:.4f}, {e256['latency_ms']['p50']} | "
            f"{p_exact['latency_ms']['p50']} / {p_exact['latency_ms']['p95']} | "
            f"{ours['recall_at_50']:.4f}, {ours['latency_ms']['p50']} / "
            f"{ours['latency_ms']['p95']} |")
    return rows


def _markdown(r: dict) -> str:
    m = r["machine"]
    cc = r["copy_cosine_to_original"]
    embed = r["query_embedding_ms"]
    lines = [
        f"# Exact vs HNSW dense search on pgvector, {r['when']}", "",
        f"{r['points']} points: {r['originals']} {r['data']} (originals) and "
        f"{r['copies'] - 1} perturbed copies of each (noise sigma {r['noise_sigma']}: mean "
        f"cosine to the original {cc['mean']}, two copies of one original "
        f"{cc['copy_to_copy_mean']}; an original's nearest other: median "
        f"{r['nearest_other_cosine']['median']}), as `bench_ann.py` builds them. 384 "
        f"dimensions, cosine; readers: copy 0 `public`, copy k `group:team-k`. "
        f"{r['queries']} queries: {r['query_kind']}"
        + (f" (p50 {embed['p50']} ms per question)" if embed else "") + ".", "",
        f"{r['server'].split(',')[0]}, pgvector {r['pgvector']}; HNSW m {r['hnsw']['m']}, "
        f"ef_construction {r['hnsw']['ef_construction']}. Writes through "
        f"`PgvectorIndex.upsert` (batches of {BATCH}): {r['bulk_points']} points without "
        f"the graph in {r['bulk_upsert_s']} s, the graph built over them in {r['build_s']} s "
        f"(`CREATE INDEX`, maintenance_work_mem 1 GB), then {r['incremental_points']} points "
        f"with the graph in place in {r['incremental_upsert_s']} s "
        f"({r['incremental_points_per_s']} points/s: what an ingest pays); `optimize()` "
        f"(VACUUM ANALYZE) {r['optimize_s']} s. Sizes (MiB): {r['sizes_mib']} (the table with "
        f"all its indexes, and the HNSW index alone). Commit `{r['commit']}`.", "",
        f"Environment: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}; load average "
        f"{m['load_at_start']} at start, {m['load_at_end']} at the end (shared machine). "
        f"Searches {r['search_s']} s; run time {r['run_s']} s.", "",
        "Ground truth: `PgvectorIndex(exact=True)` (it agrees with a numpy brute force: recall "
        f"{r['exact_vs_numpy_recall']}). Recall@k counts a result found when its score reaches "
        "the k-th exact score; in brackets the worst single query's recall@50. Latency: one "
        "`index.search` call, p50 / p95 in ms. `hnsw ef=N`: `hnsw.ef_search` N at both limits; "
        f"`citewise`: the service's setting (ef_search {r['citewise_ef']['ef_search']}, at "
        f"least {r['citewise_ef']['ef_per_result']} per result asked for). Fallbacks: queries "
        "of the variant (of each limit) that the graph left short of the limit and that were "
        "asked again exactly.", "",
        "| Variant | Filter | recall@10 | recall@50 (min) | p50 / p95 @10 | p50 / p95 @50 | "
        "fallbacks @10 / @50 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, modes in r["search"].items():
        for mode, limits in modes.items():
            lines.append(_row(name, mode, limits))
    lines += ["", "## Beside the embedded engine", ""] + _edge_lines(r) + [""]
    lines += ["## BM25 through the postings table", ""] + _bm25_lines(r.get("bm25")) + [""]
    return "\n".join(lines)


def _bm25_lines(b: dict | None) -> list[str]:
    if not b:
        return ["Not measured (the shared corpora are absent, or `--bm25-chunks 0`)."]
    lat = b["latency_ms"]
    return [
        f"{b['chunks']} paragraphs of the shared corpora as chunks, {b['postings']} postings, "
        f"upserted in {b['upsert_s']} s; on disk (MiB, with indexes): {b['sizes_mib']}, "
        f"{b['bytes_per_posting']} bytes per posting. {b['queries']} questions, limit 50:", "",
        "| Filter | p50 / p95 ms |", "|---|---|",
        *[f"| {mode} | {v['p50']} / {v['p95']} |" for mode, v in lat.items()], "",
        f"Share of qdrant-edge's BM25 top 10 (same chunks, same vectors) in pgvector's: "
        f"{b['top10_overlap_with_edge']}.",
    ]


if __name__ == "__main__":
    main()
