"""An extractive answer alone: `AnswerService.answer` in this process, one at a time, no HTTP,
over a data folder `bench/bench_scale.py --work DIR` ingested; what one answer costs in CPU,
and how much of it is the model.

Three passes over the scale bench's questions, each question asked once per pass, the semantic
answer cache bypassed (as the scale bench's answer clients do):

1. ``new``: questions this process has not answered. Their vectors are embedded first (not
   measured), so the pass measures the answer, including the model's work on the steps and
   sentences it weighs that no earlier answer weighed.
2. ``again``: the same questions again. Every unit's vector is now in the encoder's memory
   (``RECENT_VECTORS``), so this is the answer without the model.
3. the difference of the two, per answer: what embedding the units cost.

As a server does, the model is loaded into torch first (``DenseEncoder.warm_up``), so several
units at once go to torch and a lone one to the numpy forward pass (``LIGHT_UP_TO``).

It measures whichever checkout's ``citewise`` the interpreter imports, so a base checkout's
virtual environment can run this file against the same data folder:

    .venv/bin/python bench/bench_answer_core.py --work /path/scale [--questions 100]
    CITEWISE_EMBEDDING_UNIT_PRECISION=float32 .venv/bin/python bench/bench_answer_core.py ...
    /path/base/.venv/bin/python bench/bench_answer_core.py --work /path/scale --out /tmp/base
    # -> bench/results/answer-core.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import ingested_config, stored_questions  # noqa: E402

import citewise  # noqa: E402
from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.types import Identity  # noqa: E402

CALLER = Identity(user="bench", groups=("team-1",))  # public + one restricted copy


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _pass(services, questions: list[str]) -> dict:
    dense = services.search.dense
    embedded, cpu, wall = dense.embedded_count, _cpu(), time.perf_counter()
    abstained = 0
    for q in questions:
        answer = services.answers.answer(q, CALLER, use_cache=False)
        abstained += answer.abstained
    n = len(questions)
    return {"answers": n, "abstained": abstained,
            "cpu_ms_per_answer": round((_cpu() - cpu) * 1000 / n, 1),
            "wall_ms_per_answer": round((time.perf_counter() - wall) * 1000 / n, 1),
            "texts_embedded_per_answer": round((dense.embedded_count - embedded) / n, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a folder `bench/bench_scale.py --work` ingested")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    config = ingested_config(args.work)
    if config is None:
        return
    services = build_services(Settings.load(config))
    try:
        services.search.dense.warm_up()  # torch, as a server has it
        every = stored_questions(args.work)
        warm, questions = every[-20:], every[:args.questions]
        for q in warm:  # first calls (lazy parsers, the hidden titles), not measured
            services.answers.answer(q, CALLER, use_cache=False)
        for q in questions:
            services.search.query_vector(q)
        load = os.getloadavg()
        new = _pass(services, questions)
        print(f"new: {new}", file=sys.stderr)
        again = _pass(services, questions)
        print(f"again: {again}", file=sys.stderr)
        chunks = services.catalog.count_chunks()
        units = services.search.dense.units
    finally:
        services.close()
    checkout = Path(citewise.__file__).resolve().parents[1]  # the bare package is core/
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                            text=True).stdout.strip()
    result = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit,
              "checkout": str(checkout), "work": str(args.work), "chunks": chunks,
              "cpus": os.cpu_count(), "load_at_start": [round(x, 2) for x in load],
              "load_at_end": [round(x, 2) for x in os.getloadavg()],
              "unit_precision": units, "new": new, "again": again,
              "units_cpu_ms_per_answer": round(new["cpu_ms_per_answer"]
                                               - again["cpu_ms_per_answer"], 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "answer-core.json").write_text(json.dumps(result, indent=2))
    (args.out / "answer-core.md").write_text(_markdown(result, args))
    print(_markdown(result, args))


def _markdown(r: dict, args: argparse.Namespace) -> str:
    new, again = r["new"], r["again"]
    return "\n".join([
        f"# An extractive answer alone, in one process, {r['when']}", "",
        f"`AnswerService.answer` over `{r['work']}` ({r['chunks']} chunks), one answer at a "
        "time, no HTTP, questions already embedded, the semantic cache bypassed, the scale "
        f"bench's caller (public + team-1). Checkout `{r['checkout']}` at `{r['commit']}`, "
        f"{r['cpus']} CPUs, load average {r['load_at_start']} at start, {r['load_at_end']} at "
        "the end. CPU: this process, all its threads (torch uses two). Answer units embedded "
        f"in {r.get('unit_precision', 'float32')} (`CITEWISE_EMBEDDING_UNIT_PRECISION`).", "",
        f"    .venv/bin/python bench/bench_answer_core.py --work {args.work} "
        f"--questions {args.questions}", "",
        "| Pass | Answers (abstained) | CPU ms / answer | Wall ms / answer | "
        "Texts embedded / answer |", "|---|---|---|---|---|",
        f"| new questions | {new['answers']} ({new['abstained']}) | "
        f"{new['cpu_ms_per_answer']} | {new['wall_ms_per_answer']} | "
        f"{new['texts_embedded_per_answer']} |",
        f"| the same again (units' vectors in memory) | {again['answers']} "
        f"({again['abstained']}) | {again['cpu_ms_per_answer']} | "
        f"{again['wall_ms_per_answer']} | {again['texts_embedded_per_answer']} |", "",
        f"Embedding the units an answer weighs: {r['units_cpu_ms_per_answer']} ms of CPU per "
        "answer (the difference of the two passes).", "",
    ])


if __name__ == "__main__":
    main()
