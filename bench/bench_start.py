"""Start-up: how soon a fresh `citewise serve` answers, and how long a one-off `citewise ask` takes.

Every figure comes from a fresh process, as an operator (or Kubernetes) sees it:

* serve -> /healthz 200: the port is bound and the process answers its liveness probe;
* serve -> /readyz 200: everything is loaded (only where the checkout has a readiness route);
* serve -> first search: `GET /v1/search` answered 200, asked as soon as the port accepts;
* serve -> first answer: `POST /v1/answer` answered 200 (extractive, the default), likewise;
* `citewise ask "..."`: the whole CLI call, over the same already-ingested data folder, with no
  server running (so the CLI loads the model itself);
* `citewise --help`: the CLI's own import cost.

Each server is started anew for each of search and answer (a warm second request would hide
the cost of the first). The clock starts just before the process is spawned.

``--checkout`` runs another checkout's code (its .venv) over the same data folder, so that
"before" (a worktree of main) and "after" are measured in one session on the same data; each
run is kept in the results under its ``--label`` with its commit and load averages.

    .venv/bin/citewise ingest --all            # the demo knowledge, as `make run` does
    .venv/bin/python bench/bench_start.py --label after
    .venv/bin/python bench/bench_start.py --label before --checkout ../wt-main-copy
    # -> bench/results/start.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "what do I do when CheckoutAPIHighLatencyP99 fires?"
SEARCH = "redis failover"
DEADLINE_S = 120.0  # a start that takes longer than this is a failure, not a figure
OUT = ROOT / "bench" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def commit_of(checkout: Path) -> str:
    out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True)
    # The results this script writes do not make the code measured "uncommitted".
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain",
                            "--untracked-files=no", "--", ".", ":!bench/results"],
                           capture_output=True, text=True).stdout
    return out.stdout.strip() + ("+uncommitted" if dirty.strip() else "")


class Server:
    """`citewise serve` of ``checkout`` in a fresh process; stopped with SIGTERM (as systemd
    and Kubernetes do), so that the next start finds the embedded index unlocked."""

    def __init__(self, checkout: Path, config: Path, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.gettempdir()) / f"bench-start-serve-{self.port}.log"
        self._log = self.log.open("w")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(checkout / ".venv" / "bin" / "citewise"), "--config", str(config),
             "--data-dir", str(data_dir), "serve", "--port", str(self.port)],
            cwd=checkout, stdout=self._log, stderr=subprocess.STDOUT, env=_env())

    def since_start(self) -> float:
        return time.perf_counter() - self.started

    def first_ok(self, send) -> float:
        """Seconds from the spawn to the first 200 of ``send(client)``, retrying while the port
        is closed or the server says it is starting (503)."""
        with httpx.Client(base_url=self.url, timeout=DEADLINE_S) as client:
            while self.since_start() < DEADLINE_S:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"citewise serve exited ({self.proc.returncode}); see "
                                       f"{self.log}")
                try:
                    resp = send(client)
                except httpx.TransportError:
                    time.sleep(0.02)
                    continue
                if resp.status_code == 200:
                    return self.since_start()
                if resp.status_code not in (404, 503):
                    raise RuntimeError(f"{resp.status_code}: {resp.text[:300]}")
                if resp.status_code == 404:  # a checkout without that route
                    return float("nan")
                time.sleep(0.02)
        raise RuntimeError(f"no 200 within {DEADLINE_S:.0f} s; see {self.log}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        self.log.unlink(missing_ok=True)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.pop("CITEWISE_URL", None)
    return env


def serve_once(checkout: Path, config: Path, data_dir: Path, target: str) -> dict[str, float]:
    server = Server(checkout, config, data_dir)
    try:
        bound = server.first_ok(lambda c: c.get("/healthz"))
        out = {"healthz_s": bound}
        if target == "search":
            out["search_s"] = server.first_ok(
                lambda c: c.get("/v1/search", params={"q": SEARCH, "top_k": 5}))
        else:
            out["answer_s"] = server.first_ok(
                lambda c: c.post("/v1/answer", json={"question": QUESTION}))
        out["readyz_s"] = server.first_ok(lambda c: c.get("/readyz"))
        return out
    finally:
        server.stop()


def cli_once(checkout: Path, config: Path, data_dir: Path, args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [str(checkout / ".venv" / "bin" / "citewise"), "--config", str(config),
         "--data-dir", str(data_dir), *args],
        cwd=checkout, capture_output=True, text=True, env=_env())
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"citewise {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stderr[-2000:]}")
    return took


def same_answers(config: Path, data_dir: Path, golden: Path) -> dict:
    """Every golden-set question answered twice in one process over the same data: first with
    the questions and answer sentences embedded by the model's numpy forward pass (what a
    one-off `citewise ask` and a starting server use), then by torch (loaded by the warm-up):
    the answers and their citations must be the same. The answer cache is off, so the second
    round computes its answers."""
    sys.path.insert(0, str(ROOT))
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings
    from citewise.index.dense import _models
    from citewise.types import Identity

    questions = [json.loads(line)["question"] for line in golden.read_text().splitlines()
                 if line.strip()]
    services = build_services(Settings.load(config, data_dir=data_dir, answer_cache=False))
    try:
        def round_() -> list[dict]:
            out = []
            for q in questions:
                a = services.answers.answer(q, Identity(None, ())).model_dump()
                out.append({"answer": a["answer"], "abstained": a["abstained"],
                            "citations": [(c["document_id"], c.get("start_line"),
                                           c.get("heading")) for c in a["citations"]]})
            return out

        assert services.dense.model_path not in _models, "torch loaded the model already"
        light = round_()
        services.dense.warm_up()
        full = round_()
    finally:
        services.close()
    differ = [q for q, a, b in zip(questions, light, full, strict=True) if a != b]
    return {"questions": len(questions), "same": len(questions) - len(differ),
            "differ": differ}


# Where a start's time goes: each step timed in a fresh interpreter of the checkout's .venv,
# after the imports it stands on (the ``setup``), so each figure is that step's own cost.
STEPS = (
    ("import the CLI (`citewise.api.cli`)", "", "import citewise.api.cli"),
    ("import the composition root (services)", "import citewise.api.cli",
     "import citewise.api.composition"),
    ("import the FastAPI app (routes, MCP)", "import citewise.api.composition",
     "import citewise.api.app"),
    ("build the services (stores, Qdrant edge open, vocabulary, ranking model)",
     "from citewise.api.composition import build_services\n"
     "from citewise.api.settings import Settings\n"
     "s = Settings.load(CONFIG, data_dir=DATA)",
     "services = build_services(s)"),
    ("import torch", "", "import torch"),
    ("import sentence-transformers (after torch)", "import torch", "import sentence_transformers"),
    ("load the model into sentence-transformers (after the imports)",
     "import sentence_transformers\nfrom citewise.index.dense import packaged_model_path",
     "sentence_transformers.SentenceTransformer(str(packaged_model_path()), device='cpu')"),
    ("load the numpy forward pass (`index/bert_numpy.py`) and embed a question",
     "from citewise.index.dense import packaged_model_path\nimport numpy",
     "from citewise.index import bert_numpy\nbert_numpy.load(packaged_model_path())"
     ".encode(['warm up'])"),
    ("the English word list, through spaCy (imports thinc, and torch)", "",
     "from citewise.language import _english_words_via_spacy as f\nf()"),
    ("the English word list, from spaCy's lookups file", "",
     "from citewise.language import _english_words as f\nf()"),
    ("import the parsers (unstructured) and parse two documents", "import citewise.api.cli",
     "from citewise.ingest.parse import warm_up\nwarm_up()"),
)


def breakdown(checkout: Path, config: Path, data_dir: Path) -> list[dict]:
    python = checkout / ".venv" / "bin" / "python"
    out = []
    for name, setup, step in STEPS:
        code = (f"CONFIG, DATA = {str(config)!r}, {str(data_dir)!r}\n{setup}\n"
                "import time\nt = time.perf_counter()\n"
                f"{step}\nprint(time.perf_counter() - t)")
        done = subprocess.run([str(python), "-c", code], cwd=checkout, capture_output=True,
                              text=True, env=_env())
        took = float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
        out.append({"step": name, "seconds": None if took is None else round(took, 2)})
        print(f"  {name}: " + ("n/a" if took is None else f"{took:.2f} s"), flush=True)
    return out


def summary(samples: list[float]) -> dict:
    good = [s for s in samples if s == s]  # NaN: the route does not exist in that checkout
    if not good:
        return {"median_s": None, "min_s": None, "max_s": None, "runs": []}
    return {"median_s": round(statistics.median(good), 2), "min_s": round(min(good), 2),
            "max_s": round(max(good), 2), "runs": [round(s, 2) for s in good]}


def measure(checkout: Path, config: Path, data_dir: Path, reps: int) -> dict:
    load_start = os.getloadavg()
    bound, ready, search, answer, ask, helps = [], [], [], [], [], []
    for i in range(reps):
        s = serve_once(checkout, config, data_dir, "search")
        a = serve_once(checkout, config, data_dir, "answer")
        bound += [s["healthz_s"], a["healthz_s"]]
        ready += [s["readyz_s"], a["readyz_s"]]
        search.append(s["search_s"])
        answer.append(a["answer_s"])
        ask.append(cli_once(checkout, config, data_dir, ["ask", QUESTION]))
        helps.append(cli_once(checkout, config, data_dir, ["--help"]))
        print(f"  rep {i + 1}/{reps}: healthz {s['healthz_s']:.2f}/{a['healthz_s']:.2f} s, "
              f"search {s['search_s']:.2f} s, answer {a['answer_s']:.2f} s, "
              f"ask {ask[-1]:.2f} s, --help {helps[-1]:.2f} s", flush=True)
    return {
        "commit": commit_of(checkout), "checkout": str(checkout), "reps": reps,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_at_start": [round(x, 2) for x in load_start],
        "load_at_end": [round(x, 2) for x in os.getloadavg()],
        "serve_to_healthz": summary(bound), "serve_to_readyz": summary(ready),
        "serve_to_first_search": summary(search), "serve_to_first_answer": summary(answer),
        "ask": summary(ask), "help": summary(helps),
    }


ROWS = (("serve -> /healthz 200 (bound)", "serve_to_healthz"),
        ("serve -> /readyz 200 (asked after the first search or answer)", "serve_to_readyz"),
        ("serve -> first `GET /v1/search` 200", "serve_to_first_search"),
        ("serve -> first `POST /v1/answer` 200 (extractive)", "serve_to_first_answer"),
        ("`citewise ask` (one-off CLI call)", "ask"),
        ("`citewise --help`", "help"))
TARGETS = {"serve_to_first_answer": 5.0, "ask": 3.0}


def write_results(result: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "start.json").write_text(json.dumps(result, indent=2) + "\n")
    runs = result["runs"]
    labels = [label for label in ("before", "after") if label in runs] + \
        [label for label in runs if label not in ("before", "after")]

    def cell(r: dict | None) -> str:
        if r is None or r["median_s"] is None:
            return "n/a"
        return f"{r['median_s']:.2f} ({r['min_s']:.2f}-{r['max_s']:.2f})"

    md = [
        "# Start-up: time to first answer after `citewise serve`, and a one-off `citewise ask`",
        "",
        f"`bench/bench_start.py` on {result['machine']}. **The machine was shared** (other "
        "helpers' benchmarks and builds ran at the same time): read the load averages beside "
        "each run. Data: the demo knowledge ingested as `make run` does "
        f"(`citewise ingest --all`: {result['data']}). Each figure is the median of fresh "
        "processes (min-max in brackets), in seconds from the spawn; search and answer each "
        "from a server of their own.",
        "",
        "| | " + " | ".join(f"{label} (`{runs[label]['commit']}`)" for label in labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for name, key in ROWS:
        target = f" (target <= {TARGETS[key]:.0f} s)" if key in TARGETS else ""
        md.append(f"| {name}{target} | " + " | ".join(cell(runs[label].get(key))
                                                      for label in labels) + " |")
    md += ["", "| run | commit | when | repetitions | load average at start | at end |",
           "|---|---|---|---:|---|---|"]
    for label in labels:
        r = runs[label]
        md.append(f"| {label} | `{r['commit']}` | {r['when']} | {r['reps']} | "
                  f"{r['load_at_start']} | {r['load_at_end']} |")
    md += ["", "Commands:", "", "```", *result["commands"], "```", ""]
    if result.get("breakdown"):
        b = result["breakdown"]
        md += ["", f"Where the time goes (each step alone, in a fresh interpreter, after the "
               f"imports it stands on; commit `{b['commit']}`, load average "
               f"{b['load_at_start']}):", "", "| step | seconds |", "|---|---:|"]
        md += [f"| {r['step']} | {'n/a' if r['seconds'] is None else r['seconds']} |"
               for r in b["steps"]]
        md.append("")
    check = result.get("answers_check")
    if check:
        md += [f"Answers unchanged: the {check['questions']} questions of "
               "`demo/golden-set.jsonl`, answered in one process with questions and answer "
               "sentences embedded by the model's numpy forward pass (`index/bert_numpy.py`, "
               "what `citewise ask` and a starting server use) and then by torch: "
               f"{check['same']} of {check['questions']} answers and citation lists "
               "identical" + (f"; differing: {check['differ']}" if check["differ"] else "")
               + ".", ""]
    if result.get("notes"):
        md += [result["notes"], ""]
    (OUT / "start.md").write_text("\n".join(md))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after",
                        help="Name of this run in the results (before, after, ...).")
    parser.add_argument("--checkout", type=Path, default=ROOT,
                        help="Checkout whose .venv/bin/citewise is measured (default: this one).")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data",
                        help="An ingested data folder (default: ./data, after "
                             "`citewise ingest --all`).")
    parser.add_argument("--config", type=Path, default=ROOT / "citewise.toml")
    parser.add_argument("--reps", type=int, default=3, help="Fresh processes per figure.")
    parser.add_argument("--no-answers-check", action="store_true",
                        help="Skip the breakdown of where the time goes and answering the "
                             "golden set with numpy's and torch's vectors (both run only for "
                             "this checkout).")
    args = parser.parse_args()
    data_dir = args.data_dir.resolve()
    if not (data_dir / "catalog.db").exists():
        sys.exit(f"{data_dir} holds no catalog: run `.venv/bin/citewise ingest --all` first "
                 "(the demo knowledge, as `make run` does), or pass --data-dir")
    if (data_dir / "server.json").exists():
        sys.exit(f"{data_dir}/server.json exists: a server holds this data folder; stop it")
    print(f"{args.label}: {args.checkout} over {data_dir}", flush=True)
    run = measure(args.checkout.resolve(), args.config.resolve(), data_dir, args.reps)
    previous = json.loads((OUT / "start.json").read_text()) if (OUT / "start.json").exists() \
        else {}
    runs = {**previous.get("runs", {}), args.label: run}
    command = (f".venv/bin/python bench/bench_start.py --label {args.label} --reps {args.reps}"
               + ("" if args.checkout.resolve() == ROOT else f" --checkout {args.checkout}"))
    commands = [c for c in previous.get("commands", []) if f"--label {args.label} " not in c]
    counts = _data_counts(data_dir)
    check = previous.get("answers_check")
    steps = previous.get("breakdown")
    if not args.no_answers_check and args.checkout.resolve() == ROOT:
        print("where the time goes:", flush=True)
        steps = {"commit": commit_of(ROOT), "load_at_start": [round(x, 2)
                                                              for x in os.getloadavg()],
                 "steps": breakdown(ROOT, args.config.resolve(), data_dir)}
        check = same_answers(args.config.resolve(), data_dir, ROOT / "demo" / "golden-set.jsonl")
        print(f"answers: {check['same']} of {check['questions']} identical", flush=True)
    write_results({
        "machine": f"{platform.machine()}, Python {platform.python_version()}, "
                   f"{os.cpu_count()} cores",
        "data": counts, "runs": runs, "commands": [*commands, command],
        "notes": previous.get("notes", ""), "answers_check": check, "breakdown": steps,
    })
    print(f"-> {OUT / 'start.md'}")


def _data_counts(data_dir: Path) -> str:
    import sqlite3

    with sqlite3.connect(data_dir / "catalog.db") as conn:
        docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return f"{docs} documents, {chunks} chunks"


if __name__ == "__main__":
    main()
