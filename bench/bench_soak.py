"""A soak: mixed search, answer and streamed-answer traffic from 16 clients for half an hour
while forced ingests of the shared corpora run back to back, against one `citewise serve`.

What it checks, in ``bench/results/soak.{md,json}``:

* no errors: every request is answered 200 (a refusal, a 5xx or a broken stream counts);
* p95 latency of each kind of request, per window and over the soak, against the same
  traffic measured idle (no ingest) just before, after a minute of it unmeasured to warm the
  server's caches: within 2x is the target;
* the server's resident memory sampled every few seconds, and its slope after warm-up
  (the first fifth of the soak) by least squares, in MiB per hour: flat is the target. The
  anonymous part (the heap, where a leak shows) and the file-backed part (the index's mapped
  segments, which the kernel takes back under pressure) are reported apart;
* the ingest runs that finished meanwhile. Each re-reads and re-writes every document
  (``force``: the CPU of a large nightly run); the versions already live are rewritten in
  place, and before each run ``--edits`` documents of a copy of one corpus (``edited``, in the
  data folder) get a line more, so that each run also replaces that many versions, as a
  nightly does for what changed, and searches meet those swaps committing.

The data folder is the scale bench's (``--copies`` copies of the five corpora of
``../shared/corpora``; 1 by default: 18.8k chunks), ingested first from the embedding cache.
Clients are threads on loopback; streamed answers read the whole event stream.

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--warmup-seconds 60] [--idle-seconds 60]
        [--copies 1] [--edits 200]
    # -> bench/results/soak.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import (  # noqa: E402
    CORPORA,
    _ingest,
    _pct,
    _questions,
    _rss,
    corpora_arguments,
    prepare,
    start_server,
    wait_loaded,
)

CLIENTS = 16
# The mix of one client's requests: most people search, some ask, some watch an answer stream.
MIX = (("search", 0.6), ("answer", 0.25), ("stream", 0.15))
RSS_EVERY = 5.0  # seconds between memory samples
WINDOW = 300.0  # seconds per row of the latency table
EDITED = "openshift-runbooks"  # the corpus whose copy the ingest loop edits between runs


class Traffic:
    """``CLIENTS`` threads sending the mix until ``stop`` is set; every request recorded as
    (when, kind, milliseconds, ok)."""

    def __init__(self, url: str, questions: list[str]) -> None:
        self.url = url
        self.questions = questions
        self.stop = threading.Event()
        self.records: list[tuple[float, str, float, bool]] = []
        self.failures: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                         for i in range(CLIENTS)]

    def start(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(timeout=120)

    def _client(self, worker: int) -> None:
        rng = random.Random(worker)
        kinds, weights = zip(*MIX, strict=True)
        with httpx.Client(base_url=self.url, timeout=120) as http:
            while not self.stop.is_set():
                kind = rng.choices(kinds, weights)[0]
                question = rng.choice(self.questions)
                started = time.perf_counter()
                ok, why = self._one(http, kind, question)
                ms = (time.perf_counter() - started) * 1000
                with self._lock:
                    self.records.append((time.time(), kind, ms, ok))
                    if not ok:
                        self.failures[f"{kind}: {why}"] += 1

    @staticmethod
    def _one(http: httpx.Client, kind: str, question: str) -> tuple[bool, str]:
        try:
            if kind == "search":
                r = http.get("/v1/search", params={"q": question, "top_k": 10})
                return r.status_code == 200, str(r.status_code)
            if kind == "answer":
                r = http.post("/v1/answer", json={"question": question},
                              headers={"Cache-Control": "no-cache"})
                return r.status_code == 200, str(r.status_code)
            with http.stream("POST", "/v1/answer", json={"question": question, "stream": True},
                             headers={"Cache-Control": "no-cache"}) as r:
                if r.status_code != 200:
                    return False, str(r.status_code)
                events = [line for line in r.iter_lines() if line.startswith("event:")]
            # A stream that ends without its closing event was cut off; ``error`` is a failure.
            last = events[-1].partition(":")[2].strip() if events else ""
            return last == "done", f"stream ended with {last or 'nothing'}"
        except httpx.HTTPError as e:
            return False, type(e).__name__


def _edited_source(work: Path, config: Path) -> Path:
    """A copy of one corpus in the data folder, added to ``config`` as the source ``edited``:
    the one the ingest loop edits (the shared corpora are read in place, never written)."""
    folder = work / "edited"
    if not folder.exists():
        shutil.copytree(CORPORA / EDITED, folder)
    with config.open("a") as f:
        f.write(f'\n[[sources]]\nname = "edited"\ntype = "folder"\npath = "{folder}"\n'
                'readers = ["public"]\ninclude = ["*.md"]\n')
    return folder


def _edit(folder: Path, count: int, round_no: int) -> int:
    """A line more at the end of ``count`` of ``folder``'s documents (the next ones in turn):
    a new version of each for the next run. How many were edited."""
    files = sorted(folder.rglob("*.md"))
    if not files or count <= 0:
        return 0
    chosen = [files[(round_no * count + i) % len(files)] for i in range(min(count, len(files)))]
    for path in chosen:
        with path.open("a") as f:
            f.write(f"\nReviewed during soak round {round_no}.\n")
    return len(chosen)


def _ingest_loop(url: str, stop: threading.Event, runs: list[dict], edited: Path,
                 edits: int) -> None:
    """Forced ingests of every source, one after the other, until ``stop``; before each,
    ``edits`` documents of ``edited`` are changed."""
    with httpx.Client(base_url=url, timeout=60) as http:
        round_no = 0
        while not stop.is_set():
            round_no += 1
            changed = _edit(edited, edits, round_no)
            started = time.time()
            try:
                r = http.post("/v1/ingest/jobs", json={"all": True, "force": True})
                if r.status_code != 202:
                    runs.append({"status": f"refused {r.status_code}", "detail": r.text[:300],
                                 "request_failed": True})
                    stop.wait(10)
                    continue
                job = r.json()
                while not stop.is_set():
                    job = http.get(f"/v1/ingest/jobs/{job['id']}").json()
                    if job["status"] in ("done", "failed"):
                        break
                    stop.wait(2)
            except httpx.HTTPError as e:  # reported with the runs, and tried again
                runs.append({"status": f"request failed: {type(e).__name__}: {e}",
                             "request_failed": True})
                stop.wait(10)
                continue
            runs.append({"status": job["status"], "seconds": round(time.time() - started, 1),
                         "finished_at": time.time(),
                         "sources": len(job.get("reports") or []), "edited": changed,
                         "message": job.get("message")})


# The server's own counts read from GET /metrics around each phase: searches, the searches it
# asked of the index again because a document swap committed while they ran (what an ingest
# costs them besides CPU), and the seconds the ingest paused for requests (CITEWISE_INGEST_YIELD).
_COUNTERS = {"searches": "citewise_search_seconds_count",
             "asked_again_for_a_swap": 'citewise_search_retries_total{reason="swap"}',
             "ingest_paused_seconds": "citewise_ingest_paused_seconds_total"}


def _counters(url: str) -> dict[str, float]:
    """The counters of ``_COUNTERS`` (absent ones, as an older server lacks: left out)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    values = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        for key, metric in _COUNTERS.items():
            if name == metric:
                values[key] = float(value)
    return values


def _difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 1) for k, v in after.items()}


# The parts of resident memory each sample reads (``bench_scale._rss``).
MEMORY_PARTS = ("rss_mib", "anon_mib", "file_mib")


def _memory(pid: int, stop: threading.Event, samples: dict[str, list[tuple[float, float]]]
            ) -> None:
    while not stop.wait(RSS_EVERY):
        read = _rss(pid)
        now = time.time()
        for part in MEMORY_PARTS:
            if read.get(part) is not None:
                samples.setdefault(part, []).append((now, float(read[part])))


def _nearest(samples: list[tuple[float, float]], when: float) -> float | None:
    """The memory sample taken nearest ``when``."""
    return min(samples, key=lambda s: abs(s[0] - when))[1] if samples else None


def slope_per_hour(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) in MiB per hour."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(m for _, m in samples) / n
    var = sum((t - mx) ** 2 for t, _ in samples)
    if var == 0:
        return None
    cov = sum((t - mx) * (m - my) for t, m in samples)
    return round(cov / var * 3600, 1)


def _summary(records: list[tuple[float, str, float, bool]]) -> dict:
    out: dict = {}
    for kind, _ in MIX:
        ms = [r[2] for r in records if r[1] == kind and r[3]]
        out[kind] = {**_pct(ms), "errors": sum(1 for r in records if r[1] == kind and not r[3])}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0,
                        help="the same traffic without ingest first: the latency to compare")
    parser.add_argument("--warmup-seconds", type=float, default=60.0,
                        help="the same traffic before that, not measured: a fresh server's "
                        "first minute (cold caches) is no baseline")
    parser.add_argument("--edits", type=int, default=200,
                        help="documents changed before each ingest run (of a copy of "
                        f"{EDITED}): the versions each run replaces")
    corpora_arguments(parser, copies=1)
    args = parser.parse_args()
    if not CORPORA.is_dir():
        print(f"skipping: {CORPORA} is absent (the shared corpora)", file=sys.stderr)
        return
    work, config = prepare(args.work, args.copies, args.embedding_cache, "citewise-soak-")
    edited = _edited_source(work, config)
    print(f"ingesting {args.copies} copies of the corpora into {work}", file=sys.stderr)
    ingest = _ingest(config)
    questions = _questions(ingest.pop("questions"), 400)

    server, url = start_server(config, work)
    load_start = os.getloadavg()
    results: dict = {"ingest_before": ingest, "warmup_seconds": args.warmup_seconds}
    try:
        wait_loaded(url)
        if args.warmup_seconds > 0:
            print(f"warm-up traffic for {args.warmup_seconds:.0f} s", file=sys.stderr)
            warmup = Traffic(url, questions).start()
            time.sleep(args.warmup_seconds)
            warmup.join()
        print(f"idle traffic for {args.idle_seconds:.0f} s", file=sys.stderr)
        counted = _counters(url)
        idle = Traffic(url, questions).start()
        time.sleep(args.idle_seconds)
        idle.join()
        results["idle"] = _summary(idle.records)
        results["idle_failures"] = dict(idle.failures)
        results["idle_counters"] = _difference(_counters(url), counted)

        print(f"soak for {args.minutes:.0f} min with ingests running", file=sys.stderr)
        stop = threading.Event()
        runs: list[dict] = []
        memory: dict[str, list[tuple[float, float]]] = {}
        helpers = [threading.Thread(target=_ingest_loop,
                                    args=(url, stop, runs, edited, args.edits), daemon=True),
                   threading.Thread(target=_memory, args=(server.pid, stop, memory),
                                    daemon=True)]
        started = time.time()
        counted = _counters(url)
        soak = Traffic(url, questions).start()
        for h in helpers:
            h.start()
        stop.wait(args.minutes * 60)
        stop.set()
        soak.join()
        for h in helpers:
            h.join(timeout=600)
        results["soak"] = _summary(soak.records)
        results["soak_failures"] = dict(soak.failures)
        results["soak_counters"] = _difference(_counters(url), counted)
        results["windows"] = [
            {"from_minute": round((w - started) / 60, 1),
             **_summary([r for r in soak.records if w <= r[0] < w + WINDOW])}
            for w in [started + i * WINDOW for i in range(int(args.minutes * 60 // WINDOW) + 1)]
            if any(w <= r[0] < w + WINDOW for r in soak.records)]
        warm = started + args.minutes * 60 / 5
        rss = memory.get("rss_mib", [])
        # Runs that ended (the one still going when the soak stopped is stamped with its end).
        ended = [x for x in runs if x.get("finished_at") and x["status"] in ("done", "failed")]
        results["memory"] = {
            "samples": len(rss),
            "first_mib": rss[0][1] if rss else None,
            "last_mib": rss[-1][1] if rss else None,
            "peak_mib": max((m for _, m in rss), default=None),
            "slope_mib_per_hour_after_warmup": slope_per_hour([s for s in rss if s[0] >= warm]),
            # The same moment of each ingest cycle, compared like for like: a run's end.
            "at_each_run_end_mib": [_nearest(rss, x["finished_at"]) for x in ended],
            "series": [(round(t - started), m) for t, m in rss],
            # The heap and the mapped files apart: a leak is the first.
            "parts": {part: {
                "first_mib": series[0][1], "last_mib": series[-1][1],
                "slope_mib_per_hour_after_warmup": slope_per_hour(
                    [s for s in series if s[0] >= warm]),
                "at_each_run_end_mib": [_nearest(series, x["finished_at"]) for x in ended],
                "series": [(round(t - started), m) for t, m in series],
            } for part, series in memory.items() if part != "rss_mib" and series},
        }
        results["ingest_runs"] = runs
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    results["p95_ratio"] = {
        kind: round(results["soak"][kind]["p95"] / results["idle"][kind]["p95"], 2)
        for kind, _ in MIX
        if results["soak"][kind].get("p95") and results["idle"][kind].get("p95")}
    # The ingest loop's own requests (start a job, poll it) are requests to the same server:
    # one that fails counts as an error as the clients' do.
    results["ingest_errors"] = [x["status"] for x in runs if x.get("request_failed")]
    results["errors"] = sum(v["errors"] for v in results["soak"].values()) + \
        sum(v["errors"] for v in results["idle"].values()) + len(results["ingest_errors"])
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "load_at_start": load_start,
                          "load_at_end": os.getloadavg()}
    results["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["minutes"] = args.minutes
    results["copies"] = args.copies
    results["edits"] = args.edits
    results["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(results, indent=2))
    (args.out / "soak.md").write_text(_markdown(results))
    print(_markdown(results))


def _counted(phase: str, counters: dict[str, float] | None) -> str:
    """What the server counted during one phase, from its metrics."""
    if not counters:
        return f"The server's counts during the {phase} phase: not read."
    searches = counters.get("searches") or 0
    again = counters.get("asked_again_for_a_swap")
    share = f" ({again / searches:.1%})" if again is not None and searches else ""
    return (f"The server's counts during the {phase} phase: {searches:.0f} searches, "
            f"{again if again is not None else 'not counted'} of them asked of the index again "
            f"because a document swap committed meanwhile{share}; the ingest paused "
            f"{counters.get('ingest_paused_seconds', 'not counted')} s for requests.")


def _markdown(r: dict) -> str:
    done = [x for x in r["ingest_runs"] if x["status"] == "done"]
    mem = r["memory"]
    lines = [f"# Soak, {r['when']}", "",
             f"{CLIENTS} clients on loopback ({', '.join(f'{k} {w:.0%}' for k, w in MIX)}) "
             f"for {r['minutes']:g} minutes against `citewise serve` over "
             f"{r['ingest_before']['chunks']} chunks ({r['copies']} copies of the five shared "
             f"corpora and a copy of {EDITED} as `edited`), while forced ingests of every "
             f"source ran back to back, {r.get('edits', 0)} documents of `edited` changed before "
             f"each: {len(done)} "
             f"finished ({', '.join(str(x['seconds']) + ' s' for x in done[:6])}"
             f"{', ...' if len(done) > 6 else ''}). First, the same traffic idle (no "
             f"ingest), after {r.get('warmup_seconds', 0):g} s of it unmeasured. "
             f"Commit `{r['commit']}`. {r['machine']['cpus']} CPUs, load average "
             f"{r['machine']['load_at_start']} at start, {r['machine']['load_at_end']} at the "
             "end.", "",
             f"    .venv/bin/python bench/bench_soak.py --minutes {r['minutes']:g} "
             f"--copies {r['copies']} --edits {r.get('edits', 0)}", "",
             f"**Errors: {r['errors']}**"
             + (f" (clients: {r['soak_failures']} {r['idle_failures']}; the ingest loop's "
                f"requests: {r.get('ingest_errors', [])})" if r["errors"] else "") + ".",
             "", "| Request | Idle p50 / p95 ms | Soak p50 / p95 ms | p95 soak / idle | Soak "
             "requests |", "|---|---|---|---|---|"]
    for kind, _ in MIX:
        i, s = r["idle"][kind], r["soak"][kind]
        lines.append(f"| {kind} | {i.get('p50')} / {i.get('p95')} | {s.get('p50')} / "
                     f"{s.get('p95')} | {r['p95_ratio'].get(kind)} | {s.get('n', 0)} |")
    lines += ["", "Per five minutes (p95 ms):", "",
              "| From minute | " + " | ".join(k for k, _ in MIX) + " |",
              "|---|" + "---|" * len(MIX)]
    for w in r["windows"]:
        lines.append(f"| {w['from_minute']} | "
                     + " | ".join(str(w[k].get("p95")) for k, _ in MIX) + " |")
    lines += ["", *(_counted(phase, r.get(f"{phase}_counters")) for phase in ("idle", "soak"))]
    lines += ["", f"Server memory: {mem['first_mib']} MiB at the first sample, "
              f"{mem['last_mib']} at the last, peak {mem['peak_mib']}; slope after warm-up "
              f"(the first fifth) {mem['slope_mib_per_hour_after_warmup']} MiB per hour "
              f"({mem['samples']} samples, every {RSS_EVERY:g} s); at the end of each ingest "
              f"run: {', '.join(f'{m:g}' for m in mem.get('at_each_run_end_mib') or [])} MiB.",
              ""]
    named = {"anon_mib": "anonymous (the heap)", "file_mib": "file-backed (mapped files)"}
    for part, m in (mem.get("parts") or {}).items():
        lines += [f"Of it, {named.get(part, part)}: {m['first_mib']:g} MiB at the first sample, "
                  f"{m['last_mib']:g} at the last; slope after warm-up "
                  f"{m['slope_mib_per_hour_after_warmup'] or 'n/a'} MiB per hour; at the end "
                  f"of each ingest run: "
                  f"{', '.join(f'{x:g}' for x in m['at_each_run_end_mib']) or 'none ended'} MiB.",
                  ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
