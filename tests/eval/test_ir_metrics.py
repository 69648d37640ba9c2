"""Our metric code against trec_eval itself (pytrec_eval wraps its C code) on a small fixture.

The fixture has the cases that trip home-made metrics: ties in scores (trec_eval breaks them by
document id, descending), graded relevance, judged-but-irrelevant documents, relevant documents
never retrieved, a query with nothing relevant in the top 10, rankings longer than the cut-offs.
"""

from __future__ import annotations

import random

import pytest
import pytrec_eval

from citewise.api.evaluation.ir_metrics import evaluate, per_query, pool_best_chunk

QRELS = {
    "q1": {"d1": 1, "d3": 2, "d9": 1, "d40": 0},
    "q2": {"d2": 1},
    "q3": {"d5": 1, "d6": 1, "d150": 1},  # d150 is beyond the top 100
    "q4": {"d7": 2, "d8": 1},  # nothing relevant in the top 10
}


def _run() -> dict[str, dict[str, float]]:
    rng = random.Random(7)
    run: dict[str, dict[str, float]] = {}
    for q in QRELS:
        docs = [f"d{i}" for i in range(1, 160)]
        rng.shuffle(docs)
        # Coarse scores: plenty of ties for the tie-breaking rule to decide.
        run[q] = {d: float(len(docs) - i) // 3 for i, d in enumerate(docs)}
    run["q4"].update({"d7": -1.0, "d8": -2.0})
    run["q2"]["d2"] = 1000.0  # a perfect first hit
    return run


def _trec_eval(run, qrels) -> dict[str, dict[str, float]]:
    measures = {"ndcg_cut.10", "recall.100"}
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    # MRR@10 is recip_rank over the run cut to its top 10 (trec_eval's own order).
    top10 = {q: dict(sorted(d.items(), key=lambda x: (x[1], x[0]), reverse=True)[:10])
             for q, d in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    return {q: {"ndcg@10": s["ndcg_cut_10"], "recall@100": s["recall_100"],
                "mrr@10": rr[q]["recip_rank"]} for q, s in scores.items()}


def test_per_query_metrics_match_trec_eval():
    run = _run()
    ours = per_query(run, QRELS)
    reference = _trec_eval(run, QRELS)
    assert set(ours) == set(reference)
    for q in reference:
        for name, value in reference[q].items():
            assert ours[q][name] == pytest.approx(value, abs=1e-9), (q, name)
    assert ours["q2"] == {"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0}
    assert ours["q4"]["mrr@10"] == 0.0 and ours["q4"]["ndcg@10"] == 0.0


def test_means_match_trec_eval_and_missing_queries_count_as_zero():
    run = _run()
    reference = _trec_eval(run, QRELS)
    means = evaluate(run, QRELS)
    for name in ("ndcg@10", "recall@100", "mrr@10"):
        expected = sum(s[name] for s in reference.values()) / len(reference)
        assert means[name] == pytest.approx(expected, abs=1e-9)
    # trec_eval -c: a query without results still counts, with zeros.
    del run["q2"]
    assert evaluate(run, QRELS)["ndcg@10"] < means["ndcg@10"]


def test_documents_are_scored_by_their_best_chunk():
    hits = [("d1", 0.9), ("d2", 0.8), ("d1", 0.7), ("d3", 0.6), ("d2", 0.95)]
    assert pool_best_chunk(hits) == {"d1": 0.9, "d2": 0.95, "d3": 0.6}
