"""citewise at 100k chunks: search and answer latency, throughput under concurrent clients, and
the server's memory, over HTTP against a real `citewise serve`.

The knowledge base is the five corpora of ``../shared/corpora`` (18.8k chunks) ingested
``--copies`` times as separate sources (6 by default: 113k chunks). Copy 0 is public; copy k is
readable by ``group:team-k`` only, so the permission filter inside the index query has real
work. The copies repeat the texts, so the embedding cache embeds each text once (give
``--embedding-cache`` a cache that holds them, such as ``data/corpora/embeddings.db`` after
``make eval``, and nothing is embedded at all).

Then, against the server (a subprocess, as in production; clients are threads with their own
HTTP connection, on loopback):

1. one client, 200 unique questions: ``GET /v1/search`` latency, query embedding included
   (the server's query-vector cache never sees a question twice);
2. 16 clients searching for ``--seconds``, over the same 400 questions (most of them asked
   before, as dashboards, bots and colleagues repeat theirs: their vectors come from the
   server's cache): searches per second and latency;
3. 16 clients again, every question one nobody asked before (each embedded by the server):
   what a stream of new questions costs;
4. 4 clients asking for extractive answers (``POST /v1/answer``, the semantic cache bypassed
   with ``Cache-Control: no-cache``): answers per second and latency;
5. the server's resident memory (VmRSS, and its peak VmHWM) after each phase.

The server runs with the default settings: at 113k points, past ``CITEWISE_EDGE_HNSW_FROM``
(100,000), dense queries walk the HNSW graph the ingest built at its end (int8, rescored), which
bench/results/compare-hnsw-113k.md measured against exact search on the same data; the results
say which search the server used.

    .venv/bin/python bench/bench_scale.py [--copies 6] [--seconds 30]
    # -> bench/results/scale.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from citewise.api.composition import build_services  # noqa: E402
from citewise.api.evaluation.runner import percentile  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.ingest.jobs import run_source  # noqa: E402
from tests.live import free_port  # noqa: E402

CORPORA = ROOT.parent / "shared" / "corpora"
NAMES = ["gitlab-com-runbooks", "govuk-developer-docs", "openshift-runbooks",
         "prometheus-operator-runbooks", "sourcegraph-handbook"]


def _config(folder: Path, copies: int) -> Path:
    lines = ['[settings]\ndata_dir = "data"\n']
    for k in range(copies):
        readers = '["public"]' if k == 0 else f'["group:team-{k}"]'
        for name in NAMES:
            lines.append(f'[[sources]]\nname = "{name}-v{k}"\ntype = "folder"\n'
                         f'path = "{CORPORA / name}"\nreaders = {readers}\ninclude = ["*.md"]\n')
    path = folder / "citewise.toml"
    path.write_text("\n".join(lines))
    return path


def _ingest(config: Path) -> dict:
    settings = Settings.load(config)
    services = build_services(settings)
    started = time.perf_counter()
    embedded = 0
    try:
        for source in settings.sources:
            report = run_source(services.pipeline, source, trigger="bench")
            embedded += report.counts.chunks_embedded
            print(f"  {report.summary()}", file=sys.stderr)
        chunks = services.catalog.count_chunks()
        titles = _headings(settings.data.catalog_path)
    finally:
        services.close()
    return {"seconds": round(time.perf_counter() - started, 1), "chunks": chunks,
            "embedded": embedded, "questions": titles}


def _headings(catalog: Path) -> list[str]:
    """Headings of the ingested chunks, what the benchmarks' questions are made of; read from
    the database file beside the services (a bench may; the services may not)."""
    with closing(sqlite3.connect(catalog)) as stored:
        return [r[0] for r in stored.execute(
            "SELECT DISTINCT heading FROM chunks WHERE length(heading) > 12 LIMIT 6000")]


def ingested_config(work: Path) -> Path | None:
    """The config of a folder `bench_scale.py --work` ingested, or None after saying why a
    bench that needs one is skipped."""
    config = work / "citewise.toml"
    if config.exists():
        return config
    print(f"skipping: {config} is absent (run bench/bench_scale.py --work {work})",
          file=sys.stderr)
    return None


def stored_questions(work: Path, n: int = 400) -> list[str]:
    """The scale bench's questions over a data folder it ingested."""
    return _questions(_headings(work / "data" / "catalog.db"), n)


_FORMS = ["how do I {}", "what to do about {}", "{}", "where is {} documented"]


def _questions(headings: list[str], n: int) -> list[str]:
    rng = random.Random(7)
    picked = rng.sample(headings, min(n, len(headings)))
    return [rng.choice(_FORMS).format(h.split(" > ")[-1].lower()) for h in picked]


def _unseen_questions(headings: list[str], asked: list[str]) -> list[str]:
    """Every question the headings make in every form, less those in ``asked``, shuffled."""
    before = set(asked)
    every = dict.fromkeys(form.format(h.split(" > ")[-1].lower())
                          for h in headings for form in _FORMS)
    unseen = [q for q in every if q not in before]
    random.Random(11).shuffle(unseen)
    return unseen


class _Unseen:
    """Hands each question out once, to whichever client asks first; None when all are out."""

    def __init__(self, questions: list[str]) -> None:
        self._questions = iter(questions)
        self._lock = threading.Lock()
        self.ran_out = False

    def __call__(self, rng: random.Random) -> str | None:
        with self._lock:
            q = next(self._questions, None)
            self.ran_out = self.ran_out or q is None
            return q


def corpora_arguments(parser: argparse.ArgumentParser, copies: int) -> None:
    """The options every benchmark over copies of the shared corpora takes."""
    parser.add_argument("--copies", type=int, default=copies)
    parser.add_argument("--embedding-cache", type=Path,
                        default=ROOT / "data" / "corpora" / "embeddings.db")
    parser.add_argument("--work", type=Path, help="keep the data folder here (default: temp)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")


def prepare(work: Path | None, copies: int, embedding_cache: Path,
            prefix: str) -> tuple[Path, Path]:
    """The data folder (``work``, or a new temporary one) and its config for ``copies`` copies
    of the corpora, with ``embedding_cache`` copied in when it holds no cache yet (private, as
    citewise makes its data folder)."""
    folder = work or Path(tempfile.mkdtemp(prefix=prefix))
    folder.mkdir(parents=True, exist_ok=True)
    config = _config(folder, copies)
    if embedding_cache.exists() and not (folder / "data" / "embeddings.db").exists():
        (folder / "data").mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(embedding_cache, folder / "data" / "embeddings.db")
        (folder / "data" / "embeddings.db").chmod(0o600)
    return folder, config


def start_server(config: Path, work: Path, *, checkout: Path | None = None,
                 env: dict[str, str] | None = None,
                 **popen: Any) -> tuple[subprocess.Popen[bytes], str]:
    """`citewise serve` on a free loopback port over ``work`` (from ``checkout``'s virtual
    environment, else this interpreter's), with quiet logs and no rate limits: the server
    every benchmark measures, and its URL. Wait for it with ``wait_loaded``."""
    port = free_port()
    citewise = (checkout / ".venv" / "bin" / "citewise" if checkout
                else Path(sys.executable).with_name("citewise"))
    settings = {**os.environ, "CITEWISE_CONFIG_FILE": str(config),
                "CITEWISE_LOG_LEVEL": "WARNING", "CITEWISE_RATE_SEARCH_PER_MINUTE": "0",
                "CITEWISE_RATE_ANSWER_PER_MINUTE": "0", "HF_HUB_OFFLINE": "1", **(env or {})}
    server = subprocess.Popen([str(citewise), "serve", "--port", str(port)], cwd=work,
                              env=settings, **popen)
    return server, f"http://127.0.0.1:{port}"


def wait_loaded(url: str, seconds: float = 600.0) -> None:
    """Until the server has loaded everything: ``/healthz`` answers and no longer says
    ``starting`` (a server binds its port first and loads its parts behind it; measuring
    meanwhile would measure its start-up). A checkout older than that says ``ok`` at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/healthz", timeout=2)
            if r.status_code == 200 and r.json().get("status") != "starting":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the server at {url} did not finish starting in {seconds:.0f} s")


def _rss(pid: int) -> dict:
    """The process's resident memory in MiB, and its parts: ``anon_mib`` (the heap: what a
    leak grows), ``file_mib`` (pages of mapped files, the index's segments among them, which
    the kernel takes back under pressure) and ``shmem_mib``."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            fields[key] = round(int(value.split()[0]) / 1024)
    return {"rss_mib": fields.get("VmRSS"), "peak_rss_mib": fields.get("VmHWM"),
            "anon_mib": fields.get("RssAnon"), "file_mib": fields.get("RssFile"),
            "shmem_mib": fields.get("RssShmem")}


def _pct(values: list[float]) -> dict:
    if not values:
        return {}
    return {"n": len(values), **{f"p{p}": round(percentile(values, p), 1) for p in (50, 95, 99)},
            "mean": round(statistics.fmean(values), 1)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(url: str, clients: int, seconds: float, questions: list[str] | _Unseen,
          answer: bool, headers: dict, server_pid: int | None = None) -> dict:
    """``clients`` threads, each with its own connection, for ``seconds``, each asking a
    random one of ``questions`` (or the next unseen one); with the CPU time the server and the
    load generator (this process) spent meanwhile, per request: on a machine of two cores the
    clients' share is not the server's to use."""
    pick = questions if isinstance(questions, _Unseen) else (
        lambda rng: rng.choice(questions))
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(worker: int) -> None:
        rng = random.Random(worker)
        with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
            while time.perf_counter() < stop:
                q = pick(rng)
                if q is None:
                    return
                t = time.perf_counter()
                if answer:
                    r = http.post("/v1/answer", json={"question": q},
                                  headers={"Cache-Control": "no-cache"})
                else:
                    r = http.get("/v1/search", params={"q": q, "top_k": 10})
                ms = (time.perf_counter() - t) * 1000
                with lock:
                    if r.status_code == 200:
                        latencies.append(ms)
                    else:
                        errors[0] += 1

    started = time.perf_counter()
    cpu_before = (cpu_seconds(server_pid) if server_pid else 0.0, cpu_seconds(os.getpid()))
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    server_cpu = cpu_seconds(server_pid) - cpu_before[0] if server_pid else None
    client_cpu = cpu_seconds(os.getpid()) - cpu_before[1]
    done = max(len(latencies), 1)
    ran_out = isinstance(questions, _Unseen) and questions.ran_out
    return {"clients": clients, **({"ran_out_of_questions": True} if ran_out else {}),
            "seconds": round(wall, 1),
            "per_second": round(len(latencies) / wall, 1), "errors": errors[0],
            "latency_ms": _pct(latencies),
            "cpu_ms_per_request": {
                "server": round(server_cpu * 1000 / done, 2) if server_cpu is not None else None,
                "clients": round(client_cpu * 1000 / done, 2)}}


def search_each(url: str, questions: list[str], headers: dict) -> list[float]:
    """Each question searched once, one after the other: the latency of each, in ms."""
    latencies = []
    with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
        for q in questions:
            t = time.perf_counter()
            http.get("/v1/search", params={"q": q, "top_k": 10}).raise_for_status()
            latencies.append((time.perf_counter() - t) * 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpora_arguments(parser, copies=6)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    if not CORPORA.is_dir():
        print(f"skipping: {CORPORA} is absent (the shared corpora)", file=sys.stderr)
        return
    work, config = prepare(args.work, args.copies, args.embedding_cache, "citewise-scale-")
    load_start = os.getloadavg()
    print(f"ingesting {args.copies} copies of the corpora into {work}", file=sys.stderr)
    ingest = _ingest(config)
    headings = ingest.pop("questions")
    questions = _questions(headings, 400)

    server, url = start_server(config, work)
    try:
        wait_loaded(url)
        results: dict = {"ingest": ingest, "memory": {"after_start": _rss(server.pid)}}
        headers = {"X-Citewise-Groups": "team-1"}  # public + one restricted copy
        search_each(url, questions[:5], headers)  # warm-up: first requests, first batch
        results["search_one_client_ms"] = _pct(search_each(url, questions[5:205], headers))
        print(f"one client: {results['search_one_client_ms']}", file=sys.stderr)
        results["search_16_clients"] = _load(url, 16, args.seconds, questions, False, headers,
                                             server.pid)
        print(f"16 clients: {results['search_16_clients']}", file=sys.stderr)
        results["search_16_clients_unseen"] = _load(
            url, 16, args.seconds, _Unseen(_unseen_questions(headings, questions)), False,
            headers, server.pid)
        print(f"16 clients, unseen questions: {results['search_16_clients_unseen']}",
              file=sys.stderr)
        results["memory"]["after_search"] = _rss(server.pid)
        results["answer_4_clients"] = _load(url, 4, args.seconds, questions, True, headers,
                                            server.pid)
        print(f"4 answer clients: {results['answer_4_clients']}", file=sys.stderr)
        results["memory"]["after_answers"] = _rss(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "load_at_start": load_start,
                          "load_at_end": os.getloadavg()}
    results["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["copies"] = args.copies
    index = Settings.load(config).index
    results["edge"] = {"hnsw_from": index.edge_hnsw_from, "m": index.edge_hnsw_m,
                       "ef": index.edge_hnsw_ef, "quantization": index.edge_quantization}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    results["commit"] = commit
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(results, indent=2))
    (args.out / "scale.md").write_text(_markdown(results))
    print(_markdown(results))


def _dense(r: dict) -> str:
    """How the server searched dense vectors (the setting as it read it, the size ingested)."""
    edge = r.get("edge")
    if not edge:
        return "dense search as configured"
    if r["ingest"]["chunks"] < edge["hnsw_from"]:
        return f"exact dense search (under CITEWISE_EDGE_HNSW_FROM={edge['hnsw_from']})"
    return (f"dense search on the HNSW graph (from {edge['hnsw_from']} points; m={edge['m']}, "
            f"ef={edge['ef']}, {edge['quantization']})")


def cpu_ms(load: dict, *parts: str) -> str:
    """CPU ms per request of ``parts`` ("server", "clients") of a ``_load`` result."""
    cpu = load.get("cpu_ms_per_request")  # absent from results written before it was measured
    return " / ".join(str(cpu[p]) for p in parts) if cpu else "not measured"


def _searches(label: str, load: dict | None) -> str:
    if load is None:  # results written before the phase existed
        return f"| {label} | not measured |"
    short = " (ran out of questions)" if load.get("ran_out_of_questions") else ""
    return (f"| {label}, {load['seconds']} s{short} | {load['per_second']} searches/s, p50 "
            f"{load['latency_ms'].get('p50')} / p95 {load['latency_ms'].get('p95')} ms, "
            f"{load['errors']} errors |")


def _markdown(r: dict) -> str:
    s1, s16, a4 = r["search_one_client_ms"], r["search_16_clients"], r["answer_4_clients"]
    mem = r["memory"]
    return "\n".join([
        f"# citewise at scale, {r['when']}", "",
        f"{r['ingest']['chunks']} chunks ({r['copies']} copies of the five shared corpora; "
        f"copy 0 public, the others one group each), embedded index, {_dense(r)}. Commit "
        f"`{r['commit']}`. Machine: {r['machine']['cpus']} CPUs, load average "
        f"{[round(x, 2) for x in r['machine']['load_at_start']]} at start, "
        f"{[round(x, 2) for x in r['machine']['load_at_end']]} at the end. The server is "
        "`citewise serve` in its own process; clients are threads on loopback.", "",
        "| Measure | Result |", "|---|---|",
        f"| Ingest | {r['ingest']['seconds']} s, {r['ingest']['embedded']} chunks embedded "
        "(the rest from the embedding cache) |",
        f"| Search, 1 client (query embedding included) | p50 {s1['p50']} / p95 {s1['p95']} / "
        f"p99 {s1['p99']} ms |",
        _searches("Search, 16 clients, 400 questions asked again and again", s16),
        _searches("Search, 16 clients, every question new", r.get("search_16_clients_unseen")),
        f"| Extractive answers, 4 clients, {a4['seconds']} s | {a4['per_second']} answers/s, "
        f"p50 {a4['latency_ms'].get('p50')} / p95 {a4['latency_ms'].get('p95')} ms, "
        f"{a4['errors']} errors |",
        f"| CPU ms per request, server / clients | search {cpu_ms(s16, 'server', 'clients')}; "
        f"new questions {cpu_ms(r.get('search_16_clients_unseen') or {}, 'server', 'clients')};"
        f" answer {cpu_ms(a4, 'server', 'clients')} |",
        f"| Server memory | {mem['after_start']['rss_mib']} MiB after start, "
        f"{mem['after_answers']['rss_mib']} MiB after the load (peak "
        f"{mem['after_answers']['peak_rss_mib']} MiB) |",
        "",
    ])


if __name__ == "__main__":
    main()
