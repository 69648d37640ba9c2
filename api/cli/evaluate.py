"""`citewise eval`: retrieval and answer quality, on BEIR data or a golden set."""

from __future__ import annotations

import textwrap
from contextlib import contextmanager
from pathlib import Path

import click

from citewise.api.cli.base import (
    Context,
    cli,
    fail,
)
from citewise.errors import CitewiseError


@contextmanager
def _in_process(obj: Context, what: str):
    """The services, opened here: evaluations answer in-process, never through a server."""
    obj.local_data()
    with obj.services() as (services, remote):
        if remote is not None and not remote.operator:
            raise CitewiseError(f"CITEWISE_URL is set ({remote.url}); {what} runs in-process, "
                                "on this machine's index",
                                hint="unset CITEWISE_URL to evaluate the index here")
        if remote is not None:
            raise CitewiseError(
                f"the server at {remote.url} holds the index; {what} runs in-process",
                hint="stop `citewise serve` for the evaluation, or use a Qdrant server")
        yield services


@cli.command(
    "eval",
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise eval ../shared/bench/scifact --split train
          citewise eval ../shared/bench/scifact --configs dense,bm25,rrf,default,convex:0.3
          citewise eval ../shared/bench/scifact --limit 100          a quick look
          citewise eval --qa demo/golden-set.jsonl                   your own golden set
          citewise eval --qa golden.jsonl --out results/golden.json   keep the figures

        A BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv. Its corpus
        is ingested by the normal pipeline into an isolated folder (<data dir>/eval/, named
        by a hash of the corpus and the index settings, so a second run reuses it), then
        every query of the split runs through the same search the API serves, once per
        configuration. Chunks are pooled into documents by their best chunk, and scored as
        trec_eval does: nDCG@10, Recall@100, MRR@10, with p50/p95 search latency (query
        embedding excluded: it is the same for every configuration).

        \b
        Configurations (--configs, comma-separated):
          dense            dense vectors only
          bm25             BM25 only
          default          the hybrid search as configured (CITEWISE_SEARCH_FUSION...)
          rrf[:W[:K]]      reciprocal rank fusion, dense weight W (0.5), constant K (60)
          convex[:W]       weighted sum of scores divided by each list's best, dense weight W

        A golden set (--qa) is JSON Lines: {"question": "...", "relevant":
        ["<source>/<path>", ...], "answerable": true}. It runs against the index in the data
        folder (ingest first), reporting document hit@k and MRR for search, and for answers
        the share of citations that point at a relevant document, and whether answerable
        questions are answered and the others abstain.

        Follow-ups (--followups) are JSON Lines of two-turn cases: {"turns": [first,
        follow-up], "relevant": [...], "must_contain_any": [...]}; the follow-up is answered
        as asked and rewritten to stand alone, and both are scored.

        Tune on a train or dev split only; report the test split.
        """
    ),
)
@click.argument("dataset", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--split", help="Qrels split to run [default: the only one, else test].")
@click.option("--configs", default="dense,bm25,rrf,default", show_default=True,
              help="Retrieval configurations to compare (see below).")
@click.option("--data-dir", "eval_dir", type=click.Path(file_okay=False),
              help="Folder for benchmark indexes and their embedding cache "
                   "[default: <data dir>/eval].")
@click.option("--qa", "qa_file", type=click.Path(exists=True, dir_okay=False),
              help="Golden set (JSON Lines) to run against the data folder's index.")
@click.option("--followups", "followups_file", type=click.Path(exists=True, dir_okay=False),
              help="Two-turn conversations (JSON Lines) to run against the data folder's index.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write the figures to this JSON file, and the table next to it (.md).")
@click.option("--limit", type=int, help="Only the first N queries (a quick look).")
@click.option("--depth", default=300, show_default=True,
              help="Chunks retrieved per query (pooled into documents for Recall@100).")
@click.pass_obj
def eval_(obj: Context, dataset, split, configs, eval_dir, qa_file, followups_file, out, limit,
          depth) -> None:
    """Measure retrieval and answer quality: a BEIR benchmark, or your golden set."""
    from citewise.api.evaluation.runner import parse_config

    if not dataset and not qa_file and not followups_file:
        raise click.UsageError("pass a BEIR dataset folder, --qa GOLDEN_SET, --followups "
                               "CASES, or several")
    try:
        chosen = [parse_config(c) for c in configs.split(",") if c.strip()]
    except CitewiseError as e:
        raise click.UsageError(f"{e.message} ({e.hint})") from None
    from citewise.api.evaluation.commands import run_beir, run_golden_set

    def echo(line: str) -> None:
        click.echo(line, err=True)

    payload: dict = {}
    tables: list[str] = []
    if dataset and not eval_dir:
        obj.local_data()  # the benchmark's indexes go under the data folder
    try:
        if dataset:
            payload["beir"], table = run_beir(obj.settings, dataset, split, chosen,
                                              eval_dir=eval_dir, limit=limit, depth=depth,
                                              echo=echo)
            click.echo(f"\n{table}")
            tables.append(table)
        if followups_file:
            from citewise.api.evaluation.followups import evaluate_followups, load_followups
            from citewise.api.evaluation.report import followups_table

            with _in_process(obj, "follow-ups") as services:
                payload["followups"] = evaluate_followups(services.answers,
                                                          load_followups(followups_file))
            table = followups_table(payload["followups"])
            click.echo(f"\n{table}")
            tables.append(table)
        if qa_file:
            with _in_process(obj, "the golden set") as services:
                payload["golden_set"], table = run_golden_set(services, qa_file, chosen,
                                                              echo=echo)
            click.echo(f"\n{table}")
            tables.append(table)
    except CitewiseError as e:
        fail(e)
    if out:
        from citewise.api.evaluation.report import write_json

        write_json(Path(out), payload)
        Path(out).with_suffix(".md").write_text("\n\n".join(tables) + "\n")
        click.echo(f"wrote {out} and {Path(out).with_suffix('.md')}", err=True)
