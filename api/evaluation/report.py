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


ANSWER_MEASURES = (
    ("answerable", "answerable questions"),
    ("unanswerable", "unanswerable questions"),
    ("key_fact_share", "key fact in the answer"),
    ("citation_precision", "citations relevant"),
    ("first_citation_relevant", "first citation relevant"),
    ("answered_share", "answerable answered"),
    ("abstained_share", "unanswerable abstained"),
    ("p50_ms", "p50 ms"),
    ("p95_ms", "p95 ms"),
)


def qa_table(answers: dict) -> str:
    """Answer measures, overall and per split (tune: what thresholds were set on; test: the
    rest)."""
    splits = list((answers.get("by_split") or {}).items())
    head = "| measure | all |" + "".join(f" {name} |" for name, _ in splits)
    rows = [head, "| --- | ---: |" + " ---: |" * len(splits)]
    for key, label in ANSWER_MEASURES:
        values = [answers.get(key)] + [part.get(key) for _, part in splits]
        cells = [f"{v:.3f}" if isinstance(v, float) and not key.endswith("_ms") else
                 f"{v:.0f}" if isinstance(v, float) else str(v) for v in values]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
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


def followups_table(result: dict) -> str:
    """Second turns answered as asked and rewritten to stand alone."""
    names = {"cites_relevant": "cites a relevant document", "first_relevant":
             "first citation relevant", "key_fact": "key fact in the answer",
             "abstained": "abstained"}
    lines = [f"Follow-ups: the second turn of {result['cases']} two-turn conversations", "",
             "| | as asked | rewritten |", "|---|---:|---:|"]
    for field, name in names.items():
        lines.append(f"| {name} | {result['as_asked'][field]:.3f} | "
                     f"{result['rewritten'][field]:.3f} |")
    return "\n".join(lines)
