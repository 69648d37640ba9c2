"""Fusing the dense and BM25 candidate lists into one ranking, in Python, for both backends.

Each method's candidates come from its own index query (with the caller's permission filter
inside it); fusing them here rather than in the engine means the embedded engine and a Qdrant
server rank identically, and lets us use fusions the engine does not offer.

* ``rrf``: reciprocal rank fusion, ``w / (k + rank)`` summed over the lists. Uses ranks only,
  so it needs no calibration, but it throws away how far apart the scores are.
* ``convex``: a weighted sum of the two scores, each divided by its list's best score (cosine
  similarities below 0 count as 0; BM25 scores are never negative). A chunk one list lacks
  gets that list's lowest score, a bound on what the list would have given it. It keeps the
  margins that RRF throws away, and unlike min-max normalisation it does not depend on how
  deep the lists go, so a page of 10 ranks the same as the first 10 of a page of 300. On
  SciFact it beat RRF and min-max (see docs/quality.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from citewise.index.vector_index import ScoredId

FusionMethod = Literal["rrf", "convex"]


@dataclass(frozen=True)
class FusionConfig:
    method: FusionMethod = "convex"
    # Share of the dense list in the fused score (0..1); BM25 gets the rest. 0.6 was best on
    # SciFact's train split with convex fusion (docs/quality.md).
    dense_weight: float = 0.6
    rrf_k: int = 60

    def __post_init__(self) -> None:
        if self.method not in ("rrf", "convex"):
            raise ValueError(f"fusion method must be rrf or convex, not {self.method!r}")
        if not 0.0 <= self.dense_weight <= 1.0:
            raise ValueError(f"dense_weight must be between 0 and 1, not {self.dense_weight}")

    def describe(self) -> str:
        if self.method == "rrf":
            return f"rrf(k={self.rrf_k}, dense_weight={self.dense_weight:g})"
        return f"convex(dense_weight={self.dense_weight:g})"


class Scored(Protocol):
    """What fusion reads of a hit: its id and its score in its own list."""

    @property
    def id(self) -> str: ...

    @property
    def score(self) -> float: ...


def fuse(dense: Sequence[Scored], sparse: Sequence[Scored],
         config: FusionConfig) -> list[ScoredId]:
    """One list, best first, each with its fused score; ties keep id order. Ids and scores
    only: the search reads the payloads of the page it keeps (``VectorIndex.payloads``)."""
    if config.method == "rrf":
        scores = _rrf(dense, sparse, config)
    else:
        scores = _convex(dense, sparse, config.dense_weight)
    fused = [ScoredId(i, s) for i, s in scores.items()]
    fused.sort(key=lambda h: (-h.score, h.id))
    return fused


def _rrf(dense: Sequence[Scored], sparse: Sequence[Scored],
         config: FusionConfig) -> dict[str, float]:
    scores: dict[str, float] = {}
    for hits, weight in ((dense, config.dense_weight), (sparse, 1.0 - config.dense_weight)):
        for rank, h in enumerate(hits):
            # Twice the weight: with equal weights this is the textbook 1 / (k + rank).
            scores[h.id] = scores.get(h.id, 0.0) + 2 * weight / (config.rrf_k + rank + 1)
    return scores


def _convex(dense: Sequence[Scored], sparse: Sequence[Scored],
            dense_weight: float) -> dict[str, float]:
    d = _normalised(dense)
    s = _normalised(sparse)
    # A chunk one list did not return scores at most that list's lowest.
    d_floor = min(d.values(), default=0.0)
    s_floor = min(s.values(), default=0.0)
    return {
        i: dense_weight * d.get(i, d_floor) + (1.0 - dense_weight) * s.get(i, s_floor)
        for i in d.keys() | s.keys()
    }


def _normalised(hits: Sequence[Scored]) -> dict[str, float]:
    """Scores divided by the best one: 1.0 for the top hit, 0 for a score of 0 or below."""
    top = max((h.score for h in hits), default=0.0)
    if top <= 0:
        return {h.id: 0.0 for h in hits}
    return {h.id: max(h.score, 0.0) / top for h in hits}
