"""What a change bought: two checkouts' servers over the same data, measured turn about.

Each round starts `citewise serve` from one checkout, then from the other, over the same data
folder (one that `bench/bench_scale.py --work FOLDER` ingested; both checkouts must read its
format), and drives each with the scale bench's clients: 16 searching, then 4 asking for
extractive answers. Alternating the two in the same minutes is what makes the comparison fair
on a machine whose load changes; the table gives every round, so the spread is visible.

    git worktree add --detach /tmp/base <commit> && (cd /tmp/base && make setup-test)
    .venv/bin/python bench/bench_compare.py --base /tmp/base --work /tmp/scale \
        --label payloads [--rounds 2] [--seconds 20]
    # -> bench/results/compare-LABEL.{md,json}
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import (  # noqa: E402
    _load,
    cpu_ms,
    search_each,
    start_server,
    stored_questions,
    wait_loaded,
)


def _commit(tree: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,
                          capture_output=True, text=True).stdout.strip()


def measure(tree: Path, work: Path, questions: list[str], seconds: float,
            env_extra: dict[str, str], warm: bool = False) -> dict:
    server, url = start_server(work / "citewise.toml", work, checkout=tree, env=env_extra,
                               stderr=subprocess.DEVNULL)
    headers = {"X-Citewise-Groups": "team-1"}  # public + one restricted copy
    try:
        wait_loaded(url)
        if warm:  # every question searched once: its vector is in the server's cache
            search_each(url, questions, headers)
        load = os.getloadavg()[0]
        search = _load(url, 16, seconds, questions, False, headers, server.pid)
        answer = _load(url, 4, seconds, questions, True, headers, server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return {"load": round(load, 2), "search": search, "answer": answer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the checkout before")
    parser.add_argument("--head", type=Path, default=ROOT, help="the checkout after")
    parser.add_argument("--work", type=Path, required=True,
                        help="a folder `bench/bench_scale.py --work` ingested")
    parser.add_argument("--label", required=True, help="what changed (names the files)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the head's server only (repeatable)")
    parser.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the base's server only (repeatable): with --base "
                        "and --head the same checkout, two settings are compared")
    parser.add_argument("--warm", action="store_true",
                        help="search every question once before measuring, so that no query "
                        "is embedded during it: the request path alone, without the model")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    questions = stored_questions(args.work)
    head_env = dict(kv.split("=", 1) for kv in args.env)
    base_env = dict(kv.split("=", 1) for kv in args.base_env)
    rounds = []
    for i in range(args.rounds):
        for name, tree, extra in (("base", args.base, base_env), ("head", args.head, head_env)):
            r = measure(tree, args.work, questions, args.seconds, extra, args.warm)
            rounds.append({"round": i + 1, "which": name, **r})
            print(f"round {i + 1} {name}: {r['search']['per_second']} searches/s, "
                  f"{r['answer']['per_second']} answers/s (load {r['load']})", file=sys.stderr)
    result = {"label": args.label, "base": _commit(args.base), "head": _commit(args.head),
              "head_env": head_env, "base_env": base_env, "seconds": args.seconds,
              "warm": args.warm, "rounds": rounds,
              "cpus": os.cpu_count(), "work": str(args.work),
              "when": datetime.now(UTC).isoformat(timespec="seconds")}
    for which in ("base", "head"):
        mine = [r for r in rounds if r["which"] == which]
        result[which + "_median"] = {
            "searches_per_second": round(statistics.median(
                r["search"]["per_second"] for r in mine), 1),
            "answers_per_second": round(statistics.median(
                r["answer"]["per_second"] for r in mine), 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"compare-{args.label}.json").write_text(json.dumps(result, indent=2))
    (args.out / f"compare-{args.label}.md").write_text(_markdown(result, args))
    print(_markdown(result, args))


def _markdown(r: dict, args: argparse.Namespace) -> str:
    b, h = r["base_median"], r["head_median"]
    env = " ".join([*(f"--env {k}={v}" for k, v in r["head_env"].items()),
                    *(f"--base-env {k}={v}" for k, v in r.get("base_env", {}).items())])
    lines = [f"# {r['label']}: `{r['base']}` against `{r['head']}`, {r['when']}", "",
             f"`citewise serve` from each checkout in turn over `{r['work']}`, {r['cpus']} CPUs; "
             f"16 clients searching for {r['seconds']:g} s, then 4 asking for extractive "
             "answers (the scale bench's questions and clients, on loopback)."
             + (f" The head's server ran with {r['head_env']}." if r["head_env"] else "")
             + (f" The base's server ran with {r['base_env']}." if r.get("base_env") else "")
             + (" Each server first searched every question once (`--warm`): no question was "
                "embedded while measuring." if r.get("warm") else ""),
             "",
             f"    .venv/bin/python bench/bench_compare.py --base {args.base} "
             f"--head {args.head} --work {args.work}"
             f" --label {r['label']} --rounds {args.rounds} --seconds {args.seconds:g} {env}"
             + (" --warm" if r.get("warm") else ""),
             "", "Server CPU ms: the server's CPU time per request (all its threads).", "",
             "| Round | Checkout | Load (1 min) | Searches/s | p50 / p95 ms | Server CPU ms | "
             "Answers/s | p50 / p95 ms | Server CPU ms | Errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["rounds"]:
        s, a = x["search"], x["answer"]
        lines.append(
            f"| {x['round']} | {x['which']} `{r[x['which']]}` | {x['load']} | "
            f"{s['per_second']} | {s['latency_ms'].get('p50')} / {s['latency_ms'].get('p95')} "
            f"| {cpu_ms(s, 'server')} | {a['per_second']} | {a['latency_ms'].get('p50')} / "
            f"{a['latency_ms'].get('p95')} | {cpu_ms(a, 'server')} | {s['errors'] + a['errors']} |")
    searches = h["searches_per_second"] / b["searches_per_second"]
    answers = h["answers_per_second"] / b["answers_per_second"]
    lines += ["", f"Median: searches/s {b['searches_per_second']} → "
              f"{h['searches_per_second']} ({searches:.2f}×); answers/s "
              f"{b['answers_per_second']} → {h['answers_per_second']} ({answers:.2f}×).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
