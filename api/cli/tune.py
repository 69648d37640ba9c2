"""`citewise tune`: fine-tune the embedding model on pairs mined from this installation's catalog.

The pairs come from ``ingest/tuning/pairs.py`` (and the feedback store, read here: it is the
API layer's), the training from ``ingest/tuning/train.py``. The tuned model is a new folder;
nothing of the live index changes until `citewise reindex` builds one with it.
"""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import click

from citewise.api.cli.base import Context, cli, fail
from citewise.errors import CitewiseError, ConfigError

# The golden sets `make eval` measures, read (questions only) by the leakage guard when they
# are found under the current folder: a repository checkout's own evaluation sets.
DEFAULT_GUARDS = ("bench/golden/shared-corpora.jsonl", "bench/golden/paraphrases.jsonl",
                  "bench/golden/blind.jsonl", "bench/golden/dev.jsonl", "bench/golden/dev2.jsonl",
                  "demo/golden-set.jsonl", "demo/followups.jsonl")


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        What it learns from (pairs of a short text and the passage it should find, read
        from the catalog, i.e. the text this installation indexed, never the sources):
          title -> body start, heading path -> its section, an alert name (CamelCase) -> its
          runbook's meaning and mitigation, a link's text -> the page or section it points
          to, a front-matter summary or service -> its document, a code symbol and its
          docstring -> its definition, and questions whose answers were marked helpful ->
          the passage cited.
        Pairs that hold a golden-set question (or 6 of its words in a row) are dropped: the
        files of --guard, and those of DEFAULT below found under the current folder.
        One document in ten is held out: validation ranks each held-out text's passage among
        all held-out passages (recall@1, recall@10, MRR) every --eval-every steps; the best
        state is kept, and training stops early when it stops improving, or at --minutes.
        With --validate-qa, labelled questions judge instead (better: past a few hundred
        steps the pairs stop predicting how questions are answered): each question's best
        30 search candidates, found once before training, are re-ranked by the model being
        trained, and the state that puts a relevant document's passage highest is kept
        (about a minute a validation for 135 questions on two cores; the held-out pairs
        are then neither trained on nor validated on).
        Only tune, train, dev and feedback rows validate; test rows and blind sets never do.
        Like --guard files, their questions are kept out of the pairs.

        \b
        Where it goes: <data dir>/models/tuned-<UTC time>/ (or --out), the
        sentence-transformers files plus README.md and tuning.json (pairs per kind, dropped
        for leakage, steps, time, peak memory, validation before and after). The live index
        is not touched.

        \b
        How to adopt it (after `citewise eval` says it answers better):
          CITEWISE_EMBEDDING_MODEL_PATH=<the folder> citewise reindex
        then run `citewise serve` with the same setting. Reindex with it unset to go back.

        \b
        Cost: about 10-11 pairs a second on two idle CPU cores at batch 32 (10k pairs in
        15 minutes); measured 1.4 a second on two cores shared with other work; 3.5-4.2 GB
        of memory at batch 32.

        \b
        Examples:
          citewise tune --dry-run --pairs-out pairs.jsonl   mine and write the pairs; no training
          citewise tune --minutes 30                        the default budget
          citewise tune --minutes 5 --out /srv/models/ours
          citewise --config bench/corpora.toml tune --minutes 20 --eval-every 25 \\
              --validate-qa bench/golden/dev.jsonl --validate-qa bench/golden/dev2.jsonl
        """
    ).replace("DEFAULT below", "DEFAULT (" + ", ".join(DEFAULT_GUARDS) + ")"),
)
@click.option("--minutes", type=float, default=30.0, show_default=True,
              help="Time budget for training and validation.")
@click.option("--max-steps", type=int, default=5000, show_default=True,
              help="Step budget (one step is one batch).")
@click.option("--batch-size", type=int, default=32, show_default=True,
              help="Pairs per step; each pair's passage is a wrong answer for the others.")
@click.option("--max-seq-length", type=int, default=128, show_default=True,
              help="Word-pieces per text while training (the model keeps its own for use).")
@click.option("--learning-rate", type=float, default=2e-5, show_default=True)
@click.option("--eval-every", type=int, default=50, show_default=True,
              help="Validate every this many steps.")
@click.option("--patience", type=int, default=4, show_default=True,
              help="Stop after this many validations without improvement.")
@click.option("--per-document", type=int, default=24, show_default=True,
              help="At most this many pairs from one document.")
@click.option("--validation-pairs", type=int, default=500, show_default=True,
              help="At most this many held-out pairs (validation costs time each round).")
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--threads", type=int, default=None,
              help="CPU threads for torch (default: all it finds).")
@click.option("--base", "base", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Model folder to start from (default: the configured model).")
@click.option("--readers", default=None,
              help="Only documents one of these may read (comma-separated, e.g. public): a "
                   "model trained on restricted text carries some of it in its weights.")
@click.option("--guard", "guards", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Another golden set (JSON lines) whose questions must stay out of the pairs.")
@click.option("--validate-qa", "validate_qa", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="A golden set whose tune/dev questions judge the steps instead of the "
                   "held-out pairs (repeat for several).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the tuned model (must not exist).")
@click.option("--pairs-out", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the pairs (JSON lines, with kind and split) for review.")
@click.option("--dry-run", is_flag=True,
              help="Mine the pairs (and write --pairs-out); no training.")
@click.option("--json", "as_json", is_flag=True, help="Print the model card as JSON at the end.")
@click.pass_obj
def tune(obj: Context, minutes: float, max_steps: int, batch_size: int, max_seq_length: int,
         learning_rate: float, eval_every: int, patience: int, per_document: int,
         validation_pairs: int, seed: int, threads: int | None, base: Path | None,
         readers: str | None, guards: tuple[str, ...], validate_qa: tuple[str, ...],
         out: Path | None,
         pairs_out: Path | None, dry_run: bool, as_json: bool) -> None:
    """Fine-tune the embedding model on pairs mined from the catalog, into a new folder."""
    try:
        _tune(obj, locals())
    except CitewiseError as e:
        fail(e)


def _tune(obj: Context, o: dict) -> None:
    from citewise.api.composition import build_blobs, build_stores
    from citewise.index.dense import packaged_model_path
    from citewise.ingest.tuning.leakage import LeakageGuard, questions_in
    from citewise.ingest.tuning.pairs import PairMiner, select
    from citewise.settings import comma_separated

    settings = obj.local_data()
    if settings.embedding.embedding_url and o["base"] is None:
        raise ConfigError("the configured embedding model is an API (CITEWISE_EMBEDDING_URL): "
                          "`citewise tune` trains a local model",
                          hint="give --base a sentence-transformers folder")
    base = o["base"] or settings.embedding.embedding_model_path or packaged_model_path()
    stamp = datetime.now(UTC)
    out = o["out"] or settings.data.models_dir / f"tuned-{stamp:%Y%m%d-%H%M%S}"
    if not o["dry_run"] and out.exists():
        # A model's id is its folder's name (the embedding cache is keyed by it): another
        # model under a used name would be served vectors of the old one.
        raise ConfigError(f"{out} exists", hint="choose a new --out (a model folder's name "
                                                "is its id: never reuse one)")

    # The questions that judge the steps, read before the minutes of mining (a blind file is
    # refused now); they must not be learned either (a helpful answer's question is a
    # feedback pair).
    chosen = _validation_questions(o["validate_qa"]) if o["validate_qa"] else None
    guard_files = list(dict.fromkeys([g for g in DEFAULT_GUARDS if Path(g).is_file()]
                                     + list(o["guards"]) + list(o["validate_qa"])))
    questions = [q for g in guard_files for q in questions_in(Path(g))]
    guard = LeakageGuard(questions)
    click.echo(f"leakage guard: {guard.questions} questions from "
               f"{', '.join(guard_files) or 'no golden set (none found; see --guard)'}", err=True)

    stores = build_stores(settings)
    try:
        miner = PairMiner(stores.catalog, build_blobs(settings),
                          readers=comma_separated(o["readers"]) or None)
        from tqdm import tqdm

        docs = stores.catalog.count_documents(with_content=True)
        with tqdm(total=docs, desc="mining pairs", unit="doc", disable=None) as bar:
            found = list(miner.mine(progress=lambda n: bar.update(n))) + _feedback_pairs(stores)
        mined = select(found, guard, per_document=o["per_document"],
                       max_validation=o["validation_pairs"], seed=o["seed"])
    finally:
        stores.close()
    summary = mined.summary()
    click.echo(_pairs_text(summary), err=True)
    if o["pairs_out"]:
        with open(o["pairs_out"], "w", encoding="utf-8") as f:
            for split, pairs in (("train", mined.train), ("validation", mined.validation)):
                for p in pairs:
                    f.write(json.dumps({**p.to_json(), "split": split}, ensure_ascii=False)
                            + "\n")
        click.echo(f"wrote {len(mined.train) + len(mined.validation)} pairs to "
                   f"{o['pairs_out']}", err=True)
    if o["dry_run"]:
        if o["as_json"]:
            click.echo(json.dumps(summary, indent=2))
        return
    if not mined.train:
        raise ConfigError("no training pairs: the catalog has no documents to learn from",
                          hint="ingest sources first (`citewise ingest --all`)")
    check, validated_on = None, None
    if chosen is not None:
        check, validated_on = _question_check(obj, o["validate_qa"], chosen)
    _train(o, base, out, mined, stamp, guard_files, check, validated_on)


# Search candidates per validation question: what the model re-ranks at each validation (135
# questions' 30 candidates, ~3,000 distinct passages, took 50-60 s a validation on two idle
# cores: bench/results/tune-questions.json).
VALIDATION_CANDIDATES = 30


def _validation_questions(files: tuple[str, ...]):
    """The loader `citewise rank train` uses: blind files refused, test rows left out."""
    from citewise.api.ranking.training import load_training_questions

    chosen = load_training_questions(files)
    for why, n in chosen.left_out.items():
        click.echo(f"validation questions: left out {n} rows: {why}", err=True)
    return chosen


def _question_check(obj: Context, files: tuple[str, ...], chosen):
    """The questions that judge the steps, each with its search candidates as the live index
    finds them now."""
    from citewise.api.cli.evaluate import _in_process
    from citewise.api.evaluation.qa import doc_key
    from citewise.index.dense import embedding_text
    from citewise.ingest.tuning.train import QuestionCheck

    questions: list[str] = []
    pools: list[list[int]] = []
    relevants: list[set[int]] = []
    at: dict[str, int] = {}  # each distinct passage once, by its text
    unlearnable = 0
    with _in_process(obj, "tuning") as services:
        for q in chosen.questions:
            results, _ = services.search.candidates(q.question, q.identity,
                                                    depth=VALIDATION_CANDIDATES)
            pool, relevant = [], set()
            for r in results:
                i = at.setdefault(embedding_text(r.title, r.heading or "", r.text), len(at))
                pool.append(i)
                if doc_key(r.source, r.path, r.document_id) in q.relevant:
                    relevant.add(i)
            if not relevant:
                unlearnable += 1
                continue
            questions.append(q.question)
            pools.append(pool)
            relevants.append(relevant)
    if not questions:
        raise ConfigError(f"no validation question of {', '.join(files)} has a relevant "
                          f"document among its {VALIDATION_CANDIDATES} search candidates",
                          hint="check the golden sets' `relevant` paths against this index")
    check = QuestionCheck(questions, list(at), pools, relevants)
    click.echo(f"validation: {len(check.questions)} questions ({unlearnable} without a relevant "
               f"candidate left out), {len(check.passages)} passages", err=True)
    return check, {"files": list(files), "questions": len(check.questions),
                   "left_out": {**chosen.left_out, "no relevant candidate": unlearnable},
                   "candidates": VALIDATION_CANDIDATES}


def _train(o: dict, base: Path, out: Path, mined, stamp: datetime, guard_files: list[str],
           check=None, validated_on: dict | None = None) -> None:
    from sentence_transformers import SentenceTransformer
    from tqdm import tqdm

    from citewise.ingest.tuning.card import card, write_card
    from citewise.ingest.tuning.train import TuneOptions, save, tune

    options = TuneOptions(minutes=o["minutes"], max_steps=o["max_steps"],
                          batch_size=o["batch_size"], max_seq_length=o["max_seq_length"],
                          learning_rate=o["learning_rate"], eval_every=o["eval_every"],
                          patience=o["patience"], seed=o["seed"], threads=o["threads"])
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the weights' loading bar, between ours
    # A model of its own, not the process's shared one (index/dense.py): it is changed here.
    model = SentenceTransformer(str(base), device="cpu")
    click.echo(f"tuning {base} on {len(mined.train)} pairs ({len(mined.validation)} held out), "
               f"at most {options.minutes:g} minutes or {options.max_steps} steps", err=True)
    with tqdm(total=options.max_steps, desc="tuning", unit="step", disable=None) as bar:
        def step(n: int, loss: float) -> None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")

        result = tune(model, mined.train, mined.validation, options, questions=check,
                      on_step=step,
                      on_validation=lambda v: bar.write(f"validation {v.line()}", file=sys.stderr))
    out.parent.mkdir(parents=True, exist_ok=True)
    save(model, out)
    data = card(base, mined, options, result, stamp.isoformat(timespec="seconds"), guard_files,
                validated_on)
    write_card(out, data)
    click.echo(f"{result.steps} steps ({result.pairs_per_second} pairs/s) in {result.seconds} s, "
               f"stopped by {result.stopped}; peak memory {result.peak_rss_mb:.0f} MB", err=True)
    for label, v in (("before", result.before), ("kept", result.best)):
        if v is not None:
            click.echo(f"validation {label}: {v.line()}", err=True)
    if o["as_json"]:
        click.echo(json.dumps(data, indent=2))
    click.secho(f"wrote {out}", fg="green", err=True)
    click.echo(textwrap.dedent(f"""\
        The live index is unchanged. To adopt the model, after `citewise eval` says it helps:
          CITEWISE_EMBEDDING_MODEL_PATH={out} citewise reindex
        then run `citewise serve` with CITEWISE_EMBEDDING_MODEL_PATH={out} too."""), err=True)


def _feedback_pairs(stores) -> list:
    """Questions whose answers people marked helpful -> the first passage the answer cited
    (not one marked wrong): the organisation's own words for what it looks for."""
    from citewise.ingest.tuning.pairs import Pair

    pairs = []
    for given, stored in stores.conversations.feedback_since(""):
        if not given["helpful"]:
            continue
        cited = [c for c in stored.answer.citations if c.n != given["wrong_citation"]]
        if cited and cited[0].quote:
            c = cited[0]
            pairs.append(Pair(stored.standalone or stored.question, c.quote, "feedback",
                              c.document_id, c.source, c.path or c.url or ""))
    return pairs


def _pairs_text(summary: dict) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in summary["train"].items()) or "none"
    held = ", ".join(f"{k} {n}" for k, n in summary["validation"].items()) or "none"
    return (f"pairs from {summary['documents']} documents: train {kinds}; validation {held}\n"
            f"dropped: {summary['dropped_for_leakage_total']} for leakage "
            f"({summary['guarded_questions']} questions guarded), {summary['dropped_duplicate']} "
            f"duplicates, {summary['dropped_ambiguous']} ambiguous anchors, "
            f"{summary['dropped_over_cap']} over the per-document cap")

