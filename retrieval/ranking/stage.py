"""The learned second stage: re-scores search's fused candidates with the trained model.

``SearchService`` hands it the best ``candidates`` fused chunks of a hybrid search and what
fusion saw of each (``signals.py``); it computes their feature rows (``features.py``), scores
them with the model (``model.py``) and returns them best first, each with the model's score.
Ties keep the fused order. Built by the composition root only when a model file is present:
without one, search is exactly the fused ranking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from citewise.retrieval.ranking.features import RankFeatures
from citewise.retrieval.ranking.model import RankModel
from citewise.retrieval.ranking.signals import Signals

if TYPE_CHECKING:
    from citewise.retrieval.search import SearchResult


class LearnedStage:
    def __init__(self, model: RankModel, features: RankFeatures | None = None) -> None:
        self.model = model
        self.features = features or RankFeatures()

    @property
    def candidates(self) -> int:
        return self.model.candidates

    def reorder(self, query: str, results: list[SearchResult],
                signals: Signals) -> list[SearchResult]:
        rows = self.features.rows(query, results, signals)
        scores = self.model.scores(rows)
        order = sorted(range(len(results)), key=lambda i: (-scores[i], i))
        out = []
        for i in order:
            r = results[i].model_copy()
            r.score = round(scores[i], 6)
            out.append(r)
        return out
