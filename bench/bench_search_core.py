"""The search alone: `SearchService.search` in this process, no HTTP, on 1, 2, 4 and 16 threads,
over a data folder `bench/bench_scale.py --work DIR` ingested.

What the scale bench measures over HTTP is the search plus the request around it (uvicorn, the
middleware, the response model) plus the clients, all on the same two cores. This takes the
search alone, with the questions already embedded (the query-vector cache filled first, as the
scale bench's 16-client phase mostly meets it), so the two figures side by side say how much of
a request is the search. The engine holds Python's interpreter lock while it queries
(docs/operations.md, "Throughput"), so more threads do not add throughput here; the row for one
thread is the search's own cost.

    .venv/bin/python bench/bench_search_core.py --work /path/scale [--seconds 8]
    # -> bench/results/search-core.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import ingested_config, stored_questions  # noqa: E402

from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.types import Identity  # noqa: E402

THREADS = (1, 2, 4, 16)
CALLER = Identity(groups=("team-1",))  # public + one restricted copy, as the scale bench


def _run(search, questions: list[str], threads: int, seconds: float) -> dict:
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        i = offset
        mine = []
        while time.perf_counter() < stop:
            t = time.perf_counter()
            search.search(questions[i % len(questions)], CALLER, top_k=10)
            mine.append((time.perf_counter() - t) * 1000)
            i += 7
        with lock:
            latencies.extend(mine)

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(k * 50,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"threads": threads, "per_second": round(len(latencies) / wall, 1),
            "p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2), "n": len(ordered)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a folder `bench/bench_scale.py --work` ingested")
    parser.add_argument("--seconds", type=float, default=8.0, help="per thread count")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    config = ingested_config(args.work)
    if config is None:
        return
    settings = Settings.load(config)
    services = build_services(settings)
    try:
        questions = stored_questions(args.work)
        for q in questions:  # embedded once: the search is what is measured
            services.search.query_vector(q)
        for q in questions[:20]:
            services.search.search(q, CALLER, top_k=10)
        load = os.getloadavg()
        rows = []
        for n in THREADS:
            rows.append(_run(services.search, questions, n, args.seconds))
            print(f"{n} threads: {rows[-1]}", file=sys.stderr)
        chunks = services.catalog.count_chunks()
    finally:
        services.close()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit,
              "work": str(args.work), "chunks": chunks, "cpus": os.cpu_count(),
              "load_at_start": [round(x, 2) for x in load],
              "load_at_end": [round(x, 2) for x in os.getloadavg()],
              "edge_hnsw_from": settings.index.edge_hnsw_from, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "search-core.json").write_text(json.dumps(result, indent=2))
    (args.out / "search-core.md").write_text(_markdown(result, args))
    print(_markdown(result, args))


def _markdown(r: dict, args: argparse.Namespace) -> str:
    lines = [f"# The search alone, in one process, {r['when']}", "",
             f"`SearchService.search` over `{r['work']}` ({r['chunks']} chunks; the HNSW graph "
             f"from {r['edge_hnsw_from']} points), no HTTP, questions already embedded, the "
             "scale bench's caller (public + team-1), top 10. Commit "
             f"`{r['commit']}`, {r['cpus']} CPUs, load average {r['load_at_start']} at start, "
             f"{r['load_at_end']} at the end.", "",
             f"    .venv/bin/python bench/bench_search_core.py --work {args.work} "
             f"--seconds {args.seconds:g}", "",
             "| Threads | Searches/s | p50 ms | p95 ms | Searches |", "|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['threads']} | {row['per_second']} | {row['p50_ms']} | "
                     f"{row['p95_ms']} | {row['n']} |")
    lines += ["", "Compare with bench/results/scale.md, the same data over HTTP with 16 clients.",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
