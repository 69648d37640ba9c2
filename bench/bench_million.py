"""citewise at a million chunks on one node: ingest from the embedding cache, the HNSW graph
build, one-client search latency over HTTP, dense recall@50 of the served configuration against
exact search, and the server's memory and disk, against a real `citewise serve`.

The knowledge base is the five shared corpora (``../shared/corpora``, ~19k chunks) ingested
``--copies`` times as separate sources through the real pipeline (``bench/bench_scale.py``'s
helpers: its ingest, questions, RSS and percentile code), the vectors coming from the embedding
cache (give ``--embedding-cache`` one that holds them: nothing is then embedded). 54 copies make
~1.02M chunks; ``--chunks N`` picks the copies for about N chunks. Readers are spread as in
``bench/bench_ann.py --groups 6``: copy k is ``public`` when k mod 6 = 0, else
``group:team-(k mod 6)``, so the caller (public + team-1) reads a third of the points at any
size, as bench_scale's caller does at 113k.

Steps, each timed:

1. **Ingest** with the graph deferred (``CITEWISE_EDGE_HNSW_FROM`` above the corpus): a first
   bulk load builds the graph once at the end, not at every run that crosses a tenth more points.
2. **Graph build**: the index opened with the served settings and flushed, the code path that
   ends every ingest run (``EdgeVectorIndex.flush`` compacts when the graph is due).
3. **Serve** (``citewise serve`` in its own process, the served ``CITEWISE_EDGE_*`` settings):
   RSS after start, 200 unique questions from one client (``GET /v1/search``, query embedding
   included), RSS after the searches.
4. **Recall**: with the server stopped, each question embedded in-process and asked of the
   index with the served policy and exactly (the engine's ``exact=True``), dense only, limit 50
   (``search_prefetch``), the caller's readers filter; recall@50 counts a result found when its
   score reaches the 50th exact score (as bench_ann.py).
5. **Disk**: the shard folder and the catalog; the memory formula of docs/operations.md
   ("Sizing") beside the measured RSS.

    nice -n 10 .venv/bin/python bench/bench_million.py [--copies 54 | --chunks 1000000]
        [--hnsw-from 0] [--quantization int8] [--work /path/kept]
    # -> bench/results/million.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import (  # noqa: E402
    CORPORA,
    NAMES,
    _ingest,
    _pct,
    _questions,
    _rss,
    prepare,
    start_server,
    wait_loaded,
)

from citewise.api.settings import Settings  # noqa: E402

CHUNKS_PER_COPY = 18_980  # the five corpora's chunks (bench/results/ann-1m.json: real_vectors)
GROUPS = 6
CALLER = ["public", "group:team-1"]
LIMIT = 50
QUESTIONS = 200
WARMUP = 5
# No graph while the bulk load runs (step 1).
DEFERRED = str(10**12)


def _readers(copy: int) -> str:
    k = copy % GROUPS
    return '["public"]' if k == 0 else f'["group:team-{k}"]'


def _config(folder: Path, copies: int) -> Path:
    lines = ['[settings]\ndata_dir = "data"\n']
    for k in range(copies):
        for name in NAMES:
            lines.append(f'[[sources]]\nname = "{name}-v{k}"\ntype = "folder"\n'
                         f'path = "{CORPORA / name}"\nreaders = {_readers(k)}\n'
                         'include = ["*.md"]\n')
    path = folder / "citewise.toml"
    path.write_text("\n".join(lines))
    return path


def _du_mib(folder: Path) -> float:
    if not folder.exists():
        return 0.0
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20, 1)


def _served_env(args: argparse.Namespace) -> dict[str, str]:
    env = {}
    if args.hnsw_from is not None:
        env["CITEWISE_EDGE_HNSW_FROM"] = str(args.hnsw_from)
    if args.quantization:
        env["CITEWISE_EDGE_QUANTIZATION"] = args.quantization
    return env


def _with_env(env: dict[str, str]):
    """Set ``env`` in this process (the settings read it), returning a function that undoes it."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)

    def undo() -> None:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return undo


def _build_graph(config: Path) -> dict:
    """Open the index with the served settings and flush it, as an ingest run ends."""
    from citewise.api.composition import build_index_store
    from citewise.index.qdrant_edge_index import _segment_graphs

    settings = Settings.load(config)
    store = build_index_store(settings, 384)
    t = time.perf_counter()
    index = store.open("")
    opened = time.perf_counter() - t
    try:
        t = time.perf_counter()
        index.flush()
        built = time.perf_counter() - t
        graph = index.searches_graph
    finally:
        index.close()
    return {"graph": graph, "seconds": round(built, 1), "open_s": round(opened, 1),
            "segments": sorted(_segment_graphs(settings.data.qdrant_path))}


def _recall(config: Path, questions: list[str]) -> dict:
    """Dense recall@50 of the served policy against exact, the caller's filter."""
    import qdrant_edge as qe

    from citewise.api.composition import build_index_store
    from citewise.index.dense import DenseEncoder
    from citewise.index.qdrant_edge_index import _edge_filter
    from citewise.index.vector_index import DENSE, IndexFilter

    settings = Settings.load(config)
    encoder = DenseEncoder()
    encoder.warm_up()
    vectors = [encoder.embed_query(q) for q in questions]
    flt = IndexFilter(readers=CALLER)
    index = build_index_store(settings, encoder.dim).open("")
    served, served_ms = [], []
    try:
        for v in vectors:
            t = time.perf_counter()
            served.append(index.rank(v, filter=flt, limit=LIMIT))
            served_ms.append((time.perf_counter() - t) * 1000)
        fallbacks = index.exact_fallbacks
        graph = index.searches_graph
    finally:
        index.close()
    shard = qe.EdgeShard.load(str(settings.data.qdrant_path))
    exact, exact_ms = [], []
    try:
        for v in vectors:
            t = time.perf_counter()
            exact.append(shard.query(qe.QueryRequest(
                limit=LIMIT, query=qe.Query.Nearest(list(v), using=DENSE),
                filter=_edge_filter(flt), params=qe.SearchParams(exact=True),
                with_payload=False)))
            exact_ms.append((time.perf_counter() - t) * 1000)
    finally:
        shard.close()
    recalls = []
    for got, truth in zip(served, exact, strict=True):
        if not truth:
            continue
        kth = truth[min(LIMIT, len(truth)) - 1].score
        found = sum(1 for h in got[:LIMIT] if h.score >= kth - 1e-5)
        recalls.append(min(found, len(truth)) / min(LIMIT, len(truth)))
    return {"recall_at_50": round(statistics.fmean(recalls), 4),
            "min_recall_at_50": round(min(recalls), 3), "questions": len(recalls),
            "graph": graph, "exact_fallbacks": fallbacks,
            "served_dense_ms": _pct(served_ms), "exact_dense_ms": _pct(exact_ms)}


def _serve(work: Path, config: Path, questions: list[str], env_extra: dict) -> dict:
    started = time.perf_counter()
    server, url = start_server(config, work, env=env_extra)
    out: dict = {}
    try:
        wait_loaded(url)
        out["ready_s"] = round(time.perf_counter() - started, 1)
        out["memory_after_start"] = _rss(server.pid)
        single = []
        with httpx.Client(base_url=url, timeout=120,
                          headers={"X-Citewise-Groups": "team-1"}) as http:
            for q in questions[:WARMUP]:
                http.get("/v1/search", params={"q": q})
            for q in questions[WARMUP:]:
                t = time.perf_counter()
                r = http.get("/v1/search", params={"q": q, "top_k": 10})
                r.raise_for_status()
                single.append((time.perf_counter() - t) * 1000)
        out["search_one_client_ms"] = _pct(single)
        out["memory_after_search"] = _rss(server.pid)
        print(f"one client: {out['search_one_client_ms']}", file=sys.stderr)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    return out


def memory_formula(chunks: int, m: int, quantized: bool) -> dict:
    """The sizing formula of docs/operations.md, in MiB for ``chunks`` chunks of 384 floats."""
    mib = 2**20
    vectors = chunks * 384 * 4 / mib
    quant = chunks * 384 / mib if quantized else 0.0
    # Level 0 holds 2m links per point, upper levels m per point on 1/m of the points: at most
    # ~2m+1 links of 4 bytes (the engine compresses them: 41 B per point measured at m = 16).
    graph = chunks * (2 * m + 1) * 4 / mib if m else 0.0
    # The engine maps the float vectors in at load even with int8 copies (ann-1m-rss.md).
    return {"vectors_mib": round(vectors), "quantized_mib": round(quant),
            "graph_mib": round(graph), "resident_mib": round(vectors + quant + graph)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=54,
                        help="copies of the five corpora (54: ~1.02M chunks)")
    parser.add_argument("--chunks", type=int, default=None,
                        help="about this many chunks instead (sets --copies)")
    parser.add_argument("--hnsw-from", type=int, default=None,
                        help="served CITEWISE_EDGE_HNSW_FROM (default: the setting's default)")
    parser.add_argument("--quantization", choices=["none", "int8"], default=None,
                        help="served CITEWISE_EDGE_QUANTIZATION (default: the setting's)")
    parser.add_argument("--embedding-cache", type=Path,
                        default=ROOT / "data" / "corpora" / "embeddings.db")
    parser.add_argument("--work", type=Path, help="keep the data folder here (default: temp)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", default="million", help="results file name")
    args = parser.parse_args()
    if not CORPORA.is_dir():
        print(f"skipping: {CORPORA} is absent (the shared corpora)", file=sys.stderr)
        return
    if not args.embedding_cache.exists():
        print(f"skipping: {args.embedding_cache} is absent (`make eval` writes it); without it "
              "every chunk would be embedded (hours at this size)", file=sys.stderr)
        return
    copies = max(1, round(args.chunks / CHUNKS_PER_COPY)) if args.chunks else args.copies
    run_started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    work, config = prepare(args.work, copies, args.embedding_cache, "citewise-million-")
    served = _served_env(args)
    results: dict = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
                     "copies": copies, "served_env": served}

    print(f"ingesting {copies} copies of the corpora into {work}", file=sys.stderr)
    undo = _with_env({**served, "CITEWISE_EDGE_HNSW_FROM": DEFERRED})
    try:
        ingest = _ingest(config)
    finally:
        undo()
    questions = _questions(ingest.pop("questions"), QUESTIONS + WARMUP)
    results["ingest"] = ingest
    results["load_after_ingest"] = [round(x, 2) for x in os.getloadavg()]
    print(f"ingest: {ingest}", file=sys.stderr)

    undo = _with_env(served)
    try:
        settings = Settings.load(config)
        results["policy"] = {k: getattr(settings.index, k) for k in (
            "edge_hnsw_from", "edge_hnsw_m", "edge_hnsw_ef_construct", "edge_hnsw_ef",
            "edge_quantization")}
        results["graph_build"] = _build_graph(config)
        results["load_after_build"] = [round(x, 2) for x in os.getloadavg()]
        print(f"graph build: {results['graph_build']}", file=sys.stderr)
    finally:
        undo()
    results["disk_mib"] = {"index": _du_mib(settings.data.qdrant_path),
                           "catalog": round(settings.data.catalog_path.stat().st_size / 2**20, 1),
                           "data_folder": _du_mib(work / "data")}
    results["serve"] = _serve(work, config, questions, served)
    results["load_after_search"] = [round(x, 2) for x in os.getloadavg()]
    undo = _with_env(served)
    try:
        results["recall"] = _recall(config, questions[WARMUP:])
    finally:
        undo()
    print(f"recall: {results['recall']}", file=sys.stderr)
    policy = results["policy"]
    graph = results["graph_build"]["graph"]
    results["formula"] = memory_formula(ingest["chunks"], policy["edge_hnsw_m"] if graph else 0,
                                        graph and policy["edge_quantization"] == "int8")
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "load_at_start": load_start,
                          "load_at_end": [round(x, 2) for x in os.getloadavg()]}
    results["run_s"] = round(time.perf_counter() - run_started, 1)
    results["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    results["command"] = "nice -n 10 .venv/bin/python bench/bench_million.py " + " ".join(
        sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    (args.out / f"{args.name}.md").write_text(_markdown(results))
    print(_markdown(results))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


def _caller_share(copies: int) -> float:
    return sum(1 for k in range(copies) if k % GROUPS in (0, 1)) / copies


def _markdown(r: dict) -> str:
    s1 = r["serve"]["search_one_client_ms"]
    rec = r["recall"]
    g = r["graph_build"]
    p = r["policy"]
    f = r["formula"]
    mem0, mem1 = r["serve"]["memory_after_start"], r["serve"]["memory_after_search"]
    m = r["machine"]
    mode = (f"HNSW m={p['edge_hnsw_m']} ef_construct={p['edge_hnsw_ef_construct']} "
            f"ef={p['edge_hnsw_ef']}, quantization {p['edge_quantization']}") if g["graph"] \
        else f"exact (under CITEWISE_EDGE_HNSW_FROM={p['edge_hnsw_from']} points)"
    return "\n".join([
        f"# citewise at a million chunks, {r['when']}", "",
        f"{r['ingest']['chunks']} chunks ({r['copies']} copies of the five shared corpora; "
        "copy k public when k mod 6 = 0, else group:team-(k mod 6); the caller reads public + "
        f"team-1, {_caller_share(r['copies']):.0%} of the points). Embedded index, dense "
        f"search: {mode}. Commit "
        f"`{r['commit']}`. Machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}; "
        f"load average {m['load_at_start']} at start, {r['load_after_ingest']} after the "
        f"ingest, {r['load_after_build']} after the graph build, {r['load_after_search']} "
        f"after the searches, {m['load_at_end']} at the end (a shared machine: other "
        f"benchmarks ran at the same time). Run time {r['run_s']} s.", "",
        f"Command: `{r['command']}`", "",
        "| Measure | Result |", "|---|---|",
        f"| Ingest (graph deferred) | {r['ingest']['seconds']} s, {r['ingest']['embedded']} "
        "chunks embedded (the rest from the embedding cache) |",
        f"| Graph build (the flush that ends a run) | {g['seconds']} s; segments (m, int8): "
        f"{g['segments']} |",
        f"| Server ready after start | {r['serve']['ready_s']} s |",
        f"| Search, 1 client, HTTP, query embedding included | p50 {s1['p50']} / p95 "
        f"{s1['p95']} / p99 {s1['p99']} ms ({s1['n']} questions) |",
        f"| Dense recall@50, served vs exact, caller's filter | {rec['recall_at_50']} (worst "
        f"question {rec['min_recall_at_50']}; {rec['exact_fallbacks']} exact fallbacks) |",
        f"| Dense query alone (in-process): served / exact | p50 "
        f"{rec['served_dense_ms']['p50']} / {rec['exact_dense_ms']['p50']} ms, p95 "
        f"{rec['served_dense_ms']['p95']} / {rec['exact_dense_ms']['p95']} ms |",
        f"| Server RSS | {mem0['rss_mib']} MiB after start, {mem1['rss_mib']} MiB after the "
        f"searches (peak {mem1['peak_rss_mib']} MiB) |",
        f"| Disk | index {r['disk_mib']['index']} MiB, catalog {r['disk_mib']['catalog']} MiB, "
        f"data folder {r['disk_mib']['data_folder']} MiB |",
        f"| Formula (docs/operations.md, Sizing) | vectors {f['vectors_mib']} MiB, int8 "
        f"{f['quantized_mib']} MiB, graph at most {f['graph_mib']} MiB: ~{f['resident_mib']} "
        "MiB resident for the index besides the model and the process |",
        "",
    ])


if __name__ == "__main__":
    main()
