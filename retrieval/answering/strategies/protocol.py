"""The contract of an answer strategy: one shape of answer, found in the evidence or not."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from citewise.retrieval.answering.evidence import Composed, Evidence
from citewise.retrieval.answering.question import Question


class Scorer(Protocol):
    """The embedding model's similarity of each text to the question (cosine), or, given a
    ``clause``, to that part of the question instead. Built by the answer service for one
    question, so that a strategy never embeds the question again."""

    def __call__(self, texts: list[str], clause: str | None = None) -> np.ndarray: ...


class Strategy(Protocol):
    """Builds the answer in one shape (steps, a fact, a function...) from the evidence."""

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        """The answer in this strategy's shape, or None when the evidence holds none (the
        composer then tries the next strategy it chose for the question)."""
        ...
