"""Exact or HNSW dense search on the embedded engine (qdrant-edge) at ~113k points: recall and
latency measured on real chunk vectors and real questions.

The collection is built directly with ``qdrant_edge`` (not through the ingest pipeline, which
would take ~5 minutes at this size), with the dense vector config of
``index/qdrant_edge_index.py`` (cosine, 384 dimensions, vector name ``dense``) and a keyword
payload index on ``readers``, created before the points go in, as citewise does:

* the points are the 18.8k real chunk vectors of the shared corpora, read from the embedding cache
  ``data/corpora/embeddings.db`` (``index/dense.py``'s ``EmbeddingCache``: float32 rows of
  all-MiniLM-L6-v2, L2-normalised), plus ``--copies - 1`` perturbed copies of each (vector +
  Gaussian noise of standard deviation ``--noise`` per dimension, renormalised). The default
  noise (0.025) puts a copy at a mean cosine of ~0.90 to its original, and two copies of the same
  chunk at ~0.81 to each other, about where a real chunk's nearest other chunk lies (median
  0.80, measured and written to the results): copies are near their original but distinct. The
  noise is isotropic in all 384 dimensions, which real text vectors are not, so the data is, if
  anything, harder for a graph index than a real corpus of that size;
* ``readers``, as in ``bench/bench_scale.py``: copy 0 is ``public``, copy k readable by
  ``group:team-k``. Three query modes: no filter; ``readers`` any of ``group:team-1`` (1/6 of
  the points); ``readers`` any of ``public``, ``group:team-1`` (2/6, what bench_scale's caller
  sees). citewise always filters by readers.

The queries are ~200 real questions (``bench/golden/shared-corpora.jsonl``,
``demo/golden-set.jsonl``, then headings of the corpora turned into questions, fixed seed),
embedded one at a time with the packaged model (that time is measured too: it is part of every
search). Ground truth is the engine's exact search (``SearchParams(exact=True)``) at limit 10
and 50 (50 is ``search_prefetch``, the candidates citewise's hybrid search takes from each
method), checked against a numpy brute force. Recall@k of a search = share of its k results
whose score reaches the k-th exact score (ties count as found).

Per HNSW configuration (the engine's default and a larger graph), a fresh shard: upsert, then
``optimize()`` (timed: that builds the graph; the segment files then say ``"type": "hnsw"`` with
its ``m`` / ``ef_construct``, and ``info().indexed_vectors_count`` counts the indexed vectors),
then for each query, interleaved so that outside load hits every variant alike: exact search,
and HNSW with ``hnsw_ef`` in ``--efs``, at limit 10 and 50, in the three modes. Latency is the
wall time of one ``shard.query`` from Python, one query at a time (the engine spreads a query
over its own search threads, as in citewise). Payloads are not fetched (the same per-result cost
either way). Exact search is also timed before ``optimize`` (the appendable segments a fresh
ingest leaves). The environment line records the date, CPU count and load average at start and
end; the machine may be shared, so compare variants within one run, not across runs.

    .venv/bin/python bench/bench_ann.py [--copies 6] [--noise 0.025] [--queries 200]
    # -> bench/results/ann.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import qdrant_edge as qe  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citewise.api.evaluation.runner import percentile  # noqa: E402
from citewise.index.dense import DenseEncoder  # noqa: E402
from citewise.index.vector_index import DENSE  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpora"
GOLDEN = [ROOT / "bench" / "golden" / "shared-corpora.jsonl", ROOT / "demo" / "golden-set.jsonl"]
DIM = 384
LIMITS = (10, 50)
WARMUP = 5
FILTERS = {
    "none": None,
    "team-1 (1/6)": ["group:team-1"],
    "public+team-1 (2/6)": ["public", "group:team-1"],
}
# (label, HnswIndexConfig or None for the engine's default); any other label of the form
# ``m<M>-ef<E>[-int8][-disk]`` is read by ``_spec``: int8 = scalar quantization (quantized
# vectors in RAM), disk = original vectors on disk (mmap, Memory.Cold).
CONFIGS = {
    "default": None,
    "m32-ef256": (32, 256),
}
# Scalar int8 searches: rescoring with the original vectors over ``oversampling`` x limit
# candidates (what a deployment would run), and the quantized scores alone (its raw cost).
OVERSAMPLING = 2.0
# ACORN applies to filters that let through at most this share of the points; 0.5 covers the
# scale bench's callers (1/6 and 2/6).
ACORN_MAX_SELECTIVITY = 0.5


def _spec(label: str) -> tuple[tuple[int, int] | None, bool, bool]:
    """(m, ef_construct) or None, int8 quantization, vectors on disk."""
    if label in CONFIGS:
        return CONFIGS[label], False, False
    m = re.fullmatch(r"m(\d+)-ef(\d+)((?:-int8|-disk)*)", label)
    if not m:
        raise SystemExit(f"unknown config {label!r}: use {sorted(CONFIGS)} or m16-ef100[-int8]"
                         "[-disk]")
    return (int(m.group(1)), int(m.group(2))), "-int8" in m.group(3), "-disk" in m.group(3)


# -- data ------------------------------------------------------------------------------------


def _cached_vectors(path: Path) -> np.ndarray:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT vector FROM embeddings ORDER BY key").fetchall()
    finally:
        con.close()
    vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for (blob,) in rows])
    if vectors.shape[1] != DIM:
        raise SystemExit(f"{path} holds {vectors.shape[1]}-dimension vectors, not {DIM}")
    return vectors


def _nearest_other(vectors: np.ndarray, sample: int, rng: np.random.Generator) -> dict:
    """Cosine of a real chunk to its nearest other chunk (a sample of them)."""
    idx = rng.choice(len(vectors), min(sample, len(vectors)), replace=False)
    sims = vectors[idx] @ vectors.T
    sims[np.arange(len(idx)), idx] = -1.0
    nearest = sims.max(axis=1)
    return {"sample": len(idx), "p25": round(float(np.percentile(nearest, 25)), 3),
            "median": round(float(np.median(nearest)), 3),
            "p75": round(float(np.percentile(nearest, 75)), 3)}


def _collection(originals: np.ndarray, copies: int, noise: float, seed: int):
    """All points (copy-major), each point's copy number, and the copies' cosine to their
    original."""
    rng = np.random.default_rng(seed)
    parts = [originals]
    cosines = []
    for _ in range(1, copies):
        noisy = originals + rng.normal(0.0, noise, originals.shape).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        cosines.append((noisy * originals).sum(axis=1))
        parts.append(noisy)
    points = np.ascontiguousarray(np.concatenate(parts).astype(np.float32))
    copy_of = np.repeat(np.arange(copies), len(originals))
    cos = np.concatenate(cosines) if cosines else np.ones(1)
    pair = None
    if copies >= 3:  # two copies of the same chunk
        n = len(originals)
        pair = round(float((points[n:2 * n] * points[2 * n:3 * n]).sum(axis=1).mean()), 4)
    return points, copy_of, {
        "mean": round(float(cos.mean()), 4), "min": round(float(cos.min()), 4),
        "p5": round(float(np.percentile(cos, 5)), 4), "copy_to_copy_mean": pair}


def _readers(copy: int, groups: int = 6) -> list[str]:
    """Copy 0 (and every ``groups``-th copy) ``public``, copy k ``group:team-(k mod groups)``:
    with ``groups`` = 6 each reader sees the shares of bench_scale's six copies at any size."""
    k = copy % groups
    return ["public"] if k == 0 else [f"group:team-{k}"]


def _questions(n: int) -> list[str]:
    """The golden questions, then corpus headings made into questions, up to ``n``."""
    out: list[str] = []
    for path in GOLDEN:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line)["question"])
    headings: set[str] = set()
    if CORPORA.is_dir():
        for md in sorted(CORPORA.rglob("*.md")):
            for line in md.read_text(errors="replace").splitlines():
                m = re.match(r"#{1,4}\s+(.+)", line)
                if m and 12 < len(m.group(1).strip()) < 90:
                    headings.add(m.group(1).strip().strip("`*"))
    rng = random.Random(7)
    forms = ["how do I {}", "what to do about {}", "{}", "where is {} documented"]
    pool = sorted(headings)
    rng.shuffle(pool)
    seen = set(out)
    for h in pool:
        if len(out) >= n:
            break
        q = rng.choice(forms).format(h.lower())
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out[:n]


# -- engine ----------------------------------------------------------------------------------


def _filter(readers: list[str] | None) -> qe.Filter | None:
    if readers is None:
        return None
    return qe.Filter(must=[qe.FieldCondition(key="readers", match=qe.MatchAny(list(readers)))])


def _edge_config(label: str) -> qe.EdgeConfig:
    hnsw, int8, disk = _spec(label)
    params = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine,
                                 memory=qe.Memory.Cold if disk else None)
    return qe.EdgeConfig(
        vectors={DENSE: params},
        hnsw_config=None if hnsw is None else qe.HnswIndexConfig(
            m=hnsw[0], ef_construct=hnsw[1], full_scan_threshold=10_000),
        quantization_config=qe.ScalarQuantizationConfig(
            type=qe.ScalarType.Int8, quantile=0.99, always_ram=True) if int8 else None,
    )


def _build(folder: Path, points: np.ndarray, copy_of: np.ndarray, label: str,
           groups: int) -> tuple[qe.EdgeShard, float]:
    shard = qe.EdgeShard.create(str(folder), _edge_config(label))
    shard.update(qe.UpdateOperation.create_field_index("readers", qe.PayloadSchemaType.Keyword))
    started = time.perf_counter()
    for start in range(0, len(points), 512):
        batch = [
            qe.Point(id=i, vector={DENSE: points[i].tolist()},
                     payload={"readers": _readers(int(copy_of[i]), groups)})
            for i in range(start, min(start + 512, len(points)))
        ]
        shard.update(qe.UpdateOperation.upsert_points(batch))
    shard.flush()
    return shard, time.perf_counter() - started


def _segments(folder: Path) -> list[dict]:
    out = []
    for seg in sorted((folder / "segments").glob("*/segment.json")):
        index = json.loads(seg.read_text())["config"]["vector_data"][DENSE]["index"]
        out.append({"type": index.get("type"), **(index.get("options") or {})})
    return out


def _du_mib(folder: Path) -> float:
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return round(total / 2**20, 1)


def _files_mib(folder: Path) -> dict[str, float]:
    """Disk use by kind of segment file: vectors, quantized vectors, graph, payload, other."""
    kinds = {"vector_storage": "vectors", "quantized": "quantized", "hnsw": "graph",
             "graph": "graph", "links": "graph", "payload": "payload", "wal": "wal"}
    out: dict[str, float] = {}
    for f in folder.rglob("*"):
        if f.is_file():
            rel = str(f.relative_to(folder)).lower()
            kind = next((v for k, v in kinds.items() if k in rel), "other")
            out[kind] = out.get(kind, 0.0) + f.stat().st_size / 2**20
    return {k: round(v, 1) for k, v in sorted(out.items())}


def _rss_mib() -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024)
    return None


def _query(shard: qe.EdgeShard, vector: list[float], limit: int, flt, params):
    request = qe.QueryRequest(limit=limit, query=qe.Query.Nearest(vector, using=DENSE),
                              filter=flt, params=params, with_payload=False)
    t = time.perf_counter()
    hits = shard.query(request)
    ms = (time.perf_counter() - t) * 1000
    return ms, [(int(p.id), p.score) for p in hits]


def _recall(hits: list[tuple[int, float]], truth: list[tuple[int, float]], k: int) -> float:
    """Share of the k results scoring at least the k-th exact score (ties count as found)."""
    if not truth:
        return 1.0
    kth = truth[min(k, len(truth)) - 1][1]
    found = sum(1 for _, score in hits[:k] if score >= kth - 1e-5)
    return min(found, len(truth[:k])) / len(truth[:k])


def _pct(values: list[float]) -> dict:
    if not values:
        return {}
    return {"n": len(values), "p50": round(percentile(values, 50), 2),
            "p95": round(percentile(values, 95), 2), "mean": round(statistics.fmean(values), 2)}


def _variants(efs: list[int], int8: bool = False,
              acorn_too: bool = True) -> list[tuple[str, qe.SearchParams]]:
    if not int8:
        return [("exact", qe.SearchParams(exact=True))] + [
            (f"hnsw ef={ef}", qe.SearchParams(hnsw_ef=ef)) for ef in efs]
    # With int8 in the shard the engine searches the quantized vectors unless told to ignore
    # them: float (ignore) is the same graph on the original vectors, for comparison.
    ignore = qe.QuantizationSearchParams(ignore=True)
    rescore = qe.QuantizationSearchParams(rescore=True, oversampling=OVERSAMPLING)
    raw = qe.QuantizationSearchParams(rescore=False)
    # ACORN (the engine's filtered search that also walks two-hop neighbours): without it a
    # filter whose points link mostly to points it excludes starves the graph (seen at 38k
    # points: a filtered HNSW query returned 1 point of 50).
    acorn = qe.AcornSearchParams(enable=True, max_selectivity=ACORN_MAX_SELECTIVITY)
    return ([("exact", qe.SearchParams(exact=True, quantization=ignore))]
            + [(f"hnsw ef={ef}", qe.SearchParams(hnsw_ef=ef, quantization=ignore))
               for ef in efs]
            + [(f"hnsw ef={ef} acorn", qe.SearchParams(hnsw_ef=ef, quantization=ignore,
                                                       acorn=acorn))
               for ef in (efs if acorn_too else [])]
            + [(f"int8 ef={ef} rescore x{OVERSAMPLING:g}",
                qe.SearchParams(hnsw_ef=ef, quantization=rescore)) for ef in efs]
            + [(f"int8 ef={ef} rescore x{OVERSAMPLING:g} acorn",
                qe.SearchParams(hnsw_ef=ef, quantization=rescore, acorn=acorn))
               for ef in (efs if acorn_too else [])]
            + [(f"int8 ef={ef} no rescore", qe.SearchParams(hnsw_ef=ef, quantization=raw))
               for ef in efs[-2:]])


def _measure(shard, queries, truth, variants) -> dict:
    """Every (variant, mode, limit) for every query, interleaved query by query."""
    lat: dict = {}
    rec: dict = {}
    for qi, vector in enumerate(queries):
        for mode, readers in FILTERS.items():
            flt = _filter(readers)
            for limit in LIMITS:
                for name, params in variants:
                    ms, hits = _query(shard, vector, limit, flt, params)
                    key = (name, mode, limit)
                    lat.setdefault(key, []).append(ms)
                    rec.setdefault(key, []).append(_recall(hits, truth[(mode, limit)][qi], limit))
    out: dict = {}
    for (name, mode, limit), values in lat.items():
        out.setdefault(name, {}).setdefault(mode, {})[f"limit_{limit}"] = {
            "latency_ms": _pct(values),
            f"recall_at_{limit}": round(statistics.fmean(rec[(name, mode, limit)]), 4),
            f"min_recall_at_{limit}": round(min(rec[(name, mode, limit)]), 3),
        }
    return out


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=6,
                        help="points = real chunk vectors x copies (54: ~1M)")
    parser.add_argument("--groups", type=int, default=6,
                        help="readers spread: copy k is public when k mod groups = 0, else "
                        "group:team-(k mod groups); 6 keeps bench_scale's shares at any size")
    parser.add_argument("--noise", type=float, default=0.025)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--efs", default="32,64,128,256,512")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--embedding-cache", type=Path,
                        default=ROOT / "data" / "corpora" / "embeddings.db")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--min-recall", type=float, default=MIN_RECALL_AT_50,
                        help="mean recall@50 a setting must reach in every filter mode")
    parser.add_argument("--name", default="ann", help="results file name (ann-1m for 1M)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep each config's built shard in this folder and reuse it on "
                        "the next run (a 1M graph takes many minutes to build)")
    parser.add_argument("--no-acorn", action="store_true",
                        help="leave out the ACORN variants (filtered search with two-hop "
                        "neighbours)")
    parser.add_argument("--skip-before", action="store_true",
                        help="skip the searches before optimize (at 1M they cost minutes and "
                        "exact search after optimize is the same plain scan)")
    args = parser.parse_args()
    if not args.embedding_cache.exists():
        print(f"skipping: {args.embedding_cache} is absent (`make eval` writes it)",
              file=sys.stderr)
        return
    efs = [int(x) for x in args.efs.split(",")]
    run_started = time.perf_counter()
    load_start = os.getloadavg()
    when = datetime.now(UTC).isoformat(timespec="seconds")
    rng = np.random.default_rng(11)

    originals = _cached_vectors(args.embedding_cache)
    nearest = _nearest_other(originals, 2000, rng)
    points, copy_of, copy_cos = _collection(originals, args.copies, args.noise, seed=12)
    shares = {mode: (1.0 if readers is None else round(float(np.isin(copy_of, [
        i for i in range(args.copies) if set(_readers(i, args.groups)) & set(readers)]).mean()),
        4)) for mode, readers in FILTERS.items()}
    print(f"{len(points)} points ({len(originals)} real x {args.copies}); copy cosine "
          f"{copy_cos}; real nearest-other cosine {nearest}", file=sys.stderr)

    questions = _questions(args.queries + WARMUP)
    encoder = DenseEncoder()
    encoder.warm_up()
    vectors, embed_ms = [], []
    for q in questions:
        t = time.perf_counter()
        vectors.append(encoder.embed_query(q))
        embed_ms.append((time.perf_counter() - t) * 1000)
    warm, queries = vectors[:WARMUP], vectors[WARMUP:]
    qmat = np.asarray(queries, dtype=np.float32)
    print(f"{len(queries)} queries embedded, {_pct(embed_ms[WARMUP:])} ms each", file=sys.stderr)

    # numpy brute force, to check the engine's exact search against
    scores = qmat @ points.T
    numpy_top: dict = {}
    top = max(LIMITS)
    for mode, readers in FILTERS.items():
        allowed = np.ones(len(points), bool) if readers is None else np.isin(
            copy_of, [i for i in range(args.copies)
                      if set(_readers(i, args.groups)) & set(readers)])
        masked = np.where(allowed[None, :], scores, -np.inf)
        part = np.argpartition(-masked, top, axis=1)[:, :top]
        order = np.argsort(-np.take_along_axis(masked, part, axis=1), axis=1)
        numpy_top[mode] = np.take_along_axis(part, order, axis=1)
        del masked
    del scores

    results: dict = {
        "when": when, "points": len(points), "real_vectors": len(originals),
        "copies": args.copies, "groups": args.groups, "filter_shares": shares,
        "noise_sigma": args.noise, "copy_cosine_to_original": copy_cos,
        "real_nearest_other_cosine": nearest, "queries": len(queries),
        "query_embedding_ms": _pct(embed_ms[WARMUP:]), "efs": efs, "configs": {},
        "min_recall_at_50": args.min_recall,
    }
    keep = args.work is not None
    work = args.work or Path(tempfile.mkdtemp(prefix="citewise-ann-"))
    work.mkdir(parents=True, exist_ok=True)
    truth: dict | None = None
    try:
        for label in args.configs.split(","):
            _, int8, _ = _spec(label)
            folder = work / f"{label}-{len(points)}"
            built = (folder / "built.json")
            cfg: dict = {}
            if built.exists():  # a kept shard from an earlier run: its build figures
                cfg = json.loads(built.read_text())
                print(f"[{label}] reusing {folder} (built {cfg.get('when')})", file=sys.stderr)
                shard = qe.EdgeShard.load(str(folder))
            else:
                shutil.rmtree(folder, ignore_errors=True)
                print(f"[{label}] upserting {len(points)} points", file=sys.stderr)
                shard, upsert_s = _build(folder, points, copy_of, label, args.groups)
                cfg = {"upsert_s": round(upsert_s, 1), "rss_mib_after_upsert": _rss_mib()}
                info = shard.info()
                cfg["before_optimize"] = {"segments": info.segments_count,
                                          "indexed_vectors": info.indexed_vectors_count,
                                          "index": _segments(folder)}
            for v in warm:
                _query(shard, v, 50, None, qe.SearchParams(exact=True))
            if truth is None:
                print("exact ground truth", file=sys.stderr)
                truth = {}
                for mode, readers in FILTERS.items():
                    for limit in LIMITS:
                        truth[(mode, limit)] = [
                            _query(shard, v, limit, _filter(readers),
                                   qe.SearchParams(exact=True))[1] for v in queries]
                agree = [
                    _recall([(int(i), float(qmat[qi] @ points[i]))
                             for i in numpy_top[mode][qi][:limit]],
                            truth[(mode, limit)][qi], limit)
                    for (mode, limit) in truth for qi in range(len(queries))]
                results["exact_vs_numpy_recall"] = round(statistics.fmean(agree), 4)
                print(f"engine exact vs numpy: {results['exact_vs_numpy_recall']}",
                      file=sys.stderr)
                if not args.skip_before and "after_optimize" not in cfg:
                    # exact search on the segments a fresh ingest leaves (no optimize yet)
                    # and hnsw_ef on them, to show that it changes nothing there
                    before = _measure(shard, queries, truth, _variants([128]))
                    results["exact_before_optimize"] = before["exact"]
                    results["hnsw_ef_before_optimize"] = before["hnsw ef=128"]
            if "after_optimize" not in cfg:
                print(f"[{label}] optimize (builds the HNSW graph)", file=sys.stderr)
                cfg["rss_mib_before_optimize"] = _rss_mib()
                cfg["load_before_optimize"] = [round(x, 2) for x in os.getloadavg()]
                t = time.perf_counter()
                optimized = shard.optimize()
                cfg["optimize_s"] = round(time.perf_counter() - t, 1)
                cfg["load_after_optimize"] = [round(x, 2) for x in os.getloadavg()]
                shard.flush()
                info = shard.info()
                cfg["after_optimize"] = {"optimized": optimized,
                                         "segments": info.segments_count,
                                         "points": info.points_count,
                                         "indexed_vectors": info.indexed_vectors_count,
                                         "index": _segments(folder)}
                cfg["disk_mib"] = _du_mib(folder)
                cfg["files_mib"] = _files_mib(folder)
                cfg["rss_mib_after_optimize"] = _rss_mib()
                cfg["when"] = datetime.now(UTC).isoformat(timespec="seconds")
                if keep:
                    built.write_text(json.dumps(cfg, indent=2))
            print(f"[{label}] optimize {cfg['optimize_s']} s: {cfg['after_optimize']}",
                  file=sys.stderr)
            cfg["rss_mib_after_load"] = _rss_mib()
            for v in warm:
                for _, params in _variants(efs, int8, not args.no_acorn):
                    _query(shard, v, 50, None, params)
            t = time.perf_counter()
            cfg["search"] = _measure(shard, queries, truth,
                                     _variants(efs, int8, not args.no_acorn))
            cfg["search_s"] = round(time.perf_counter() - t, 1)
            cfg["rss_mib_after_search"] = _rss_mib()
            cfg["load_after"] = [round(x, 2) for x in os.getloadavg()]
            shard.close()
            results["configs"][label] = cfg
            _print_config(label, cfg)
            if not keep:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)

    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(),
                          "qdrant_edge": _version("qdrant-edge-py"),
                          "load_at_start": [round(x, 2) for x in load_start],
                          "load_at_end": [round(x, 2) for x in os.getloadavg()]}
    scale = ROOT / "bench" / "results" / "scale.json"
    if scale.exists():
        results["scale_search_p50_ms"] = json.loads(scale.read_text())[
            "search_one_client_ms"]["p50"]
    results["run_s"] = round(time.perf_counter() - run_started, 1)
    results["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    results["command"] = "nice -n 10 .venv/bin/python bench/bench_ann.py " + " ".join(
        sys.argv[1:])
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    (args.out / f"{args.name}.md").write_text(_markdown(results))
    print(_markdown(results))


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _print_config(label: str, cfg: dict) -> None:
    for name, modes in cfg["search"].items():
        for mode, limits in modes.items():
            l10, l50 = limits["limit_10"], limits["limit_50"]
            print(f"[{label}] {name:13} {mode:12} r@10 {l10['recall_at_10']:.4f} "
                  f"r@50 {l50['recall_at_50']:.4f}  p50/p95 ms @10 "
                  f"{l10['latency_ms']['p50']}/{l10['latency_ms']['p95']} @50 "
                  f"{l50['latency_ms']['p50']}/{l50['latency_ms']['p95']}", file=sys.stderr)


# -- report ----------------------------------------------------------------------------------


def _row(name: str, mode: str, limits: dict) -> str:
    l10, l50 = limits["limit_10"], limits["limit_50"]
    return (f"| {name} | {mode} | {l10['recall_at_10']:.4f} | {l50['recall_at_50']:.4f} "
            f"({l50['min_recall_at_50']:.2f}) | {l10['latency_ms']['p50']} / "
            f"{l10['latency_ms']['p95']} | {l50['latency_ms']['p50']} / "
            f"{l50['latency_ms']['p95']} |")


def _markdown(r: dict) -> str:
    m = r["machine"]
    cc = r["copy_cosine_to_original"]
    lines = [
        f"# Exact vs HNSW dense search on the embedded engine, {r['when']}", "",
        f"{r['points']} points: {r['real_vectors']} real chunk vectors of the shared corpora "
        f"(embedding cache) and {r['copies'] - 1} perturbed copies of each (Gaussian noise "
        f"sigma {r['noise_sigma']} per dimension, renormalised: mean cosine to the original "
        f"{cc['mean']}, 5th percentile {cc['p5']}, two copies of one chunk "
        f"{cc['copy_to_copy_mean']}; a real chunk's nearest other chunk: median "
        f"{r['real_nearest_other_cosine']['median']}"
        f"). Cosine, 384 dimensions, keyword index on `readers` (copy 0 `public`, copy k "
        f"`group:team-k`). {r['queries']} real questions embedded with the packaged model "
        f"(p50 {r['query_embedding_ms']['p50']} / p95 {r['query_embedding_ms']['p95']} ms per "
        f"question). qdrant-edge {m['qdrant_edge']}. Commit `{r['commit']}`.", "",
        f"Environment: {r['when']}, {m['cpus']} CPUs, {m['platform']}, Python {m['python']}; "
        f"load average {m['load_at_start']} at start, {m['load_at_end']} at the end "
        f"(shared machine). Run time {r['run_s']} s.", "",
        f"Ground truth: the engine's exact search (it agrees with a numpy brute force: recall "
        f"{r['exact_vs_numpy_recall']}). Recall@k counts a result found when its score reaches "
        "the k-th exact score. Latency: one `shard.query` at a time from Python, payload not "
        "fetched, p50 / p95 in ms. Limit 50 is what citewise's hybrid search asks of the dense "
        "method (`search_prefetch`); the engine searches with ef = max(hnsw_ef, limit). In "
        "brackets: the worst single query's recall@50.", "",
        "## Before optimize: the segment a fresh ingest leaves", "",
        "| Variant | Filter | recall@10 | recall@50 (min) | p50 / p95 @10 | p50 / p95 @50 |",
        "|---|---|---|---|---|---|",
    ]
    if "exact_before_optimize" not in r:
        lines.append("| (not measured: `--skip-before`) | | | | | |")
    for mode, limits in r.get("exact_before_optimize", {}).items():
        lines.append(_row("exact", mode, limits))
    for mode, limits in r.get("hnsw_ef_before_optimize", {}).items():
        lines.append(_row("hnsw ef=128", mode, limits))
    for label, cfg in r["configs"].items():
        after = cfg["after_optimize"]
        graphs = [{k: v for k, v in seg.items() if k in ("m", "ef_construct",
                                                          "full_scan_threshold")}
                  for seg in after["index"] if seg["type"] == "hnsw"]
        plain = sum(1 for seg in after["index"] if seg["type"] != "hnsw")
        lines += [
            "", f"## HNSW config `{label}`", "",
            f"Upsert {cfg['upsert_s']} s: {cfg['before_optimize']['segments']} segment(s), "
            f"{cfg['before_optimize']['indexed_vectors']} vectors indexed (a plain index: see "
            f"the first table). `optimize()` (graph build) "
            f"{cfg['optimize_s']} s; then {after['segments']} segments, "
            f"{after['indexed_vectors']} of {after['points']} vectors indexed; segment "
            f"folders: {len(graphs)} HNSW {graphs}, {plain} plain (appendable). Shard on "
            f"disk {cfg['disk_mib']} MiB ({cfg.get('files_mib', {})}). Load average "
            f"{cfg.get('load_before_optimize')} before the build, "
            f"{cfg.get('load_after_optimize')} after. Process RSS (model and the benchmark's numpy "
            f"copies included) {cfg['rss_mib_before_optimize']} MiB before optimize, "
            f"{cfg['rss_mib_after_optimize']} after, {cfg['rss_mib_after_search']} after "
            f"the searches. Load average after: {cfg['load_after']}.", "",
            "| Variant | Filter | recall@10 | recall@50 (min) | p50 / p95 @10 | p50 / p95 @50 |",
            "|---|---|---|---|---|---|",
        ]
        for name, modes in cfg["search"].items():
            for mode, limits in modes.items():
                lines.append(_row(name, mode, limits))
    lines += ["", "## Decision", ""] + _decision(r) + [""]
    return "\n".join(lines)


# HNSW replaces exact search only if it finds the hybrid search's candidates (mean recall@50 at
# least this in every filter mode) and saves at least this share of a whole search, for the
# caller of bench_scale (whose whole-search latency is the yardstick: public + one group).
MIN_RECALL_AT_50 = 0.99
MIN_SAVING_SHARE = 0.25


def _decision(r: dict) -> list[str]:
    modes = list(FILTERS)
    caller = modes[-1]  # public+team-1: the filter of bench_scale's caller
    first = next(iter(r["configs"].values()))
    exact = first["search"]["exact"]

    def p50(entry: dict, mode: str) -> float:
        return entry[mode]["limit_50"]["latency_ms"]["p50"]

    def r50(entry: dict, mode: str) -> float:
        return entry[mode]["limit_50"]["recall_at_50"]

    def worst(entry: dict) -> float:
        return min(entry[m]["limit_50"]["min_recall_at_50"] for m in modes)

    def describe(label: str, name: str, entry: dict, cfg: dict) -> str:
        return (f"HNSW `{label}` {name}: recall@50 "
                + " / ".join(f"{r50(entry, m):.4f}" for m in modes)
                + f" (worst single query {worst(entry):.2f}), p50 "
                + " / ".join(f"{p50(entry, m)}" for m in modes)
                + f" ms; graph build {cfg['optimize_s']} s")

    before = r.get("exact_before_optimize") or exact
    out = [
        "Per filter mode (" + ", ".join(modes) + "), limit 50:", "",
        "- Exact: recall 1, p50 " + " / ".join(f"{p50(exact, m)}" for m in modes)
        + " ms after optimize, " + " / ".join(f"{p50(before, m)}" for m in modes)
        + " ms before: its time follows the number of points the filter lets through.",
    ]
    floor = r.get("min_recall_at_50", MIN_RECALL_AT_50)
    qualifying = []
    for label, cfg in r["configs"].items():
        for name, entry in cfg["search"].items():
            if name == "exact":
                continue
            if name == "hnsw ef=128":
                out.append(f"- {describe(label, name, entry, cfg)}.")
            if min(r50(entry, m) for m in modes) >= floor:
                qualifying.append((p50(entry, caller), label, name, entry, cfg))
    if not qualifying:
        out += ["", f"No HNSW setting reached a mean recall@50 of {floor} in every "
                "filter mode: keep exact search."]
        return out
    _, label, name, entry, cfg = min(qualifying, key=lambda q: q[0])
    out.append(f"- Fastest setting with mean recall@50 >= {floor} in every mode: "
               f"{describe(label, name, entry, cfg)}.")
    scale = r.get("scale_search_p50_ms")
    embed = r["query_embedding_ms"]["p50"]
    saving = p50(exact, caller) - p50(entry, caller)
    saving_all = p50(exact, "none") - p50(entry, "none")
    out.append("")
    if not scale:
        out.append(f"Saving per dense query: {saving:.1f} ms ({caller}), {saving_all:.1f} ms "
                   f"(no filter); query embedding p50 {embed} ms. No `scale.json` to compare a "
                   "whole search with.")
        return out
    whole_all = scale - p50(exact, caller) + p50(exact, "none")
    out.append(
        f"A whole search at 113k chunks (`scale.md`, another run: over HTTP, query embedding "
        f"and BM25 included, exact, caller {caller}) took p50 {scale} ms. In it the exact dense "
        f"query is ~{p50(exact, caller)} ms ({p50(exact, caller) / scale:.0%}); the setting "
        f"above would save {saving:.1f} ms ({saving / scale:.0%} of the search). A caller who "
        f"may read every point pays about the unfiltered {p50(exact, 'none')} ms instead (a search "
        f"of ~{whole_all:.0f} ms): the saving would be {saving_all:.1f} ms "
        f"({saving_all / whole_all:.0%}). Query embedding in this run: p50 {embed} ms.")
    out.append("")
    if saving >= MIN_SAVING_SHARE * scale:
        out.append(f"The saving passes {MIN_SAVING_SHARE:.0%} of a whole search: HNSW is worth "
                   "adopting, after confirming recall on a real corpus of this size.")
    else:
        out.append(
            f"For bench_scale's caller the saving is under {MIN_SAVING_SHARE:.0%} of a whole "
            "search, for a recall below 1 (the worst single queries lose a share of their "
            "candidates) and an HNSW graph to build: keep exact search as the default. A "
            "deployment whose callers read (almost) everything gains more, as above.")
    return out


if __name__ == "__main__":
    main()
