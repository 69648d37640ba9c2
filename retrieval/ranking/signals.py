"""What fusion saw of each candidate: the plain data search hands the learned second stage
(and `citewise rank train`) beside its fused results. Imports nothing, so that ``search.py``
can fill it in without importing the features or the model."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ListPosition:
    """Where a chunk stood in one method's candidate list: its raw score and 0-based rank."""

    score: float
    rank: int


@dataclass
class Signals:
    """By chunk id: each candidate's place in the dense and the BM25 list, and how deep the
    lists went (a chunk one list lacks ranks at that depth)."""

    dense: dict[str, ListPosition] = field(default_factory=dict)
    sparse: dict[str, ListPosition] = field(default_factory=dict)
    depth: int = 0

    def record(self, dense_scores: list[tuple[str, float]],
               sparse_scores: list[tuple[str, float]]) -> None:
        """The two lists, best first, as (chunk id, raw score)."""
        self.dense = {i: ListPosition(s, r) for r, (i, s) in enumerate(dense_scores)}
        self.sparse = {i: ListPosition(s, r) for r, (i, s) in enumerate(sparse_scores)}
        self.depth = max(len(dense_scores), len(sparse_scores))
