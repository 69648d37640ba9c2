"""The evaluation's outputs: a table for the terminal (Markdown, so it pastes into a PR or
docs as is) and a JSON file that the next run's numbers can be compared with."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from citewise.api.evaluation.runner import ConfigResult


def beir_table(results: list[ConfigResult]) -> str:
    rows = [
        "| configuration | what it is | nDCG@10 | Recall@100 | MRR@10 | p50 ms | p95 ms "
        "| p50 ms, deep |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        name = r.config
        if r.is_default:
            name = f"**{name}**" + ("" if name == "default" else " (the default)")
        m = r.metrics
        rows.append(
            f"| {name} | {r.description} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | "
            f"{m['mrr@10']:.4f} | {r.p50_ms:.1f} | {r.p95_ms:.1f} | {r.deep_p50_ms:.1f} |"
        )
    return "\n".join(rows)


LATENCY_NOTE = (
    "p50/p95 ms: one search for a first page of 10 chunks, as `/v1/search` serves by default; "
    "p50 ms, deep: the search of `depth` chunks that the metrics are computed from. Both "
    "exclude embedding the query (the same for every configuration)."
)


def qa_table(summary: dict) -> str:
    rows = ["| measure | value |", "| --- | ---: |"]
    for key, value in summary.items():
        if isinstance(value, float):
            rows.append(f"| {key} | {value:.3f} |")
        elif isinstance(value, int):
            rows.append(f"| {key} | {value} |")
    return "\n".join(rows)


def environment() -> dict:
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def write_json(path: Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**payload, "environment": environment()}, indent=2) + "\n")
