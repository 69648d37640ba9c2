"""Does the ingest pipeline keep up with a fast remote embedder? The five shared corpora ingested
through ``CITEWISE_EMBEDDING_URL`` against a loopback server that answers at once.

Big first ingests belong on a GPU behind an OpenAI-compatible endpoint (TEI, vLLM); there the
embedder answers thousands of chunks a second, and what bounds an ingest is citewise's own
work: reading, redaction, parsing and chunking, BM25, the catalog, the blobs and the vector
index. This bench measures that work alone.

The server is ``tests/fakes/openai_provider.py`` (the OpenAI embeddings protocol as documented),
run in a process of its own and given an embedder with no model: each text's vector is a unit
vector drawn from a generator seeded by its hash (384 dimensions, deterministic), so the index
is the same run after run. citewise is built as the CLI builds it (``build_services``, a fresh
data folder, so the embedding cache is empty and every distinct chunk goes to the server, with
``CITEWISE_EMBEDDING_CONCURRENCY`` requests in flight), and each source is ingested in turn.

Reported: the wall time, the time inside embedding calls (the union of the intervals during
which at least one request was in flight, so that concurrent requests are not counted twice;
and their sum), and chunks/s of the pipeline's own work: chunks / (wall - union); and the CPU
time of the ingesting process and of its parse workers (``--parse-processes``: with a remote model
the pipeline redacts, parses and chunks in worker processes, ``ingest/cutting.py``), which a
shared machine's load moves less than wall time. The target
(issue 35): >= 1,000 chunks/s of pipeline work besides the embedder. A digest of every chunk
(id, text, heading, lines) and outline, and the index's point count, show that a faster
pipeline indexes the same thing.

    .venv/bin/python bench/bench_remote_embedding.py [--concurrency 4] [--parse-processes N] \
        [--keep DIR]
    # -> bench/results/remote-embedding.{json,md}
    # the profile: py-spy over the same run, summarised
    py-spy record --format raw -o /tmp/ingest.txt -- \
        .venv/bin/python bench/bench_remote_embedding.py --out /tmp
    .venv/bin/python bench/profile_summary.py /tmp/ingest.txt \
        > bench/results/remote-embedding-profile.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"
NAMES = ["gitlab-com-runbooks", "govuk-developer-docs", "openshift-runbooks",
         "prometheus-operator-runbooks", "sourcegraph-handbook"]
DIM = 384
TARGET = 1000.0

# The server process: the documented fake, with hashed unit vectors for an embedder.
SERVER = """
import hashlib, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from tests.fakes.openai_provider import OpenAIProvider

def hashed(texts):
    rows = []
    for t in texts:
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(%d)
        rows.append(v / np.linalg.norm(v))
    return rows

fake = OpenAIProvider(model="hashed-384")
fake.embedder = hashed
fake.start()
print(fake.base_url, flush=True)
while True:
    time.sleep(3600)
""".replace("%d", str(DIM))


def start_server() -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(ROOT)], stdout=subprocess.PIPE,
                              text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        server.kill()
        sys.exit(f"the loopback embeddings server did not start (said {url!r})")
    return server, url


def git_copy(name: str, folder: Path) -> Path:
    """The corpus's Markdown files as one commit of a new git repository under ``folder``."""
    repo = folder / "git" / name
    for src in sorted((CORPORA / name).rglob("*.md")):
        if src.is_file():
            dst = repo / src.relative_to(CORPORA / name)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "corpus"], check=True)
    return repo


def write_config(folder: Path, *, git: bool = False) -> Path:
    lines = ['[settings]\ndata_dir = "data"\n']
    for name in NAMES:
        if git:  # a syncing connector: a checkpoint after every batch of documents
            lines.append(f'[[sources]]\nname = "{name}"\ntype = "git"\n'
                         f'path = "{git_copy(name, folder)}"\n'
                         'readers = ["public"]\ninclude = ["*.md"]\n')
            continue
        lines.append(f'[[sources]]\nname = "{name}"\ntype = "folder"\npath = "{CORPORA / name}"\n'
                     'readers = ["public"]\ninclude = ["*.md"]\n')
    path = folder / "citewise.toml"
    path.write_text("\n".join(lines))
    return path


class CallClock:
    """Wraps the encoder's ``embed``: every call's interval, for their union and their sum."""

    def __init__(self, embed):  # type: ignore[no-untyped-def]
        self._embed = embed
        self._lock = threading.Lock()
        self.intervals: list[tuple[float, float]] = []
        self.texts = 0

    def __call__(self, texts: list[str]):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return self._embed(texts)
        finally:
            ended = time.perf_counter()
            with self._lock:
                self.intervals.append((started, ended))
                self.texts += len(texts)

    def union(self) -> float:
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.intervals):
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total

    def total(self) -> float:
        return sum(b - a for a, b in self.intervals)


def cpu_seconds() -> tuple[float, float]:
    """CPU time of this process (every thread), and of its children that ended: the parse
    workers, which each run stops and reaps at its end (the server is a child too, but is
    reaped only after the measurement). Less moved by a busy machine than wall time, and it
    includes the client's side of the embedding calls."""
    own, children = (resource.getrusage(who)
                     for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def index_digest(catalog_path: Path) -> str:
    """What was indexed, in one hash: every chunk's id, place and text, and every outline."""
    h = hashlib.sha256()
    with closing(sqlite3.connect(catalog_path)) as db:
        for row in db.execute("SELECT id, document_id, ordinal, heading, anchor, text, start_line, "
                              "end_line, token_count FROM chunks ORDER BY id"):
            h.update(json.dumps(row).encode())
        for row in db.execute("SELECT document_id, outline FROM outlines ORDER BY document_id"):
            h.update(json.dumps(row).encode())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=4,
                        help="CITEWISE_EMBEDDING_CONCURRENCY (requests in flight)")
    parser.add_argument("--parse-processes", type=int, metavar="N",
                        help="CITEWISE_PARSE_PROCESSES: worker processes that parse and chunk "
                             "(default: the pipeline's choice: one per core, at most 4, with a "
                             "remote model)")
    parser.add_argument("--git", action="store_true",
                        help="ingest each corpus as a git repository (the git connector, which "
                             "syncs: a checkpoint after every batch) instead of a folder")
    parser.add_argument("--keep", type=Path, help="keep the data folder here (default: temp)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--machine-note", metavar="TEXT",
                        help="what else ran on the machine meanwhile, written beside the load "
                             "average (e.g. 'an evaluation ran at the same time')")
    args = parser.parse_args()
    if not CORPORA.is_dir():
        print(f"skipping: {CORPORA} is absent (the shared corpora are what is ingested)",
              file=sys.stderr)
        return
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings
    from citewise.ingest.jobs import run_source

    work = args.keep or Path(tempfile.mkdtemp(prefix="citewise-remote-embedding-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    server, url = start_server()
    load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        os.environ.update({"CITEWISE_EMBEDDING_URL": url,
                           "CITEWISE_EMBEDDING_MODEL": "hashed-384",
                           "CITEWISE_EMBEDDING_DIM": str(DIM),
                           "CITEWISE_EMBEDDING_CONCURRENCY": str(args.concurrency)})
        if args.parse_processes is not None:
            os.environ["CITEWISE_PARSE_PROCESSES"] = str(args.parse_processes)
        settings = Settings.load(write_config(work, git=args.git))
        services = build_services(settings)
        try:
            remote = services.dense.remote
            assert remote is not None, "CITEWISE_EMBEDDING_URL was not taken"
            parse_processes = services.pipeline.parse_processes
            clock = CallClock(remote.embed)
            remote.embed = clock
            started, cpu_started = time.perf_counter(), cpu_seconds()
            reports = []
            for source in settings.sources:
                report = run_source(services.pipeline, source, trigger="bench")
                print(f"  {report.summary()}", file=sys.stderr)
                reports.append(report)
            wall = time.perf_counter() - started
            cpu_self, cpu_workers = (b - a for a, b in zip(cpu_started, cpu_seconds(),
                                                           strict=True))
            cpu = cpu_self + cpu_workers
            chunks = services.catalog.count_chunks()
            points = services.index.count()
        finally:
            services.close()
        digest = index_digest(settings.data.catalog_path)
    finally:
        server.kill()
        server.wait()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    union, total = clock.union(), clock.total()
    besides = wall - union
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "command": "nice -n 10 .venv/bin/python bench/bench_remote_embedding.py "
                   + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_start": load_start,
                    "load_end": [round(x, 2) for x in os.getloadavg()],
                    "shared": args.machine_note},
        "concurrency": args.concurrency, "parse_processes": parse_processes,
        "sources_as": "git" if args.git else "folder",
        "documents": sum(r.counts.added + r.counts.updated for r in reports),
        "failed": sum(r.counts.failed for r in reports),
        "chunks": chunks, "points": points,
        "chunks_embedded": sum(r.counts.chunks_embedded for r in reports),
        "requests": len(clock.intervals), "texts_sent": clock.texts,
        "wall_s": round(wall, 2), "embedding_union_s": round(union, 2),
        "embedding_sum_s": round(total, 2), "besides_embedding_s": round(besides, 2),
        "cpu_s": round(cpu, 2), "cpu_self_s": round(cpu_self, 2),
        "cpu_workers_s": round(cpu_workers, 2), "chunks_per_cpu_s": round(chunks / cpu, 1),
        "chunks_per_s": round(chunks / wall, 1),
        "pipeline_chunks_per_s": round(chunks / besides, 1) if besides > 0 else None,
        "target": TARGET, "digest": digest,
        "sources": [{"source": r.source, "seconds": round(r.seconds, 2),
                     "chunks": r.counts.chunks_written, "status": r.status} for r in reports],
    }
    result["meets_target"] = bool(result["pipeline_chunks_per_s"]
                                  and result["pipeline_chunks_per_s"] >= TARGET)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remote-embedding.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "remote-embedding.md").write_text(markdown(result))
    print(markdown(result))


def busy_note(m: dict) -> str:
    """The operator's word on what else ran, if given: the load average alone cannot say."""
    return f" ({m['shared']}: the figures are noisy)" if m.get("shared") else ""


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# Ingest through a remote embedder that answers at once",
        "",
        f"{r['when']}, commit `{r['commit']}`, {m['cpus']} CPUs, {m['platform']}, Python "
        f"{m['python']}; load average {m['load_start']} at start, {m['load_end']} at the end"
        f"{busy_note(m)}; `{r['command']}`.",
        "",
        f"The five shared corpora into a fresh data folder (empty embedding cache), "
        f"{r['concurrency']} requests in flight to a loopback OpenAI-compatible server that "
        f"returns hashed unit vectors ({r['requests']} requests, {r['texts_sent']} texts); "
        f"each corpus read as a {r.get('sources_as', 'folder')} source; "
        f"{r.get('parse_processes', 0)} parse worker processes (CPU s counts them too).",
        "",
        "| documents | chunks | wall s | in embedding calls s (union) | (sum) | besides s | "
        "CPU s | chunks per CPU s | chunks/s overall | chunks/s of pipeline work | target |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r['documents']} | {r['chunks']} | {r['wall_s']} | {r['embedding_union_s']} | "
        f"{r['embedding_sum_s']} | {r['besides_embedding_s']} | {r['cpu_s']} | "
        f"{r['chunks_per_cpu_s']} | {r['chunks_per_s']} | "
        f"**{r['pipeline_chunks_per_s']}** | ≥ {r['target']:.0f} "
        f"({'met' if r['meets_target'] else 'not met'}) |",
        "",
        "| source | seconds | chunks | status |",
        "|---|---:|---:|---|",
    ]
    lines += [f"| {s['source']} | {s['seconds']} | {s['chunks']} | {s['status']} |"
              for s in r["sources"]]
    lines += ["", f"Index digest (chunk ids, texts, lines, outlines): `{r['digest']}`; "
                  f"{r['points']} points, {r['failed']} documents failed."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
