"""What a blue/green reindex (`citewise reindex`) costs the searches running meanwhile.

A real corpus is ingested, then served by a real ``citewise serve`` (embedded engine, its own
process). Searches run in a loop over HTTP (two client threads, each pausing 20 ms between
searches) while ``citewise reindex`` rebuilds the index in another process with a new chunk
size and switches to it. Recorded: failed searches and searches whose results mix the two
generations (both must be 0), latency before the switch (during the build, which competes for
the CPUs), around it and after it, the switch transaction, and the first search on the new
generation (the server opens it).

    .venv/bin/python bench/bench_reindex.py      # -> bench/results/reindex.{json,md}
    .venv/bin/python bench/bench_reindex.py --corpus openshift-runbooks --chunk-size 128
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citewise.api.evaluation.runner import percentile  # noqa: E402
from tests.live import free_port  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpora"
CITEWISE = Path(sys.executable).with_name("citewise")
THREADS = 2
PAUSE = 0.02


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEWISE_")}
    env.update(HF_HUB_OFFLINE="1", DO_NOT_TRACK="1", CITEWISE_LOG_LEVEL="WARNING", **extra)
    return env


def _rows(catalog: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _pct(values: list[float], q: float) -> float:
    """Milliseconds at quantile ``q`` of ``values`` (seconds)."""
    return round(percentile(values, q * 100) * 1000, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="prometheus-operator-runbooks")
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    corpus = CORPORA / args.corpus
    if not corpus.is_dir():
        print(f"no corpus at {corpus}: nothing measured", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="citewise-reindex-") as tmp:
        root = Path(tmp)
        config = root / "citewise.toml"
        config.write_text(f'[settings]\ndata_dir = "data"\n\n[[sources]]\nname = "corpus"\n'
                          f'type = "folder"\npath = "{corpus}"\nreaders = ["public"]\n')
        base = [str(CITEWISE), "--config", str(config)]
        print(f"ingesting {args.corpus}...", file=sys.stderr)
        ingest = subprocess.run([*base, "ingest", "--source", "corpus"], cwd=root, env=_env(),
                                capture_output=True, text=True)
        if ingest.returncode not in (0, 3):  # 3: some files of the corpus are not indexable
            print(ingest.stdout, ingest.stderr, file=sys.stderr)
            return 1
        catalog = root / "data" / "catalog.db"
        old = {r[0] for r in _rows(catalog, "SELECT id FROM chunks")}
        queries = [r[0] for r in _rows(catalog, "SELECT title FROM documents ORDER BY id "
                                                "LIMIT 50")]
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([*base, "serve", "--port", str(port)], cwd=root,
                                  env=_env(CITEWISE_RATE_SEARCH_PER_MINUTE="0"),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            calls: list[tuple[float, float, int, list[str]]] = []
            stop = threading.Event()

            def loop(offset: int) -> None:
                http = httpx.Client(base_url=url, timeout=60)
                n = offset
                while not stop.is_set():
                    started = time.perf_counter()
                    try:
                        resp = http.get("/v1/search",
                                        params={"q": queries[n % len(queries)], "top_k": 5})
                        ids = [r["chunk_id"] for r in resp.json()["results"]] \
                            if resp.status_code == 200 else []
                        status = resp.status_code
                    except httpx.HTTPError:
                        status, ids = 0, []
                    calls.append((started, time.perf_counter() - started, status, ids))
                    n += THREADS
                    time.sleep(PAUSE)

            threads = [threading.Thread(target=loop, args=(i,)) for i in range(THREADS)]
            for t in threads:
                t.start()
            time.sleep(3)
            print(f"reindexing with chunk size {args.chunk_size} under load...",
                  file=sys.stderr)
            started = time.monotonic()
            done = subprocess.run([*base, "reindex", "--json"], cwd=root, capture_output=True,
                                  text=True, env=_env(CITEWISE_CHUNK_MAX_TOKENS=str(
                                      args.chunk_size)))
            reindex_s = time.monotonic() - started
            time.sleep(5)
            stop.set()
            for t in threads:
                t.join()
        finally:
            server.terminate()
            server.wait(timeout=60)
        if done.returncode != 0:
            print(done.stdout, done.stderr, file=sys.stderr)
            return 1
        report = json.loads(done.stdout)
        new = {r[0] for r in _rows(catalog, "SELECT id FROM chunks")}
    calls.sort()
    failed = sum(1 for c in calls if c[2] != 200 or not c[3])
    generation = ["new" if set(c[3]) <= new else "old" if set(c[3]) <= old else "mixed"
                  for c in calls]
    first = next(c[0] for c, g in zip(calls, generation, strict=True) if g == "new")
    before = [c[1] for c in calls if c[0] < first - 0.5]
    around = [c[1] for c in calls if abs(c[0] - first) <= 0.5]
    after = [c[1] for c in calls if c[0] > first + 0.5]
    ends = sorted(c[0] + c[1] for c in calls)
    gaps = [b - a for a, b in zip(ends, ends[1:], strict=False) if abs(a - first) <= 1]
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                   f"{platform.python_version()}",
        "corpus": args.corpus, "documents": report["documents"],
        "chunks_before": len(old), "chunks_after": len(new),
        "chunk_size": args.chunk_size, "client_threads": THREADS,
        "reindex_seconds": round(reindex_s, 1), "build_seconds": report["build_seconds"],
        "chunks_embedded": report["chunks_embedded"],
        "switch_transaction_ms": report["switch_ms"],
        "searches": len(calls), "failed": failed, "mixed": generation.count("mixed"),
        "old_after_new": sum(1 for c, g in zip(calls, generation, strict=True)
                             if g == "old" and c[0] > first),
        "first_new_search_ms": round(next(c[1] for c in calls if c[0] == first) * 1000, 1),
        "longest_wait_between_answers_ms": round(max(gaps, default=0) * 1000, 1),
        "latency_ms": {
            "during_build": {"p50": _pct(before, .5), "p95": _pct(before, .95),
                             "max": _pct(before, 1)},
            "around_switch": {"n": len(around), "p50": _pct(around, .5),
                              "max": _pct(around, 1)},
            "after": {"p50": _pct(after, .5), "p95": _pct(after, .95), "max": _pct(after, 1)},
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reindex.json").write_text(json.dumps(result, indent=2) + "\n")
    lat = result["latency_ms"]

    def trio(part: dict) -> str:
        return " / ".join(str(part[k]) for k in ("p50", "p95", "max") if k in part) + " ms"

    rows = [
        ("searches", len(calls)),
        ("failed", failed),
        ("results mixing the two generations", result["mixed"]),
        ("old generation after the new one answered", result["old_after_new"]),
        ("switch transaction (catalog)", f"{result['switch_transaction_ms']} ms"),
        ("first search on the new generation (the server opens it)",
         f"{result['first_new_search_ms']} ms"),
        ("longest wait between two answers, within 1 s of the switch",
         f"{result['longest_wait_between_answers_ms']} ms"),
        ("latency during the build, p50 / p95 / max", trio(lat["during_build"])),
        (f"latency within 0.5 s of the switch, p50 / max ({lat['around_switch']['n']} "
         "searches)", trio(lat["around_switch"])),
        ("latency after, p50 / p95 / max", trio(lat["after"])),
    ]
    md = (f"# Blue/green reindex under search load\n\n{result['when']}, {result['machine']} "
          f"(`bench/bench_reindex.py`). The corpus `{args.corpus}` ({result['documents']} "
          f"documents, {len(old)} chunks) served by `citewise serve` (embedded engine); "
          f"{THREADS} HTTP clients search in a loop ({int(PAUSE * 1000)} ms pause) while "
          f"`citewise reindex` rebuilds it with chunk size {args.chunk_size} ({len(new)} "
          f"chunks, {result['chunks_embedded']} embedded) in {result['reindex_seconds']} s and "
          "switches.\n\n| | |\n|---|---:|\n"
          + "".join(f"| {name} | {value} |\n" for name, value in rows))
    (args.out / "reindex.md").write_text(md)
    print(md)
    return 0 if not failed and not result["mixed"] else 1


if __name__ == "__main__":
    sys.exit(main())
