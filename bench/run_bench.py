"""Benchmark of citewise on real runbook corpora: ingest, embedding, re-ingest, search, answers.

Usage (from the repository root)::

    python bench/run_bench.py [--corpora a,b] [--out bench/results] [--queries N]

The corpora are folders under ``../shared/corpora`` (next to the repository). Each one is
ingested as its own folder source into one fresh, temporary data folder, and everything below
is measured over all of them together, in one process, in this order:

1. **Full-pipeline ingest.** ``run_source`` for every corpus, exactly as ``citewise ingest``
   does it: list, parse, chunk, embed (through the embedding cache, which is empty because the
   data folder is new), write to the embedded index, the catalog and the blob store. The model
   is loaded and the parsers imported before the clock starts (as `citewise serve` does at
   start; their time is reported on its own), so the figure is the steady-state cost of
   ingesting, not of starting a process.
2. **Bare embedding.** Every chunk the ingest wrote is read back from the catalog, turned into
   the text the pipeline embeds (``embedding_text(title, heading, text)``) and embedded again
   by a ``DenseEncoder`` without a cache and with the same batch size. Comparing the two says
   how much of the ingest time is the model itself. The bare run sorts all chunks by length
   at once (the pipeline sorts each source's chunks a window at a time), so it is a slight
   lower bound. Ingest and bare embedding alternate for ``--rounds`` rounds (each ingest into
   a fresh data folder, so its cache is empty), and the ratio is taken between the fastest
   of each, as ``timeit`` does: on a shared machine a burst of load from elsewhere slows one
   run by 10-20%, and the least disturbed run of each is the closest to what the code costs.
   Every round's figures are recorded too.
3. **Re-ingest of the unchanged corpora.** A second run over the same sources: every document
   is unchanged, so nothing may be embedded (``chunks_embedded`` is recorded to show it).
4. **Search and answer latency.** About 200 questions are built from the ingested documents
   (alert names, titles and section headings, phrased as questions, shuffled with a fixed
   seed). After 5 warm-up queries, ``SearchService.search`` is timed for each question in
   hybrid, dense and sparse mode (interleaved, so that a burst of load from elsewhere skews
   all modes alike), then ``AnswerService.answer`` for 30 of them. The search service keeps
   an LRU of query vectors; it is emptied before each timed call, so every timed query pays
   for its own embedding, as a new question does.

Each phase also records this process's CPU seconds per wall second and the 1-minute load
average after it. Compare them with a run on an idle machine: a lower CPU share with a higher
load means other processes competed for the CPUs, and that phase's figures are pessimistic.

The machine, the corpus sizes, the settings, the peak RSS and the git commit are recorded
with the figures in ``<out>/latest.json``; ``<out>/latest.md`` holds the same as a table,
which is also printed. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

from citewise.api.composition import Services, build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.connectors.folder import MEDIA_TYPES  # noqa: E402
from citewise.index.dense import DenseEncoder, embedding_text  # noqa: E402
from citewise.ingest.jobs import run_source  # noqa: E402
from citewise.ingest.parse import warm_up as warm_parser  # noqa: E402
from citewise.ingest.pipeline import RunReport  # noqa: E402
from citewise.settings import SourceConfig  # noqa: E402
from citewise.types import Identity  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
DEFAULT_CORPORA = ("openshift-runbooks", "prometheus-operator-runbooks")
DEFAULT_OUT = REPO / "bench" / "results"
SEED = 20240601
WARMUP_QUERIES = 5
ANSWER_QUESTIONS = 30
SEARCH_MODES = ("hybrid", "dense", "sparse")

# An alert runbook is named after its alert: KubePodCrashLooping.md, CephMonQuorumAtRisk.md.
ALERT_NAME = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+$")

_started = time.monotonic()


def progress(message: str) -> None:
    print(f"[{time.monotonic() - _started:7.1f}s] {message}", file=sys.stderr, flush=True)


class StderrProgress:
    """A ``ProgressSink`` that prints a line to stderr every few seconds."""

    def __init__(self, source: str, every: float = 10.0) -> None:
        self.source = source
        self.every = every
        self.documents_done = 0
        self.embedded = 0
        self._last = time.monotonic()
        self.total: int | None = None

    def start(self, total: int | None) -> None:
        self.total = total

    def documents(self, n: int) -> None:
        self.documents_done += n
        self._maybe_print()

    def chunks_embedded(self, n: int) -> None:
        self.embedded += n
        self._maybe_print()

    def close(self) -> None:
        self._print()

    def _maybe_print(self) -> None:
        if time.monotonic() - self._last >= self.every:
            self._print()

    def _print(self) -> None:
        self._last = time.monotonic()
        progress(f"  {self.source}: {self.documents_done} documents, {self.embedded} embedded")


# Environment -------------------------------------------------------------------------------
def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def machine() -> dict:
    info = {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def load_average() -> list[float] | None:
    """1, 5 and 15-minute load: above ~0.5 at the start, something else was using the CPUs."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


class Phase:
    """Wall and CPU time of a block, and the load average after it.

    ``cpu_per_wall`` is this process's CPU seconds (all threads) per wall second. The model
    uses every core, so while embedding on an idle machine it is near the core count; well
    below that, with a high load average, means other processes took CPU time.
    """

    def __enter__(self) -> Phase:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu

    def stats(self) -> dict:
        load = load_average()
        return {
            "cpu_seconds": round(self.cpu, 2),
            "cpu_per_wall": round(self.cpu / self.wall, 2) if self.wall else None,
            "load_avg_1m_after": load[0] if load else None,
        }


def corpus_size(folder: Path) -> dict:
    files = [p for p in folder.rglob("*") if p.is_file()]
    documents = [p for p in files if p.suffix.lower() in MEDIA_TYPES]
    return {
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "document_files": len(documents),
        "document_bytes": sum(p.stat().st_size for p in documents),
    }


# Measurements ------------------------------------------------------------------------------
def latency_stats(samples_s: Sequence[float]) -> dict:
    ms = np.asarray(samples_s) * 1000.0
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p95_ms": round(float(np.percentile(ms, 95)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "mean_ms": round(float(ms.mean()), 2),
        "max_ms": round(float(ms.max()), 2),
    }


def ingest_all(services: Services, sources: list[SourceConfig], label: str) -> dict:
    reports: list[RunReport] = []
    with Phase() as phase:
        for source in sources:
            progress(f"{label}: {source.name}")
            report = run_source(
                services.pipeline, source, trigger="bench", progress=StderrProgress(source.name)
            )
            progress(f"  {report.summary()}")
            if report.status not in ("succeeded", "partial"):
                raise SystemExit(
                    f"bench: {label} of {source.name} {report.status}: {report.message}"
                )
            reports.append(report)
    seconds = phase.wall
    total = {
        key: sum(getattr(r.counts, key) for r in reports)
        for key in ("seen", "added", "updated", "unchanged", "deleted", "failed",
                    "chunks_written", "chunks_embedded")
    }
    return {
        "seconds": round(seconds, 2),
        "documents": total["seen"],
        **total,
        "chunks_per_s": round(total["chunks_written"] / seconds, 2),
        "docs_per_s": round(total["seen"] / seconds, 2),
        "per_source": [
            {"source": r.source, "status": r.status, "seconds": round(r.seconds, 2),
             "documents": r.counts.seen, "chunks_written": r.counts.chunks_written,
             "chunks_embedded": r.counts.chunks_embedded, "failed": r.counts.failed}
            for r in reports
        ],
        "phase": phase.stats(),
    }


def more_rounds(rounds: int, tmp: Path, sources: list[SourceConfig], texts: list[str],
                ingest: dict, bare: dict) -> tuple[dict, dict]:
    """Ingest again into fresh data folders and embed bare again, alternating; keep the
    fastest run of each, with every round's seconds."""
    ingests, bares = [ingest], [bare]
    for n in range(2, rounds + 1):
        settings = Settings(data_dir=tmp / f"data-round-{n}")
        services = build_services(settings)
        try:
            ingests.append(ingest_all(services, sources, f"ingest, round {n}"))
        finally:
            services.close()
        bares.append(bare_embedding(settings, texts))
        progress(f"  bare {bares[-1]['chunks_per_s']} chunks/s")
    best_ingest = min(ingests, key=lambda r: r["seconds"])
    best_bare = min(bares, key=lambda r: r["seconds"])
    return ({**best_ingest, "rounds_seconds": [r["seconds"] for r in ingests]},
            {**best_bare, "rounds_seconds": [r["seconds"] for r in bares]})


def chunk_texts(services: Services, sources: list[SourceConfig]) -> list[str]:
    """What the pipeline embedded: every live chunk, with its document title and heading."""
    texts = []
    for source in sources:
        records = services.catalog.documents_of_source(source.name)
        for record in sorted(records.values(), key=lambda r: r.id):
            for chunk in services.catalog.chunk_rows(record.id):
                texts.append(embedding_text(record.title, chunk.heading or "", chunk.text))
    return texts


def bare_embedding(settings: Settings, texts: list[str]) -> dict:
    encoder = DenseEncoder(settings.embedding.embedding_model_path,
                           batch_size=settings.embedding.embedding_batch_size, cache=None)
    with Phase() as phase:
        encoder.embed_documents(texts)
    seconds = phase.wall
    return {
        "seconds": round(seconds, 2),
        "chunks": len(texts),
        "texts_through_model": encoder.embedded_count,  # distinct texts: duplicates run once
        "chunks_per_s": round(len(texts) / seconds, 2),
        "phase": phase.stats(),
    }


def build_queries(services: Services, sources: list[SourceConfig], n: int) -> list[str]:
    """Deterministic questions from alert names, titles and headings, mixed and shuffled."""
    rng = random.Random(SEED)
    alerts: set[str] = set()
    titles: set[str] = set()
    headings: set[tuple[str, str]] = set()
    for source in sources:
        for record in services.catalog.documents_of_source(source.name).values():
            stem = Path(record.path or record.external_id).stem
            if ALERT_NAME.match(stem):
                alerts.add(stem)
            if record.title and record.title != stem:
                titles.add(record.title.strip())
            for chunk in services.catalog.chunk_rows(record.id):
                last = (chunk.heading or "").rsplit(" > ", 1)[-1].strip()
                if last and len(last) <= 80:
                    headings.add((last, record.title.strip()))
    phrasings = {
        "alert": ["What does the {0} alert mean?", "How do I fix {0}?", "Why is {0} firing?"],
        "title": ["What is {0}?", "How do I troubleshoot {0}?", "Where is the runbook for {0}?"],
        "heading": ["What does the {1} runbook say about {0}?", "{0}: what should I do for {1}?"],
    }
    groups: list[list[str]] = []
    for kind, items in (("alert", alerts), ("title", titles), ("heading", headings)):
        ordered = sorted(items)
        rng.shuffle(ordered)
        templates = phrasings[kind]
        groups.append([
            rng.choice(templates).format(*((item,) if isinstance(item, str) else item))
            for item in ordered
        ])
    queries: list[str] = []
    seen: set[str] = set()
    for i in range(max(map(len, groups), default=0)):  # round-robin: a balanced mix
        for group in groups:
            if i < len(group) and group[i] not in seen and len(queries) < n:
                seen.add(group[i])
                queries.append(group[i])
    rng.shuffle(queries)
    return queries


def forget_query_vectors(services: Services) -> None:
    """Empty the search service's query-vector LRU so each timed query embeds its question."""
    cache = getattr(services.search, "_query_vectors", None)
    if cache is not None:
        cache.clear()


def timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    out = call()
    return time.perf_counter() - started, out


def search_latency(services: Services, warmup: list[str], queries: list[str]) -> dict:
    """Time every query in every mode, the modes interleaved (rotated per query): a burst of
    load from another process then skews all modes alike instead of one of them."""
    anyone = Identity.anonymous()
    for q in warmup:
        for mode in SEARCH_MODES:
            services.search.search(q, anyone, top_k=10, mode=mode)
    n = len(SEARCH_MODES)
    samples: dict[str, list[float]] = {m: [] for m in SEARCH_MODES}
    results: dict[str, list[int]] = {m: [] for m in SEARCH_MODES}
    with Phase() as phase:
        for i, q in enumerate(queries):
            if i % 50 == 0:
                progress(f"search: queries {i + 1}-{min(i + 50, len(queries))} of {len(queries)}")
            for mode in SEARCH_MODES[i % n :] + SEARCH_MODES[: i % n]:
                forget_query_vectors(services)
                seconds, hits = timed(
                    lambda q=q, mode=mode: services.search.search(q, anyone, top_k=10, mode=mode)
                )
                samples[mode].append(seconds)
                results[mode].append(len(hits))
    return {
        mode: {
            **latency_stats(samples[mode]),
            "mean_results": round(statistics.fmean(results[mode]), 2),
            "empty_results": results[mode].count(0),
        }
        for mode in SEARCH_MODES
    } | {"phase": phase.stats()}


def answer_latency(services: Services, questions: list[str]) -> dict:
    anyone = Identity.anonymous()
    progress(f"answers: {len(questions)} questions")
    samples, answers = [], []
    with Phase() as phase:
        for q in questions:
            forget_query_vectors(services)
            seconds, answer = timed(lambda q=q: services.answers.answer(q, anyone))
            samples.append(seconds)
            answers.append(answer)
    stats = latency_stats(samples)
    return {
        "n": stats["n"],
        "p50_ms": stats["p50_ms"],
        "p95_ms": stats["p95_ms"],
        "mean_ms": stats["mean_ms"],
        "abstained": sum(1 for a in answers if a.abstained),
        "mode": answers[0].mode if answers else None,
        "phase": phase.stats(),
    }


# Report ------------------------------------------------------------------------------------
def markdown(r: dict) -> str:
    ing, bare, re_ing = r["ingest"], r["bare_embedding"], r["reingest"]
    corpora = ", ".join(
        f"{name} ({s['document_files']} files, {s['document_bytes'] / 1024:.0f} KiB)"
        for name, s in r["corpora"].items()
    )
    rows = [
        ("Ingest (full pipeline, empty cache)",
         f"{ing['seconds']:.1f} s: {ing['documents']} docs, {ing['chunks_written']} chunks "
         f"written, {ing['chunks_embedded']} embedded"),
        ("Ingest throughput",
         f"{ing['chunks_per_s']:.1f} chunks/s, {ing['docs_per_s']:.2f} docs/s"),
        ("Bare embedding (same chunks, no cache)",
         f"{bare['seconds']:.1f} s, {bare['chunks_per_s']:.1f} chunks/s"),
        ("Pipeline / bare throughput",
         f"{r['pipeline_over_bare']:.2f} (embedding is ~{r['pipeline_over_bare']:.0%} of ingest)"),
        (f"Ingest / bare seconds, each of {len(ing['rounds_seconds'])} rounds",
         ", ".join(f"{i:.1f} / {b:.1f}"
                   for i, b in zip(ing["rounds_seconds"], bare["rounds_seconds"], strict=True))),
        ("Re-ingest (unchanged)",
         f"{re_ing['seconds']:.1f} s, {re_ing['unchanged']} unchanged, "
         f"{re_ing['chunks_embedded']} embedded"),
    ]
    for mode in SEARCH_MODES:
        s = r["search"][mode]
        rows.append((f"Search {mode} (top 10, n={s['n']})",
                     f"p50 {s['p50_ms']:.1f} / p95 {s['p95_ms']:.1f} / p99 {s['p99_ms']:.1f} / "
                     f"mean {s['mean_ms']:.1f} ms"))
    a = r["answers"]
    rows += [
        (f"Answer ({a['mode']}, n={a['n']})",
         f"p50 {a['p50_ms']:.1f} / p95 {a['p95_ms']:.1f} ms, {a['abstained']} abstained"),
        ("CPU s per wall s (ingest / bare / search / answers)",
         " / ".join(f"{r[k]['phase']['cpu_per_wall']:.2f}"
                    for k in ("ingest", "bare_embedding", "search", "answers"))),
        ("Model load and parser import (before timing)", f"{r['model_load_seconds']:.1f} s"),
        ("Peak RSS", f"{r['peak_rss_mib']:.0f} MiB"),
    ]
    m, s = r["machine"], r["settings"]
    lines = [
        f"# citewise benchmark, {r['timestamp']}",
        "",
        f"Corpora: {corpora}. Commit `{r['git_commit']}`. Machine: {m['cpu_count']} CPUs, "
        f"{m['platform']}, Python {m['python']}, load average {m['load_avg_start']} at start. "
        f"Settings: chunk_max_tokens "
        f"{s['chunk_max_tokens']}, embedding_batch_size {s['embedding_batch_size']}, "
        f"{s['index']} index. Total bench time {r['total_seconds']:.0f} s.",
        "",
        "| Measure | Result |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in rows),
    ]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# Main --------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--corpora",
        help=f"comma-separated folders of {CORPORA} (default: {','.join(DEFAULT_CORPORA)})",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for latest.json/.md")
    parser.add_argument("--queries", type=int, default=200, help="search queries to time")
    parser.add_argument("--rounds", type=int, default=2,
                        help="ingest and bare-embedding runs, alternated; the fastest of each "
                             "gives the ratio (default 2)")
    args = parser.parse_args(argv)
    if args.queries < 1:
        parser.error("--queries must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in (args.corpora or ",".join(DEFAULT_CORPORA)).split(",") if n.strip()]
    if not CORPORA.is_dir():
        print(f"bench: skipped, no shared corpora at {CORPORA}; nothing written", file=sys.stderr)
        return 0
    missing = [n for n in names if not (CORPORA / n).is_dir()]
    if missing:
        available = ", ".join(sorted(p.name for p in CORPORA.iterdir() if p.is_dir()))
        print(f"bench: no corpus {', '.join(missing)} in {CORPORA} (available: {available}); "
              "nothing written", file=sys.stderr)
        return 2 if args.corpora else 0
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    begun = time.perf_counter()
    load_at_start = load_average()
    if load_at_start and load_at_start[0] > 0.5:
        progress(f"warning: load average {load_at_start[0]} at start; other work skews figures")

    with tempfile.TemporaryDirectory(prefix="citewise-bench-") as tmp:
        settings = Settings(data_dir=Path(tmp) / "data")
        services = build_services(settings)
        try:
            sources = [
                SourceConfig(name=n, type="folder", path=str(CORPORA / n), readers=["public"])
                for n in names
            ]
            progress("loading the embedding model and the parsers")
            started = time.perf_counter()
            services.dense.warm_up()
            warm_parser()
            model_load = time.perf_counter() - started

            ingest = ingest_all(services, sources, "ingest")
            texts = chunk_texts(services, sources)
            progress(f"bare embedding of {ingest['chunks_written']} chunks")
            bare = bare_embedding(settings, texts)
            progress(f"  {bare['chunks_per_s']} chunks/s")
            ingest, bare = more_rounds(args.rounds, Path(tmp), sources, texts, ingest, bare)
            reingest = ingest_all(services, sources, "re-ingest")

            queries = build_queries(services, sources, args.queries + WARMUP_QUERIES)
            warmup, timed = queries[:WARMUP_QUERIES], queries[WARMUP_QUERIES:]
            if not timed:
                raise SystemExit("bench: the corpora gave too few titles to build queries")
            search = search_latency(services, warmup, timed)
            answers = answer_latency(services, timed[:ANSWER_QUESTIONS])
        finally:
            services.close()

    results = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": {**machine(), "load_avg_start": load_at_start, "load_avg_end": load_average()},
        "corpora": {n: corpus_size(CORPORA / n) for n in names},
        "settings": {
            "chunk_max_tokens": settings.ingest.chunk_max_tokens,
            "embedding_batch_size": settings.embedding.embedding_batch_size,
            "embedding_model": services.dense.model_id,
            "search_prefetch": settings.retrieval.search_prefetch,
            "index": services.index_kind,
            "blob_store": settings.index.blob_store,
            "llm": bool(settings.gateway.llm_base_url),
        },
        "model_load_seconds": round(model_load, 2),
        "ingest": ingest,
        "bare_embedding": bare,
        "pipeline_over_bare": round(ingest["chunks_per_s"] / bare["chunks_per_s"], 3),
        "reingest": reingest,
        "search": search,
        "answers": answers,
        "queries": {"timed": len(timed), "warmup": len(warmup), "seed": SEED,
                    "examples": timed[:5]},
        "peak_rss_mib": peak_rss_mib(),
        "total_seconds": round(time.perf_counter() - begun, 1),
    }
    table = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomically(args.out / "latest.json", json.dumps(results, indent=2) + "\n")
    write_atomically(args.out / "latest.md", table)
    progress(f"wrote {args.out / 'latest.json'} and latest.md")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
