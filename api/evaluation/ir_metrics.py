"""Ranking metrics with trec_eval's conventions, so our figures compare with published ones.

* A run is ``{query_id: {doc_id: score}}``; documents are ranked by score, ties broken by
  document id in *descending* order, as trec_eval does.
* Qrels are ``{query_id: {doc_id: grade}}``; grade > 0 means relevant.
* nDCG@k (trec_eval ``ndcg_cut.k``): gain = grade, discount ``log2(rank + 1)``, the ideal
  ranking built from the judged documents.
* Recall@k: relevant documents in the top k over all relevant documents.
* MRR@k: 1 / rank of the first relevant document within the top k, 0 without one.
* Averages run over every query that has a relevant judgement; a query the run lacks counts as
  0 (trec_eval ``-c``), so a system cannot look better by returning nothing.

Search returns chunks; ``pool_best_chunk`` turns them into documents scored by their best chunk
(max-pooling), the convention for chunked indexes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]


def pool_best_chunk(hits: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``(doc_id, score)`` per chunk, best first -> each document once, with its best score."""
    docs: dict[str, float] = {}
    for doc_id, score in hits:
        if doc_id not in docs or score > docs[doc_id]:
            docs[doc_id] = score
    return docs


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval order: score descending, then id descending."""
    return [d for d, _ in sorted(scores.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def ndcg_at(ranking: list[str], judged: Mapping[str, int], k: int) -> float:
    dcg = sum(
        judged.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k])
        if judged.get(doc, 0) > 0
    )
    ideal_gains = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_gains))
    return dcg / idcg if idcg else 0.0


def recall_at(ranking: list[str], judged: Mapping[str, int], k: int) -> float:
    relevant = {d for d, g in judged.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at(ranking: list[str], judged: Mapping[str, int], k: int) -> float:
    for i, doc in enumerate(ranking[:k]):
        if judged.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def per_query(run: Run, qrels: Qrels) -> dict[str, dict[str, float]]:
    """``{query_id: {"ndcg@10", "recall@100", "mrr@10"}}`` for every query with a relevant doc."""
    out: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        if not any(g > 0 for g in judged.values()):
            continue  # trec_eval skips queries without a relevant document
        ranking = ranked(run.get(qid, {}))
        out[qid] = {
            "ndcg@10": ndcg_at(ranking, judged, 10),
            "recall@100": recall_at(ranking, judged, 100),
            "mrr@10": mrr_at(ranking, judged, 10),
        }
    return out


def evaluate(run: Run, qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10, Recall@100 and MRR@10 over the judged queries (see module docstring)."""
    scores = per_query(run, qrels)
    names = ("ndcg@10", "recall@100", "mrr@10")
    if not scores:
        return dict.fromkeys(names, 0.0)
    return {n: sum(s[n] for s in scores.values()) / len(scores) for n in names}
