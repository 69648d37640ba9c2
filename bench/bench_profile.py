"""Where a search's CPU goes: a sampling profile of `citewise serve` under concurrent load.

Starts `citewise serve` over a data folder that `bench/bench_scale.py --work FOLDER` ingested
(113k chunks by default), drives it with the scale bench's clients (16 searching, then 4 asking
for extractive answers), and samples the server's Python stacks with py-spy (a sampling
profiler outside the process: nothing in the server changes, idle threads are not counted, so
the samples are where its CPU time goes). Each sample is put in one bucket by the deepest frame
that names a part of citewise or a library it leans on (``BUCKETS``); the tables give each
bucket's share, and the functions with the most samples of their own and in total.

    .venv/bin/python bench/bench_scale.py --work /tmp/scale      # ingest once, keep it
    .venv/bin/python bench/bench_profile.py --work /tmp/scale [--seconds 30] [--label before]
    # -> bench/results/profile[-LABEL].{md,json} (and the raw py-spy stacks beside them)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import profile_summary  # noqa: E402
from bench_scale import NAMES, _load, start_server, stored_questions, wait_loaded  # noqa: E402

# (bucket, substrings of a frame, named as ``profile_summary.frame_name`` names it: ``function
# (path)``): a sample goes to the first bucket, in this order, that one of its frames matches,
# searching from the innermost frame outwards. Library buckets come
# first so that, say, torch under the query embedder counts as the model, not as search.
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("query embedding: the model (torch, tokenizer)",
     ("torch/", "sentence_transformers/", "transformers/", "tokenizers", "index/bert_numpy.py")),
    ("engine query (qdrant-edge)", ("shard.query", "(index/qdrant_edge_index.py",
                                     "(index/edge_hnsw.py")),
    ("catalog reads (SQLite)", ("sqlite_catalog.py", "index/catalog.py", "sqlite3",
                                "postgres_catalog.py")),
    ("hit payloads to results (pydantic)", ("index/payload.py", "from_hit (")),
    ("BM25 query, synonyms", ("index/sparse.py", "retrieval/synonyms.py",
                              "retrieval/vocabulary.py")),
    ("fusion", ("retrieval/fusion.py",)),
    ("learned ranking", ("retrieval/ranking/",)),
    ("answer building", ("retrieval/answering/",)),
    ("search (other)", ("retrieval/search.py",)),
    ("metering, audit, rate limits", ("api/metering/", "audit", "ratelimit", "rate_limit")),
    ("identity", ("api/identity/", "api/auth.py")),
    ("answer route", ("api/answering.py", "api/guardrails.py", "api/guarded_stream.py")),
    ("response JSON (pydantic, json)", ("pydantic", "json/", "encoders.py")),
    ("HTTP (uvicorn, starlette, fastapi, anyio)", ("uvicorn/", "starlette/", "fastapi/",
                                                   "anyio/", "h11/", "httptools")),
    ("asyncio, threads", ("asyncio/", "threading.py", "concurrent/")),
]


def bucket_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, needles in BUCKETS:
            if any(n in frame for n in needles):
                return name
    return "other"


def summarise(raw: Path) -> dict:
    """Bucket shares, and the top functions by own and total samples, from py-spy's raw
    output (``profile_summary``'s reading of it)."""
    lines = raw.read_text().splitlines()
    samples, own, total = profile_summary.summarise(lines)
    buckets: Counter[str] = Counter()
    for frames, n in profile_summary.stacks(lines):
        buckets[bucket_of(frames)] += n

    def share(c: Counter[str], k: int) -> list[dict]:
        return [{"frame": f, "samples": n, "share": round(n / samples, 4)}
                for f, n in c.most_common(k)]
    return {"samples": samples, "buckets": share(buckets, len(BUCKETS) + 1),
            "own": share(own, 25), "total": share(total, 40)}


def _profile(url: str, pid: int, seconds: float, clients: int, answer: bool,
             questions: list[str], headers: dict, raw: Path) -> dict:
    spy = subprocess.Popen(
        [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid),
         "--rate", "100", "--nonblocking", "--format", "raw", "--output", str(raw),
         "--duration", str(int(seconds))],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    load = _load(url, clients, seconds, questions, answer, headers)
    _, err = spy.communicate(timeout=120)
    # py-spy 0.4.0 can panic while tearing its sampler down after it has written the stacks
    # (sampler.rs: an unwrap in Drop); the file is then complete, so only a missing one fails.
    if not raw.exists() or not raw.stat().st_size:
        raise SystemExit(f"py-spy failed (exit {spy.returncode}): {err.strip()[-500:]}\n"
                         "it needs ptrace rights over the server (run as the same user, "
                         "or as root in a container with SYS_PTRACE)")
    return {"load": load, **summarise(raw)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a folder `bench/bench_scale.py --work` ingested")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--label", default="", help="suffix of the result files")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    config = args.work / "citewise.toml"
    if not config.exists():
        raise SystemExit(f"{config} is missing: run bench/bench_scale.py --work {args.work} "
                         "first (it ingests the corpora there)")
    # The scale bench's questions: its forms over the same headings of the catalog.
    questions = stored_questions(args.work)

    server, url = start_server(config, args.work)
    suffix = f"-{args.label}" if args.label else ""
    args.out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    try:
        wait_loaded(url)
        headers = {"X-Citewise-Groups": "team-1"}
        with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
            for q in questions[:20]:  # warm: the first calls load lazily built parts
                http.get("/v1/search", params={"q": q}).raise_for_status()
                http.post("/v1/answer", json={"question": q}).raise_for_status()
        results = {
            "search_16_clients": _profile(url, server.pid, args.seconds, 16, False, questions,
                                          headers, args.out / f"profile{suffix}-search.raw"),
            "answer_4_clients": _profile(url, server.pid, args.seconds, 4, True, questions,
                                         headers, args.out / f"profile{suffix}-answer.raw"),
        }
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    results["machine"] = {"cpus": os.cpu_count(), "load_at_start": load_start,
                          "load_at_end": os.getloadavg()}
    results["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    # The server's checkout: the one whose virtual environment runs this script (a profile of
    # an older commit runs this script with that checkout's interpreter).
    checkout = Path(sys.executable).absolute().parents[2] if (
        Path(sys.executable).parent.parent / "pyvenv.cfg").exists() else ROOT
    results["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout,
                                       capture_output=True, text=True).stdout.strip()
    results["corpora"] = NAMES
    (args.out / f"profile{suffix}.json").write_text(json.dumps(results, indent=2))
    (args.out / f"profile{suffix}.md").write_text(_markdown(results, args))
    print(_markdown(results, args))


def _markdown(r: dict, args: argparse.Namespace) -> str:
    lines = [f"# Where the server's CPU goes, {r['when']}", "",
             f"`citewise serve` over `{args.work}` (bench/bench_scale.py's corpora copies), "
             f"sampled by py-spy at 100 Hz while clients on loopback drive it for "
             f"{args.seconds:.0f} s. Commit `{r['commit']}`. {r['machine']['cpus']} CPUs, load "
             f"average {r['machine']['load_at_start']} at start, {r['machine']['load_at_end']} "
             "at the end. A sample counts where the server's threads were running Python "
             "(or a native call made from it); idle threads are not sampled.", "",
             f"    .venv/bin/python bench/bench_profile.py --work {args.work} "
             f"--seconds {args.seconds:.0f}" + (f" --label {args.label}" if args.label else ""),
             ""]
    for key, title in (("search_16_clients", "16 clients searching"),
                       ("answer_4_clients", "4 clients asking for extractive answers")):
        p = r[key]
        load = p["load"]
        lines += [f"## {title}: {load['per_second']}/s, p50 {load['latency_ms'].get('p50')} / "
                  f"p95 {load['latency_ms'].get('p95')} ms, {load['errors']} errors, "
                  f"{p['samples']} samples", "",
                  "| Where | Share |", "|---|---|"]
        lines += [f"| {b['frame']} | {b['share']:.1%} |" for b in p["buckets"]]
        lines += ["", "Functions with the most samples of their own:", "",
                  "| Function | Share |", "|---|---|"]
        lines += [f"| `{b['frame']}` | {b['share']:.1%} |" for b in p["own"][:15]]
        lines += ["", "Functions with the most samples in total (themselves and what they "
                  "call):", "", "| Function | Share |", "|---|---|"]
        lines += [f"| `{b['frame']}` | {b['share']:.1%} |" for b in p["total"][:25]]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
