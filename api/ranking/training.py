"""Training the learned second stage from labelled questions: `citewise rank train`.

For each labelled question, the candidates come from the real search path
(``SearchService.candidates``: the caller's permissions, synonyms, fusion, the version check),
exactly as the stage receives them at search time, and their feature rows from the same
``RankFeatures``. A chunk of a relevant document is labelled 1, and 2 when it also holds one
of the question's key facts (``must_contain_any``): the chunk the answer should quote.

Questions are folded (each question whole in one fold), a model trained on the other folds
ranks each fold, and the figures (NDCG@10 and hit@1 over documents, as ``citewise eval``
counts them) are set beside the fused order's on the same questions. The model written is
then trained on every question.

Only rows meant for training are used: ``split`` tune, train, feedback, or dev (``dev``,
``dev2``...: the development sets of ``bench/golden``, written to be tuned on). Test rows are left
out (and counted), and a file of the blind set is refused outright: what measures a model
must never have taught it.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from citewise.api.evaluation.qa import GoldenQuestion, doc_key, has_key_fact, load_golden_set
from citewise.api.evaluation.runner import percentile
from citewise.errors import InvalidRequestError
from citewise.retrieval.ranking.features import FEATURES, RankFeatures
from citewise.retrieval.ranking.model import RankModel
from citewise.retrieval.ranking.signals import Signals
from citewise.retrieval.ranking.stage import LearnedStage
from citewise.retrieval.search import SearchResult, SearchService

TRAINABLE_SPLITS = frozenset({"tune", "train", "feedback"})
_DEVELOPMENT = re.compile(r"dev\d*")


def trainable(split: str) -> bool:
    """Tune, train and feedback rows, and the development sets (``dev``, ``dev2``...)."""
    return split in TRAINABLE_SPLITS or bool(_DEVELOPMENT.fullmatch(split or ""))


@dataclass(frozen=True)
class Params:
    """LightGBM's lambdarank, small: a few dozen questions cannot feed a large model. The
    defaults were chosen by cross-validation on the shared golden set's tune split (34
    questions; docs/quality.md): 150 trees of 7 leaves learned from nothing lost to the fused
    order there, 30 trees of 3 leaves starting from it (``prior`` 20) tied it."""

    trees: int = 30
    leaves: int = 3
    learning_rate: float = 0.05
    min_rows_per_leaf: int = 20
    feature_share: float = 0.8
    seed: int = 7
    prior: float = 20.0  # the fused score's weight where boosting starts (RankModel.prior)

    def lightgbm(self) -> dict[str, Any]:
        return {"objective": "lambdarank", "n_estimators": self.trees,
                "num_leaves": self.leaves, "learning_rate": self.learning_rate,
                "min_child_samples": self.min_rows_per_leaf,
                "colsample_bytree": self.feature_share, "random_state": self.seed,
                "deterministic": True, "force_row_wise": True, "n_jobs": 1, "verbose": -1}


@dataclass
class TrainingSet:
    questions: list[GoldenQuestion]
    files: list[str]
    left_out: dict[str, int] = field(default_factory=dict)  # why -> how many rows


def load_training_questions(paths: Iterable[str | Path]) -> TrainingSet:
    """The trainable rows of golden-set files (see ``trainable``), answerable."""
    chosen: list[GoldenQuestion] = []
    left_out: dict[str, int] = {}
    files = []
    measured: set[str] = set()  # the questions of test rows, in any file given
    for path in paths:
        path = Path(path)
        if "blind" in path.name.lower():
            raise InvalidRequestError(
                f"{path} is a blind set: it measures the ranking and must never train it",
                hint="train on the tune split (bench/golden/shared-corpora.jsonl) and feedback "
                     "exports; report the blind set with `citewise eval --qa`")
        files.append(str(path))
        for q in load_golden_set(path):
            if not trainable(q.split):
                why = f"split {q.split!r} (only tune, train, dev and feedback rows train)"
                left_out[why] = left_out.get(why, 0) + 1
                measured.add(_normal(q.question))
            elif not q.answerable:
                left_out["unanswerable"] = left_out.get("unanswerable", 0) + 1
            else:
                chosen.append(q)
    # A question someone asked for real that is also a test row (a feedback export of the
    # golden set's own question) would teach what the test measures.
    kept = [q for q in chosen if _normal(q.question) not in measured]
    if len(kept) < len(chosen):
        left_out["the same question as a test row"] = len(chosen) - len(kept)
    chosen = kept
    if not chosen:
        raise InvalidRequestError(
            "no trainable questions in " + ", ".join(files),
            hint='training takes rows with "split": "tune", "train", "dev" or "feedback" (a '
                 'row without a split counts as test); test rows are never trained on')
    return TrainingSet(chosen, files, left_out)


def _normal(question: str) -> str:
    return " ".join(question.lower().split())


@dataclass
class Group:
    """One question's candidates in fused order, their feature rows and labels."""

    question: GoldenQuestion
    results: list[SearchResult]
    rows: list[list[float]]
    labels: list[int]
    signals: Signals

    @property
    def learnable(self) -> bool:
        return any(self.labels)


def label(q: GoldenQuestion, r: SearchResult) -> int:
    if doc_key(r.source, r.path, r.document_id) not in q.relevant:
        return 0
    return 2 if q.must_contain_any and has_key_fact(r.text, q.must_contain_any) else 1


def collect(search: SearchService, questions: list[GoldenQuestion], *, depth: int,
            features: RankFeatures | None = None,
            progress: Callable[[int], None] | None = None) -> list[Group]:
    features = features or RankFeatures()
    groups = []
    for q in questions:
        results, signals = search.candidates(q.question, q.identity, depth=depth)
        rows = features.rows(q.question, results, signals)
        groups.append(Group(q, results, rows, [label(q, r) for r in results], signals))
        if progress:
            progress(1)
    return groups


# Figures --------------------------------------------------------------------------------------
def document_order(group: Group, order: list[int]) -> list[str]:
    docs: list[str] = []
    for i in order:
        r = group.results[i]
        key = doc_key(r.source, r.path, r.document_id)
        if key not in docs:
            docs.append(key)
    return docs


def figures(groups: list[Group], orders: list[list[int]]) -> dict[str, float]:
    """NDCG@10 (binary, over documents) and hit@1, as `citewise eval` counts documents."""
    ndcg, hit1 = [], []
    for g, order in zip(groups, orders, strict=True):
        docs = document_order(g, order)[:10]
        relevant = set(g.question.relevant)
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(docs) if d in relevant)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
        ndcg.append(dcg / ideal if ideal else 0.0)
        hit1.append(float(bool(docs) and docs[0] in relevant))
    n = max(1, len(groups))
    return {"questions": len(groups), "ndcg@10": sum(ndcg) / n, "hit@1": sum(hit1) / n}


def fused_order(g: Group) -> list[int]:
    return list(range(len(g.results)))


def model_order(model: RankModel, g: Group) -> list[int]:
    scores = model.scores(g.rows)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


# Training -------------------------------------------------------------------------------------
def fit(groups: list[Group], params: Params, *, candidates: int,
        trained: dict[str, Any] | None = None) -> RankModel:
    import lightgbm
    import numpy as np

    learnable = [g for g in groups if g.learnable]
    if not learnable:
        raise InvalidRequestError(
            "no question has a relevant document among its candidates: nothing to learn",
            hint="check that the golden set's `relevant` paths are <source>/<path> of this "
                 "index, and that the index holds those sources")
    x = np.asarray([row for g in learnable for row in g.rows], dtype=np.float64)
    y = np.asarray([lab for g in learnable for lab in g.labels])
    ranker = lightgbm.LGBMRanker(**params.lightgbm())
    ranker.fit(x, y, group=[len(g.rows) for g in learnable], feature_name=list(FEATURES),
               init_score=params.prior * x[:, FEATURES.index("fused_score")])
    return RankModel(booster_text=ranker.booster_.model_to_string(), candidates=candidates,
                     trained=trained or {}, prior=params.prior)


def folds_of(groups: list[Group], k: int, seed: int) -> list[list[int]]:
    """Question indexes per fold: each question whole in one fold, shuffled once."""
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    return [order[i::k] for i in range(k)]


@dataclass
class FoldResult:
    fold: int
    questions: int
    fused: dict[str, float]
    learned: dict[str, float]


def cross_validate(groups: list[Group], params: Params, *, k: int, candidates: int,
                   on_fold: Callable[[FoldResult], None] | None = None) -> list[FoldResult]:
    if len(groups) < k:
        raise InvalidRequestError(f"{len(groups)} questions cannot be split into {k} folds",
                                  hint="pass fewer --folds, or more questions")
    out = []
    for n, held in enumerate(folds_of(groups, k, params.seed), 1):
        held_set = set(held)
        model = fit([g for i, g in enumerate(groups) if i not in held_set], params,
                    candidates=candidates)
        test = [groups[i] for i in held]
        result = FoldResult(n, len(test), figures(test, [fused_order(g) for g in test]),
                            figures(test, [model_order(model, g) for g in test]))
        out.append(result)
        if on_fold:
            on_fold(result)
    return out


def summary(folds: list[FoldResult]) -> dict[str, Any]:
    """Every fold's held-out questions together (each question scored once)."""
    total = sum(f.questions for f in folds) or 1
    pooled = {
        which: {m: sum(getattr(f, which)[m] * f.questions for f in folds) / total
                for m in ("ndcg@10", "hit@1")}
        for which in ("fused", "learned")}
    return {"folds": [{"fold": f.fold, "questions": f.questions, "fused": f.fused,
                       "learned": f.learned} for f in folds],
            "all_folds": {"questions": total, **pooled}}


def stage_latency(model: RankModel, groups: list[Group]) -> dict[str, float]:
    """What the stage adds to a search, timed as search runs it (features and scores), p50
    and p95 in ms: first from a cold cache of chunk terms (a new process's first searches),
    then again with those chunks' terms cached (a server that has seen them before)."""
    stage = LearnedStage(model, RankFeatures())
    out: dict[str, float] = {"searches": len(groups)}
    for cache in ("cold", "warm"):
        timings = []
        for g in groups:
            started = time.perf_counter()
            stage.reorder(g.question.question, g.results, g.signals)
            timings.append((time.perf_counter() - started) * 1000)
        out[f"{cache}_p50_ms"] = percentile(timings, 50)
        out[f"{cache}_p95_ms"] = percentile(timings, 95)
    return out


def metadata(training: TrainingSet, groups: list[Group], params: Params, cv: dict[str, Any],
             *, candidates: int, index_model: str) -> dict[str, Any]:
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": training.files,
        "questions": len(groups),
        "learnable_questions": sum(g.learnable for g in groups),
        "rows": sum(len(g.rows) for g in groups),
        "left_out": training.left_out,
        "splits": sorted({g.question.split for g in groups}),
        "candidates": candidates,
        "embedding_model": index_model,
        "params": params.__dict__,
        "cross_validation": cv,
    }
