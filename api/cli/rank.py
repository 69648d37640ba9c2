"""`citewise rank train`: the learned second stage of search, trained on labelled questions."""

from __future__ import annotations

import json
import textwrap
import time

import click

from citewise.api.cli.base import Context, cli, fail
from citewise.api.cli.evaluate import _in_process
from citewise.errors import CitewiseError


@cli.group()
def rank() -> None:
    """The learned ranking stage: a small model that re-scores search's best fused chunks."""


@rank.command(
    "train",
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise --config bench/corpora.toml rank train --qa bench/golden/shared-corpora.jsonl
          citewise rank train --qa golden.jsonl --qa feedback-golden.jsonl
          citewise rank train --qa golden.jsonl --dry-run        cross-validate, write nothing

        Each --qa file is a golden set (JSON Lines, as `citewise eval --qa` reads). Only its
        rows with "split": "tune", "train", "feedback" or "dev" ("dev2"...: bench/golden's
        development sets) are trained on; test rows (and rows
        without a split, which count as test) are left out and counted, and a blind set
        (a file named *blind*) is refused: what measures the ranking must never teach it.
        `citewise feedback export --golden FILE` writes what people said of answers as
        feedback rows.

        For every question, its best --candidates fused chunks come from the real search
        path over this data folder's index (the learned stage left out), with the features
        the stage computes at search time: dense and BM25 scores and ranks, the question's
        terms in the body, title, heading and path, exact phrases and alert names, the
        question's kind against the section's, the kind of document, freshness and
        feedback counts. A chunk of a relevant document is labelled 1, and 2 when it holds
        one of the question's must_contain_any strings.

        The questions are split into --folds folds (each question in one); a model trained
        on the others ranks each fold, and NDCG@10 and hit@1 over documents are printed
        beside the fused order's. The model then trained on every question is written to
        --out (default: CITEWISE_RANK_MODEL_FILE, else rank-model.json in the data folder),
        which `citewise serve` and every command read at start. Remove the file (or set
        CITEWISE_RANK_LEARNED=false) and search is the fused ranking alone.

        Measure before adopting: `citewise eval --qa GOLDEN` with CITEWISE_RANK_LEARNED=false
        and without, test split and blind set reported apart (docs/quality.md).
        """
    ),
)
@click.option("--qa", "qa_files", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="A golden set to learn from (repeat for several).")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Where to write the model [default: the data folder's rank-model.json].")
@click.option("--candidates", default=50, show_default=True, type=click.IntRange(5, 100),
              help="Fused chunks the stage re-scores per search.")
@click.option("--folds", default=5, show_default=True, type=click.IntRange(2, 20),
              help="Cross-validation folds (grouped by question).")
@click.option("--trees", default=30, show_default=True, type=click.IntRange(1, 2000))
@click.option("--leaves", default=3, show_default=True, type=click.IntRange(2, 255))
@click.option("--learning-rate", default=0.05, show_default=True, type=float)
@click.option("--prior", default=20.0, show_default=True, type=click.FloatRange(0, 100),
              help="Start from the fused order: the fused score's weight in the final score "
                   "(the trees learn corrections to it); 0 learns the order from nothing.")
@click.option("--dry-run", is_flag=True, help="Cross-validate and report; write no model.")
@click.pass_obj
def rank_train(obj: Context, qa_files, out, candidates, folds, trees, leaves, learning_rate,
               prior, dry_run) -> None:
    """Train the learned ranking stage on golden-set questions, cross-validated."""
    from pathlib import Path

    from citewise.api.composition import rank_model_path
    from citewise.api.ranking import training
    from citewise.ingest.progress import TerminalProgress

    params = training.Params(trees=trees, leaves=leaves, learning_rate=learning_rate,
                             prior=prior)
    try:
        chosen = training.load_training_questions(qa_files)
        for why, n in chosen.left_out.items():
            click.echo(f"left out {n} rows: {why}", err=True)
        click.echo(f"training on {len(chosen.questions)} questions from "
                   f"{', '.join(chosen.files)}", err=True)
        with _in_process(obj, "training") as services:
            bar = TerminalProgress("candidates", total=len(chosen.questions), verb="rank")
            started = time.perf_counter()
            groups = training.collect(services.search, chosen.questions, depth=candidates,
                                      progress=bar.documents)
            bar.close()
            took = time.perf_counter() - started
            model_id = services.dense.model_id
        click.echo(f"features of {sum(len(g.rows) for g in groups)} candidates in {took:.1f} s; "
                   f"{sum(g.learnable for g in groups)} of {len(groups)} questions have a "
                   f"relevant document among their {candidates} candidates", err=True)

        def on_fold(f: training.FoldResult) -> None:
            click.echo(f"  fold {f.fold}: {f.questions:>3} questions  NDCG@10 "
                       f"{f.fused['ndcg@10']:.3f} -> {f.learned['ndcg@10']:.3f}  hit@1 "
                       f"{f.fused['hit@1']:.3f} -> {f.learned['hit@1']:.3f}")

        click.echo(f"cross-validation ({folds} folds; fused order -> learned):")
        cv = training.summary(training.cross_validate(groups, params, k=folds,
                                                      candidates=candidates, on_fold=on_fold))
        pooled = cv["all_folds"]
        click.echo(f"  all:    {pooled['questions']:>3} questions  NDCG@10 "
                   f"{pooled['fused']['ndcg@10']:.3f} -> {pooled['learned']['ndcg@10']:.3f}  "
                   f"hit@1 {pooled['fused']['hit@1']:.3f} -> {pooled['learned']['hit@1']:.3f}")
        if dry_run:
            return
        model = training.fit(groups, params, candidates=candidates, trained=training.metadata(
            chosen, groups, params, cv, candidates=candidates, index_model=model_id))
        latency = training.stage_latency(model, groups)
        model.trained["stage_latency"] = latency
        click.echo(f"the stage adds {latency['cold_p50_ms']:.2f} ms at p50 "
                   f"({latency['cold_p95_ms']:.2f} at p95) to a search from a cold cache, "
                   f"{latency['warm_p50_ms']:.2f} ({latency['warm_p95_ms']:.2f}) with its "
                   f"chunks' terms cached ({latency['searches']:.0f} searches)")
        path = Path(out) if out else rank_model_path(obj.settings)
        model.save(path)
    except CitewiseError as e:
        fail(e)
    click.echo(f"wrote {path} ({json.dumps(model.trained['params'])}); it is used from the "
               "next start of citewise serve or any command", err=True)
