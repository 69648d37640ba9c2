"""Fine-tuning a sentence-transformers model on mined pairs, on CPU, within a time budget.

The loss is the one sentence-transformers' ``MultipleNegativesRankingLoss`` computes: in a
batch of (anchor, positive) pairs, each anchor's positive is the right answer and every other
pair's positive a wrong one; cross-entropy over the batch's cosine similarities times 20. A
plain torch loop rather than sentence-transformers' trainer, which wants ``datasets`` and
``accelerate`` (not installed), and this loop is all that is needed: AdamW, a linear warm-up
then a constant rate (so that a run cut short by its time budget is the same run as a longer
one up to that step: the schedule depends on the step alone), gradient clipping.

Validation ranks each held-out anchor's positive among all held-out positives (recall@1,
recall@10, MRR) before the first step and every ``eval_every`` steps; the best state is kept
in memory and is what is saved, and the run stops early after ``patience`` validations
without improvement. Seeded: the same pairs, options and thread count give the same model.

Held-out pairs are the mined pairs' shape, not questions', and past a few hundred steps they
stop predicting how search answers questions (docs/quality.md: their recall rose while every
golden set's hit@1 fell). Given labelled questions instead (``QuestionCheck``: a development
set's, never a test split's), validation re-ranks each question's search candidates by the
model being trained, and the best state is the one that ranks their relevant passages highest.
"""

from __future__ import annotations

import copy
import random
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from citewise.ingest.tuning.leakage import normalise
from citewise.ingest.tuning.pairs import Pair


@dataclass
class TuneOptions:
    minutes: float = 30.0  # wall-clock budget for training and validation
    max_steps: int = 5000
    batch_size: int = 32
    max_seq_length: int = 128  # word-pieces per text while training (the saved model keeps its own)
    learning_rate: float = 2e-5
    warmup_steps: int = 50
    eval_every: int = 50
    patience: int = 4  # validations without improvement before stopping
    scale: float = 20.0  # MultipleNegativesRankingLoss's
    seed: int = 13
    threads: int | None = None  # torch's intra-op threads; None: torch's choice


@dataclass
class Validation:
    step: int
    recall_at_1: float
    recall_at_10: float
    mrr: float
    pairs: int  # what was ranked: held-out pairs, or questions (``of``)
    seconds: float
    of: str = "pairs"

    def line(self) -> str:
        return (f"step {self.step}: recall@1 {self.recall_at_1:.3f}, recall@10 "
                f"{self.recall_at_10:.3f}, MRR {self.mrr:.3f} ({self.pairs} {self.of})")


@dataclass
class QuestionCheck:
    """Labelled questions, each with the passages search found for it: validation ranks each
    question's passages by the model's cosine and asks where the first relevant one lands.

    ``passages`` holds each distinct text once, as the index embeds it (title and heading
    path, then the chunk: ``index.dense.embedding_text``); ``pools[i]`` are question i's
    candidates (indexes into ``passages``) and ``relevant[i]`` those of a relevant document.
    A question none of whose candidates is relevant teaches nothing here and is left out
    when the check is built."""

    questions: list[str]
    passages: list[str]
    pools: list[list[int]]
    relevant: list[set[int]]

    def __post_init__(self) -> None:
        for i, (pool, relevant) in enumerate(zip(self.pools, self.relevant, strict=True)):
            if not relevant & set(pool):
                raise ValueError(f"question {i} has no relevant passage among its candidates")

    def validate(self, model: Any, step: int, batch_size: int = 64) -> Validation | None:
        if not self.questions:
            return None
        started = time.monotonic()
        was_training = model.training
        model.eval()
        asked = np.asarray(model.encode(self.questions, batch_size=batch_size,
                                        normalize_embeddings=True, show_progress_bar=False))
        texts = np.asarray(model.encode(self.passages, batch_size=batch_size,
                                        normalize_embeddings=True, show_progress_bar=False))
        if was_training:
            model.train()
        ranks = []
        for i, pool in enumerate(self.pools):
            sims = texts[pool] @ asked[i]
            order = np.argsort(-sims, kind="stable")
            # Every pool holds a relevant passage (``__post_init__``).
            ranks.append(next(r for r, j in enumerate(order, 1) if pool[j] in self.relevant[i]))
        r = np.asarray(ranks)
        return Validation(step=step, recall_at_1=float(np.mean(r == 1)),
                          recall_at_10=float(np.mean(r <= 10)), mrr=float(np.mean(1 / r)),
                          pairs=len(r), seconds=round(time.monotonic() - started, 2),
                          of="questions")


@dataclass
class TuneResult:
    steps: int
    pairs_trained: int
    seconds: float
    train_seconds: float  # without validation
    pairs_per_second: float
    peak_rss_mb: float
    stopped: str  # "time budget" | "step budget" | "early stop" | "no training pairs"
    before: Validation | None
    best: Validation | None
    history: list[Validation] = field(default_factory=list)
    loss_first: float | None = None  # mean loss of the first and last 20 steps
    loss_last: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def validate(model: Any, pairs: list[Pair], step: int, batch_size: int = 64) -> Validation | None:
    """Where each anchor's positive ranks among every validation positive, by cosine."""
    if len(pairs) < 2:
        return None
    started = time.monotonic()
    was_training = model.training
    model.eval()
    anchors = model.encode([p.anchor for p in pairs], batch_size=batch_size,
                           normalize_embeddings=True, show_progress_bar=False)
    positives = model.encode([p.positive for p in pairs], batch_size=batch_size,
                             normalize_embeddings=True, show_progress_bar=False)
    if was_training:
        model.train()
    sims = np.asarray(anchors) @ np.asarray(positives).T
    right = np.diag(sims)
    ranks = (sims > right[:, None]).sum(axis=1) + 1
    return Validation(step=step, recall_at_1=float(np.mean(ranks == 1)),
                      recall_at_10=float(np.mean(ranks <= 10)), mrr=float(np.mean(1 / ranks)),
                      pairs=len(pairs), seconds=round(time.monotonic() - started, 2))


def batches(pairs: list[Pair], size: int, rng: random.Random) -> list[list[Pair]]:
    """One epoch of batches in a seeded order. A batch never holds two pairs with the same
    passage (or anchor): the one would be scored as the other's wrong answer. A pair that
    would repeat one waits for the next batch."""
    order = pairs[:]
    rng.shuffle(order)
    out: list[list[Pair]] = []
    current: list[Pair] = []
    seen: set[str] = set()
    while order:
        waiting: list[Pair] = []
        for p in order:
            keys = {"p:" + normalise(p.positive), "a:" + normalise(p.anchor)}
            if seen & keys:
                waiting.append(p)
                continue
            current.append(p)
            seen |= keys
            if len(current) == size:
                out.append(current)
                current, seen = [], set()
        if len(waiting) == len(order):  # nothing fits beside what is left: close the batch
            if len(current) >= 2:
                out.append(current)
            current, seen = [], set()
        order = waiting
    if len(current) >= 2:
        out.append(current)
    return out


def tune(model: Any, train: list[Pair], validation: list[Pair], options: TuneOptions, *,
         questions: QuestionCheck | None = None,
         on_step: Callable[[int, float], None] | None = None,
         on_validation: Callable[[Validation], None] | None = None) -> TuneResult:
    """Train ``model`` (a ``SentenceTransformer``) in place; on return it holds the state
    validation judged best (the model as it came, when no step improved on it), or the last
    state when there is nothing to validate on. With ``questions``, those are what validation
    ranks (the held-out pairs are then not validated on)."""
    import torch

    if options.threads:
        torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    started = time.monotonic()
    deadline = started + options.minutes * 60
    saved_length = model.max_seq_length
    model.max_seq_length = options.max_seq_length

    history: list[Validation] = []
    best: Validation | None = None
    best_state: dict[str, Any] | None = None

    def judge(step: int) -> bool:
        """Validate now; whether this state is the best so far (and then remember it)."""
        nonlocal best, best_state
        checked = (questions.validate(model, step) if questions is not None
                   else validate(model, validation, step))
        if checked is None:
            return False
        history.append(checked)
        if on_validation:
            on_validation(checked)
        if best is None or checked.mrr > best.mrr:
            best, best_state = checked, copy.deepcopy(model.state_dict())
            return True
        return False

    validating = bool(questions.questions if questions is not None else validation)
    judge(0)
    before = history[0] if history else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate,
                                  weight_decay=0.01)
    warmup = max(1, options.warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup))
    losses: list[float] = []
    step, trained, train_seconds, stale, judged = 0, 0, 0.0, 0, 0
    stopped = "step budget"
    model.train()
    queue: list[list[Pair]] = []
    while step < options.max_steps:
        if time.monotonic() >= deadline:
            stopped = "time budget"
            break
        if not queue:
            queue = batches(train, options.batch_size, rng)
            if not queue:
                stopped = "no training pairs"
                break
        batch = queue.pop(0)
        t0 = time.monotonic()
        anchors = model(model.preprocess([p.anchor for p in batch]))["sentence_embedding"]
        positives = model(model.preprocess([p.positive for p in batch]))["sentence_embedding"]
        scores = (torch.nn.functional.normalize(anchors, dim=-1)
                  @ torch.nn.functional.normalize(positives, dim=-1).T) * options.scale
        loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(batch)))
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        step += 1
        trained += len(batch)
        train_seconds += time.monotonic() - t0
        losses.append(float(loss.detach()))
        if on_step:
            on_step(step, losses[-1])
        if validating and step % options.eval_every == 0:
            judged = step
            stale = 0 if judge(step) else stale + 1
            if stale >= options.patience:
                stopped = "early stop"
                break
    if validating and step and judged != step:
        judge(step)  # the steps since the last validation
    if best_state is not None:
        model.load_state_dict(best_state)
    model.max_seq_length = saved_length
    model.eval()
    seconds = time.monotonic() - started
    return TuneResult(
        steps=step, pairs_trained=trained, seconds=round(seconds, 1),
        train_seconds=round(train_seconds, 1),
        pairs_per_second=round(trained / train_seconds, 2) if train_seconds else 0.0,
        peak_rss_mb=round(peak_rss_mb(), 1), stopped=stopped if train else "no training pairs",
        before=before, best=best, history=history,
        loss_first=round(float(np.mean(losses[:20])), 4) if losses else None,
        loss_last=round(float(np.mean(losses[-20:])), 4) if losses else None)


def save(model: Any, folder: Path) -> None:
    """The sentence-transformers files, written beside the final folder and moved into place,
    so that a folder of that name is always a whole model."""
    partial = folder.with_name(folder.name + ".partial")
    model.save(str(partial))
    partial.rename(folder)
