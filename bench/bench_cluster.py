"""Beyond one machine, measured (issue 32): what the PostgreSQL catalog costs a search, and what
one and two ``citewise serve`` replicas serve on this machine.

    .venv/bin/python bench/bench_cluster.py      # -> bench/results/cluster.{json,md}

Needs the shared corpora (``../shared/corpora``) and the test extra's PostgreSQL with pgvector
(``pgserver``, installed by ``make setup-test``; ``tests/postgres_server.py`` runs it on
loopback); without either it says so and exits 0 without writing anything.

1. **In process.** The corpora of ``run_bench.py`` are ingested into three deployments: the
   SQLite catalog with embedded Qdrant (the default); the PostgreSQL catalog with embedded
   Qdrant (only the catalog moved: what the catalog costs); the PostgreSQL catalog with pgvector
   (everything in one database: what a cluster runs here). The embeddings come from the first
   ingest (its embedding cache is copied to the others), so all three hold the same vectors.
   Each question is searched in each deployment in turn (rotated per question, so a burst of
   load from elsewhere hits them alike), twice: as a new question (its vector computed: the
   model dominates) and again with its vector in the search service's cache (what is left is
   the vector search and the catalog reads, where a database round trip shows). Then
   extractive answers, sequentially, per deployment.
2. **Over HTTP.** Real ``citewise serve`` processes configured by ``CITEWISE_*`` variables
   only (``tests/cluster.py``), in local mode with the answer cache off (the rate limits on,
   each request from a person of its own, so each draws on buckets and none is refused):
   the SQLite deployment (one process: embedded Qdrant admits one, served from the ingest's
   data folder), one new PostgreSQL + pgvector replica (an empty data folder, so an empty
   embedding cache), one whose data folder holds the ingest's embedding cache (as a replica
   that has served a while), then two of those. For each: one client's sequential search
   latency through the front door, then ``--concurrency`` clients for ``--seconds`` of
   answers and then of searches, spread round-robin over the replicas. Every request carries
   a question of its own (a numbered variant of a corpus question), so each pays for its
   embedding as a new question does.
   Recorded with them: the requests/s, p50/p95, each server process's CPU seconds per wall
   second and resident memory, and the client's own CPU share: the clients run on the same
   cores as the servers, so on this 2-core machine two replicas share the two cores one had.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import httpx  # noqa: E402

from bench.run_bench import (  # noqa: E402
    CORPORA,
    DEFAULT_CORPORA,
    build_queries,
    corpus_size,
    forget_query_vectors,
    git_commit,
    latency_stats,
    load_average,
    machine,
    progress,
)
from citewise.api.composition import Services, build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.ingest.jobs import run_source  # noqa: E402
from citewise.settings import SourceConfig  # noqa: E402
from citewise.types import Identity  # noqa: E402
from tests.cluster import Cluster, ClusterConfig, Replica  # noqa: E402

OUT = ROOT / "bench" / "results"
DEPLOYMENTS = {
    "sqlite": "SQLite catalog, embedded Qdrant (the default)",
    "postgres": "PostgreSQL catalog, embedded Qdrant",
    "pgvector": "PostgreSQL catalog and pgvector",
}
ANSWERS_IN_PROCESS = 30
HTTP_SEQUENTIAL = 100
# Every answer computed (no cached one served). The rate limits stay on, as deployed: each
# request comes from a person of its own (local mode's X-Citewise-User), so every request draws
# on its buckets, and none is refused.
SERVER_ENV = {"CITEWISE_ANSWER_CACHE": "false", "CITEWISE_LOG_LEVEL": "WARNING"}


# In process ---------------------------------------------------------------------------------
def deployment_settings(name: str, data_dir: Path, urls: dict[str, str]) -> Settings:
    if name == "sqlite":
        return Settings(data_dir=data_dir)
    return Settings(data_dir=data_dir, database_url=urls[name],
                    vector_store="pgvector" if name == "pgvector" else "qdrant")


def copy_embedding_cache(source: Settings, target: Settings) -> None:
    """The first ingest's vectors, for the next: the same vectors, without embedding again."""
    target.data.embedding_cache_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(source.data.embedding_cache_path) as src, \
            sqlite3.connect(target.data.embedding_cache_path) as dst:
        src.backup(dst)


def ingest(services: Services, sources: list[SourceConfig], name: str) -> dict:
    started = time.perf_counter()
    reports = [run_source(services.pipeline, s, trigger="bench") for s in sources]
    for r in reports:
        if r.status not in ("succeeded", "partial"):
            raise SystemExit(f"bench: the {name} ingest of {r.source} {r.status}: {r.message}")
    seconds = time.perf_counter() - started
    progress(f"  {name}: " + "; ".join(r.summary() for r in reports))
    return {"seconds": round(seconds, 1),
            "documents": sum(r.counts.seen for r in reports),
            "chunks": sum(r.counts.chunks_written for r in reports),
            "chunks_embedded": sum(r.counts.chunks_embedded for r in reports)}


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def in_process(deployed: dict[str, Services], questions: list[str]) -> dict:
    """Search latency per deployment, new questions and cached vectors, rotated per question;
    then sequential extractive answers."""
    anyone = Identity.anonymous()
    names = list(deployed)
    for services in deployed.values():  # warm-up: first calls load what they lazily load
        for q in questions[:5]:
            services.search.search(q, anyone, top_k=10)
    new: dict[str, list[float]] = {n: [] for n in names}
    cached: dict[str, list[float]] = {n: [] for n in names}
    for i, q in enumerate(questions[5:]):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            services = deployed[n]
            forget_query_vectors(services)
            new[n].append(timed(lambda s=services, q=q: s.search.search(q, anyone, top_k=10)))
        for n in order:
            services = deployed[n]
            cached[n].append(timed(lambda s=services, q=q: s.search.search(q, anyone, top_k=10)))
    answers: dict[str, list[float]] = {n: [] for n in names}
    abstained: dict[str, int] = dict.fromkeys(names, 0)
    for i, q in enumerate(questions[5:5 + ANSWERS_IN_PROCESS]):
        for n in names[i % len(names):] + names[:i % len(names)]:
            services = deployed[n]
            forget_query_vectors(services)
            started = time.perf_counter()
            answer = services.answers.answer(q, anyone)
            answers[n].append(time.perf_counter() - started)
            abstained[n] += bool(answer.abstained)
    return {n: {"search_new": latency_stats(new[n]), "search_cached": latency_stats(cached[n]),
                "answer": {**latency_stats(answers[n]), "abstained": abstained[n]},
                "answers_per_s": round(len(answers[n]) / sum(answers[n]), 2)}
            for n in names}


# Over HTTP ----------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Questions:
    """Every request a question of its own: the corpus questions, numbered once they repeat."""

    def __init__(self, base: list[str]) -> None:
        self.base = base
        self.n = 0
        self.lock = threading.Lock()

    def next(self) -> str:
        with self.lock:
            n, self.n = self.n, self.n + 1
        q = self.base[n % len(self.base)]
        return q if n < len(self.base) else f"{q} ({n // len(self.base)})"


def request(kind: str, client: httpx.Client, url: str, question: str) -> httpx.Response:
    who = {"X-Citewise-User": f"bench-{uuid.uuid4().hex[:12]}"}
    if kind == "answer":
        return client.post(f"{url}/v1/answer", json={"question": question}, headers=who)
    return client.get(f"{url}/v1/search", params={"q": question, "top_k": 10}, headers=who)


def closed_loop(kind: str, replicas: list[Replica], questions: Questions, concurrency: int,
                seconds: float) -> dict:
    """``concurrency`` clients, each sending its next request when the last one is answered,
    round-robin over the replicas, for ``seconds``."""
    latencies: list[float] = []
    failures: list[str] = []
    abstained: list[bool] = []
    deadline = time.monotonic() + seconds

    def client_loop(i: int) -> None:
        with httpx.Client(timeout=120) as client:
            n = i
            while time.monotonic() < deadline:
                url = replicas[n % len(replicas)].url
                n += 1
                started = time.perf_counter()
                resp = request(kind, client, url, questions.next())
                if resp.status_code == 200:
                    latencies.append(time.perf_counter() - started)
                    if kind == "answer":  # an abstention is cheaper: say how many there were
                        abstained.append(bool(resp.json().get("abstained")))
                else:
                    failures.append(f"{resp.status_code} {resp.text[:200]}")

    pids = [r.pid for r in replicas]
    cpu_before = {p: cpu_seconds(p) for p in pids}
    client_cpu = time.process_time()
    started = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"bench: {len(failures)} {kind} requests failed, e.g. {failures[0]}")
    return {"requests": len(latencies), "per_s": round(len(latencies) / wall, 2),
            "abstained": sum(abstained), **latency_stats(latencies),
            "server_cpu_per_wall": {str(p): round((cpu_seconds(p) - cpu_before[p]) / wall, 2)
                                    for p in pids},
            "client_cpu_per_wall": round((time.process_time() - client_cpu) / wall, 2),
            # How busy the machine was: with other work running it rises well above 4.
            "load_avg_1m_after": (load_average() or [None])[0]}


def sequential_search(replica: Replica, questions: Questions) -> dict:
    asked = [questions.next() for _ in range(HTTP_SEQUENTIAL)]
    samples: dict[str, list[float]] = {"new": [], "cached": []}
    with httpx.Client(timeout=60) as client:
        for q in asked[:5]:
            request("search", client, replica.url, q)
        for label in ("new", "cached"):  # the same questions again: their vectors are cached
            for q in asked:
                started = time.perf_counter()
                resp = request("search", client, replica.url, q)
                resp.raise_for_status()
                samples[label].append(time.perf_counter() - started)
    return {label: latency_stats(s) for label, s in samples.items()}


def over_http(name: str, replicas: list[Replica], base: list[str], concurrency: int,
              seconds: float) -> dict:
    questions = Questions(base)
    progress(f"http {name}: sequential search, then {concurrency} clients for {seconds:.0f} s "
             "of answers and of searches")
    result = {"replicas": len(replicas),
              "sequential_search": sequential_search(replicas[0], questions)}
    for kind in ("answer", "search"):
        closed_loop(kind, replicas, questions, concurrency, 3.0)  # warm-up
        result[kind] = closed_loop(kind, replicas, questions, concurrency, seconds)
        progress(f"  {kind}: {result[kind]['per_s']}/s, p50 {result[kind]['p50_ms']} ms")
    result["rss_mib"] = [rss_mib(r.pid) for r in replicas]
    return result


# Report -------------------------------------------------------------------------------------
def markdown(r: dict) -> str:
    m, ip, http = r["machine"], r["in_process"], r["http"]
    base = ip["sqlite"]
    lines = [
        "# Beyond one machine: the PostgreSQL catalog and replicas",
        "",
        f"{r['timestamp']}, commit `{r['git_commit']}`, {m['cpu_count']} CPUs "
        f"({m['cpus_usable']} usable), torch threads {m.get('torch_threads')}, load average "
        f"{r['load_avg_start']} at start (`bench/bench_cluster.py`). Corpora: "
        f"{', '.join(r['corpora'])} ({r['ingest']['sqlite']['documents']} documents, "
        f"{r['ingest']['sqlite']['chunks']} chunks). PostgreSQL 16 + pgvector 0.6.2 on "
        "loopback (pgserver, fsync off as the tests run it).",
        "",
        "## Search and answers in process, per deployment",
        "",
        "New question: its vector computed (the model). Cached vector: the same question again, "
        "its vector from the search service's cache, so what remains is the vector search and "
        "the catalog. Extractive answers, one at a time.",
        "",
        "| deployment | search p50 / p95 ms (new question) | search p50 / p95 ms (cached "
        "vector) | p50 vs SQLite (cached) | answers/s | answer p50 / p95 ms | abstained |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, label in DEPLOYMENTS.items():
        d = ip[name]
        delta = d["search_cached"]["p50_ms"] - base["search_cached"]["p50_ms"]
        lines.append(
            f"| {label} | {d['search_new']['p50_ms']} / {d['search_new']['p95_ms']} | "
            f"{d['search_cached']['p50_ms']} / {d['search_cached']['p95_ms']} | "
            f"{'-' if name == 'sqlite' else f'{delta:+.2f} ms'} | {d['answers_per_s']} | "
            f"{d['answer']['p50_ms']} / {d['answer']['p95_ms']} | "
            f"{d['answer']['abstained']} of {d['answer']['n']} |")
    lines += [
        "",
        f"Target: the PostgreSQL catalog adds at most 2 ms p50 per search. Measured (cached "
        f"vector, same vector index): {r['catalog_overhead_p50_ms']:+.2f} ms.",
        "",
        "## Over HTTP: one process, one replica, two replicas",
        "",
        f"{r['concurrency']} clients for {r['seconds']:.0f} s per row, round-robin over the "
        "replicas; each request a question of its own, from a person of their own (rate limits "
        "on, none reached); the answer cache off. "
        "Server CPU is each process's CPU seconds per wall second (2.0 = both cores); the "
        "clients share the same cores (their CPU share is given). The load average after each "
        "loop shows how busy the machine was: this benchmark alone drives it to 2-4 (each "
        "replica's model threads, PostgreSQL's backends, the clients).",
        "",
        "| deployment | replicas | answers/s (abstained) | answer p50 / p95 ms | searches/s | "
        "search p50 / p95 ms | server CPU (answers) | client CPU | RSS per replica MiB | one "
        "client's search p50 (new / cached) ms | load after (answers / searches) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for h in http.values():
        a, s, seq = h["answer"], h["search"], h["sequential_search"]
        lines.append(
            f"| {h['label']} | {h['replicas']} | {a['per_s']} ({a['abstained']} of "
            f"{a['requests']}) | {a['p50_ms']} / {a['p95_ms']} "
            f"| {s['per_s']} | {s['p50_ms']} / {s['p95_ms']} | "
            f"{' + '.join(str(v) for v in a['server_cpu_per_wall'].values())} | "
            f"{a['client_cpu_per_wall']} | {', '.join(str(x) for x in h['rss_mib'])} | "
            f"{seq['new']['p50_ms']} / {seq['cached']['p50_ms']} | "
            f"{a['load_avg_1m_after']} / {s['load_avg_1m_after']} |")
    one, two, new = http["pgvector-1"], http["pgvector-2"], http["pgvector-1-new"]
    cpu_one = sum(one["answer"]["server_cpu_per_wall"].values())
    cpu_two = sum(two["answer"]["server_cpu_per_wall"].values())
    lines += [
        "",
        f"A new replica (empty embedding cache) answered {new['answer']['per_s']}/s against "
        f"{one['answer']['per_s']}/s once its cache holds the corpus's passages: the extractive "
        "answerer embeds each passage it weighs through the replica's own cache, so until a "
        "replica has seen them its answers run the model for each (searches embed only the "
        "question).",
        "",
        f"Two replicas / one, on the same {m['cpu_count']} CPUs: answers "
        f"{two['answer']['per_s'] / one['answer']['per_s']:.2f}x, searches "
        f"{two['search']['per_s'] / one['search']['per_s']:.2f}x. Under answers, one replica "
        f"used {cpu_one:.2f} CPU-seconds per second and two used {cpu_two:.2f} together, the "
        f"clients {two['answer']['client_cpu_per_wall']:.2f} more: a second replica on the "
        "same cores shares them with the first, so what it adds here is availability (and "
        "whatever the first left idle), not a second machine's throughput. Replicas add up "
        "when each has cores of its own.",
    ]
    return "\n".join(lines) + "\n"


# Main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpora", default=",".join(DEFAULT_CORPORA))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    names = [n for n in args.corpora.split(",") if n]
    if not all((CORPORA / n).is_dir() for n in names):
        print(f"bench_cluster: skipped, the corpora {names} are not all in {CORPORA}; "
              "nothing written", file=sys.stderr)
        return 0
    from tests.postgres_server import remove, start_or_skip_reason

    server = start_or_skip_reason()
    if isinstance(server, str):
        print(f"bench_cluster: skipped: {server}; nothing written", file=sys.stderr)
        return 0
    load_at_start = load_average()
    if load_at_start and load_at_start[0] > 0.5:
        progress(f"warning: load average {load_at_start[0]} at start; other work skews figures")
    begun = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="citewise-bench-cluster-") as tmp:
            results = run(Path(tmp), server, names, args)
    finally:
        remove(server)
    results.update(timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
                   git_commit=git_commit(), machine=machine(), load_avg_start=load_at_start,
                   load_avg_end=load_average(), corpora={n: corpus_size(CORPORA / n)
                                                         for n in names},
                   concurrency=args.concurrency, seconds=args.seconds,
                   total_seconds=round(time.perf_counter() - begun))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.out / "cluster.md").write_text(text)
    print(text)
    return 0


def run(tmp: Path, server, names: list[str], args: argparse.Namespace) -> dict:
    urls = {n: server.create_database() for n in ("postgres", "pgvector")}
    sources = [SourceConfig(name=n, type="folder", path=str(CORPORA / n), readers=["public"])
               for n in names]
    settings = {n: deployment_settings(n, tmp / n / "data", urls) for n in DEPLOYMENTS}
    deployed: dict[str, Services] = {}
    ingested: dict[str, dict] = {}
    try:
        for n in DEPLOYMENTS:
            if n != "sqlite":
                copy_embedding_cache(settings["sqlite"], settings[n])
            progress(f"ingest into {DEPLOYMENTS[n]}")
            deployed[n] = build_services(settings[n])
            deployed[n].dense.warm_up()
            ingested[n] = ingest(deployed[n], sources, n)
        questions = build_queries(deployed["sqlite"], sources, args.queries + 5)
        progress(f"in process: {len(questions) - 5} questions per deployment, rotated")
        measured = in_process(deployed, questions)
    finally:
        for services in deployed.values():
            services.close()
    overhead = round(measured["postgres"]["search_cached"]["p50_ms"]
                     - measured["sqlite"]["search_cached"]["p50_ms"], 2)

    http: dict[str, dict] = {}
    # A replica's embedding cache is its own data folder's: a new replica starts with none, and
    # the extractive answerer embeds every passage it weighs through it (the vectors the index
    # holds are not read back), so a new replica pays the model for each passage once. "warm":
    # its data folder starts with the ingest's cache, as one that has served for a while has.
    plans = [("sqlite-1", "SQLite, embedded Qdrant (its own folder: cache warm)", None, 1, True),
             ("pgvector-1-new", "PostgreSQL + pgvector, new replica (cache empty)",
              urls["pgvector"], 1, False),
             ("pgvector-1", "PostgreSQL + pgvector, cache warm", urls["pgvector"], 1, True),
             ("pgvector-2", "PostgreSQL + pgvector, cache warm", urls["pgvector"], 2, True)]
    for key, label, url, count, warm in plans:
        cluster = Cluster(tmp / f"http-{key}", ClusterConfig(url, extra=dict(SERVER_ENV)))
        try:
            if url is None:  # the ingested data folder, served by one process
                replicas = [cluster.replica("sqlite", CITEWISE_DATA_DIR=str(tmp / "sqlite" /
                                                                           "data"))]
            else:
                replicas = [cluster.replica(f"replica-{i}") for i in range(count)]
                for r in replicas if warm else []:
                    copy_embedding_cache(settings["pgvector"],
                                         Settings(data_dir=r.cwd / "data"))
            cluster.start_together(replicas)
            http[key] = {"label": label, **over_http(key, replicas, questions[5:],
                                                     args.concurrency, args.seconds)}
        finally:
            cluster.close()
    return {"ingest": ingested, "in_process": measured, "catalog_overhead_p50_ms": overhead,
            "http": http}


if __name__ == "__main__":
    sys.exit(main())
