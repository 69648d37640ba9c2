"""What ``citewise eval`` does, as functions: a BEIR benchmark, and a golden set.

The CLI parses options and prints; these run the measurement and return ``(figures, table)``:
the figures for the JSON file, the table (Markdown) for the terminal and the ``.md`` file.
``echo`` receives progress lines (the CLI sends them to stderr).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from citewise.api.evaluation.beir import load_dataset
from citewise.api.evaluation.qa import evaluate_answers, evaluate_search, load_golden_set
from citewise.api.evaluation.report import LATENCY_NOTE, beir_table, qa_table
from citewise.api.evaluation.runner import (
    ConfigResult,
    RetrievalConfig,
    index_folder,
    ingest_corpus,
    open_services,
    run_configs,
)
from citewise.api.settings import Settings
from citewise.errors import CitewiseError
from citewise.ingest.progress import TerminalProgress

Echo = Callable[[str], None]


def run_beir(
    settings: Settings,
    dataset: str | Path,
    split: str | None,
    configs: list[RetrievalConfig],
    *,
    eval_dir: str | Path | None = None,
    limit: int | None = None,
    depth: int = 300,
    echo: Echo = print,
) -> tuple[dict, str]:
    """Ingest the corpus into its isolated index (reused when unchanged), run every query."""
    data = load_dataset(dataset, split)
    root = Path(eval_dir) if eval_dir else settings.data_dir / "eval"
    folder = index_folder(root, data, settings)
    echo(f"{data.name} ({data.split}): {len(data.queries)} queries; index in {folder}")
    services = open_services(settings, folder, root)
    try:
        report = ingest_corpus(services, data, progress=TerminalProgress(data.name))
        echo(report.summary())
        if report.status not in ("succeeded", "partial"):
            raise CitewiseError(f"ingesting {data.folder} failed: {report.message}")

        def on_config(r: ConfigResult) -> None:
            m = r.metrics
            echo(f"  {r.config:<14} nDCG@10 {m['ndcg@10']:.4f}  R@100 {m['recall@100']:.4f}  "
                 f"MRR@10 {m['mrr@10']:.4f}  p50 {r.p50_ms:.1f} ms")

        results = run_configs(services, data, configs, depth=depth, limit=limit,
                              on_config=on_config)
    finally:
        services.close()
    table = beir_table(results) + "\n\n" + LATENCY_NOTE
    if results:
        table += (f" Embedding a query took {results[0].query_embedding_p50_ms:.1f} ms (p50) "
                  "on this machine.")
    asked = len(results[0].per_query) if results else 0
    title = f"{data.name}, split {data.split}, {asked} queries"
    figures = {
        "dataset": data.name, "split": data.split, "queries": asked, "depth": depth,
        "index": report.summary(), "configs": [r.to_dict() for r in results],
    }
    return figures, f"{title}\n\n{table}"


def run_golden_set(
    services, qa_file: str | Path, configs: list[RetrievalConfig], *, echo: Echo = print
) -> tuple[dict, str]:
    """Search (per configuration) and answers (as configured) over an ingested index."""
    questions = load_golden_set(qa_file)
    if not services.sources.list_sources():
        raise CitewiseError(
            f"the index in {services.settings.data_dir} is empty",
            hint="run `citewise ingest --all` first (or pass --data-dir)",
        )
    search = [evaluate_search(services.search, questions, c) for c in configs]
    answers = evaluate_answers(services.answers, questions)
    lines = [f"golden set {qa_file}: {len(questions)} questions", "",
             "| configuration | hit@1 | hit@3 | hit@5 | hit@10 | MRR@10 | p50 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in search:
        lines.append(f"| {s['config']} | {s['hit@1']:.3f} | {s['hit@3']:.3f} | {s['hit@5']:.3f}"
                     f" | {s['hit@10']:.3f} | {s['mrr@10']:.3f} | {s['p50_ms']:.1f} |")
        if len(s["by_split"]) > 1:
            for split, f in s["by_split"].items():
                lines.append(f"| {s['config']}, {split} split ({f['questions']}) "
                             f"| {f['hit@1']:.3f} | {f['hit@3']:.3f} | {f['hit@5']:.3f} "
                             f"| {f['hit@10']:.3f} | {f['mrr@10']:.3f} | |")
    table = ("\n".join(lines) + "\n\nAnswers (/v1/answer, default configuration)\n\n"
             + qa_table(answers))
    for p in answers["problems"]:
        echo(f"  answer problem: {json.dumps(p)}")
    figures = {"file": str(qa_file), "questions": len(questions), "search": search,
               "answers": answers}
    return figures, table
