"""Sweep retrieval variants on a BEIR train split, offline, over an index `citewise eval` built.

`citewise eval` runs each configuration through the real search path, which is what the
published table comes from. Trying dozens of variants that way is slow, and some variants
(BM25 parameters, tokenisation) would need a re-index each. This script instead loads the
chunks of an evaluation index (its catalog) and their vectors (the shared embedding cache, so
nothing is embedded again), scores every query against every chunk with numpy, and applies
citewise's own fusion and metric code. For the configurations `citewise eval` also runs it
reproduces their figures exactly (see docs/quality.md), so its other rows are comparable.

    citewise eval ../shared/bench/scifact --split train      # builds data/eval/scifact-<hash>
    .venv/bin/python bench/scifact_sweep.py ../shared/bench/scifact data/eval/scifact-<hash>

Tune on train only.
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from citewise.api.evaluation.beir import load_dataset
from citewise.api.evaluation.ir_metrics import evaluate
from citewise.index.dense import DenseEncoder, EmbeddingCache, embedding_text
from citewise.index.sparse import STOPWORDS, tokenize
from citewise.index.vector_index import VectorHit
from citewise.retrieval.fusion import FusionConfig, fuse

DEPTH = 300  # chunks per query, as `citewise eval` uses
PREFETCH = DEPTH + 10
MORE_STOPWORDS = frozenset(
    """about above after again against all am any because been before being below between both
    did doing down during each few further had having he her here hers herself him himself his
    itself just me more most my myself no nor not now off once only other ours ourselves out over
    own same she should some such than theirs them themselves those through too under until up
    very while whom would yours yourself yourselves also may might must shall could""".split()
)


def tokeniser(stopwords=STOPWORDS, stem=True):
    """citewise's BM25 tokenisation (index/sparse.py), with the variant's switches."""
    return functools.partial(tokenize, stopwords=stopwords, stem=stem)


def bm25(texts, queries, terms, k1=1.2, b=0.75, avg_len=120.0) -> np.ndarray:
    """Query x chunk BM25 as the engine computes it: our saturated tf times Qdrant's IDF."""
    vocab: dict[str, int] = {}
    rows, cols, vals = [], [], []
    for r, text in enumerate(texts):
        toks = terms(text)
        norm = k1 * (1 - b + b * len(toks) / avg_len)
        for t, n in Counter(toks).items():
            rows.append(r)
            cols.append(vocab.setdefault(t, len(vocab)))
            vals.append(n * (k1 + 1) / (n + norm))
    docs = sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(vocab)))
    df = np.bincount(cols, minlength=len(vocab))
    idf = np.log(1 + (len(texts) - df + 0.5) / (df + 0.5))
    q_rows, q_cols = [], []
    for i, q in enumerate(queries):
        for t in set(terms(q)):
            if t in vocab:
                q_rows.append(i)
                q_cols.append(vocab[t])
    q = sp.csr_matrix((idf[q_cols], (q_rows, q_cols)), shape=(len(queries), len(vocab)))
    return (q @ docs.T).toarray()


def top(scores: np.ndarray, k: int) -> list[list[VectorHit]]:
    idx = np.argpartition(-scores, k, axis=1)[:, :k]
    out = []
    for q, row in enumerate(idx):
        row = row[np.argsort(-scores[q, row], kind="stable")]
        out.append([VectorHit(id=str(i), score=float(scores[q, i]), payload={}) for i in row])
    return out


def convex_with(normalise, dense_weight=0.5):
    """Convex fusion with another normalisation than citewise's (for comparison only)."""

    def fused(d_hits: list[VectorHit], s_hits: list[VectorHit]) -> list[VectorHit]:
        d, s = normalise(d_hits), normalise(s_hits)
        d_low, s_low = min(d.values(), default=0.0), min(s.values(), default=0.0)
        scores = {i: dense_weight * d.get(i, d_low) + (1 - dense_weight) * s.get(i, s_low)
                  for i in d.keys() | s.keys()}
        return [VectorHit(id=i, score=v, payload={})
                for i, v in sorted(scores.items(), key=lambda x: (-x[1], x[0]))]

    return fused


def min_max(hits):
    if not hits:
        return {}
    hi, lo = max(h.score for h in hits), min(h.score for h in hits)
    return {h.id: (h.score - lo) / ((hi - lo) or 1.0) for h in hits}


def three_sigma(hits):
    """Qdrant's distribution-based score fusion: mean +- 3 standard deviations -> 0..1."""
    if not hits:
        return {}
    v = np.array([h.score for h in hits])
    lo, hi = v.mean() - 3 * v.std(), v.mean() + 3 * v.std()
    return {h.id: (h.score - lo) / ((hi - lo) or 1.0) for h in hits}


def document_level(hits: list[VectorHit], doc_of) -> list[VectorHit]:
    """Every chunk takes its document's best score in the list (its own breaks ties)."""
    best: dict[str, float] = {}
    for h in hits:
        doc = doc_of[int(h.id)]
        best[doc] = max(best.get(doc, h.score), h.score)
    out = [VectorHit(id=h.id, score=best[doc_of[int(h.id)]] + 1e-6 * h.score, payload={})
           for h in hits]
    return sorted(out, key=lambda h: -h.score)


def metrics(ranked: list[list[VectorHit]], doc_of, qids, qrels) -> dict:
    run = {}
    for qid, hits in zip(qids, ranked, strict=True):
        docs: dict[str, float] = {}
        for rank, h in enumerate(hits[:DEPTH]):
            docs.setdefault(doc_of[int(h.id)], float(DEPTH - rank))
        run[qid] = docs
    return evaluate(run, qrels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("index", type=Path, help="an evaluation index folder under data/eval/")
    ap.add_argument("--split", default="train")
    args = ap.parse_args()
    data = load_dataset(args.dataset, args.split)
    qids = list(data.queries)
    queries = [data.queries[q] for q in qids]
    db = sqlite3.connect(args.index / "catalog.db")
    chunks = db.execute(
        "SELECT d.external_id, d.title, c.heading, c.text FROM chunks c "
        "JOIN documents d ON d.id = c.document_id ORDER BY d.external_id, c.ordinal"
    ).fetchall()
    doc_of = [c[0] for c in chunks]
    texts = [embedding_text(t, h, x) for _, t, h, x in chunks]
    dense = DenseEncoder(cache=EmbeddingCache(args.index.parent / "embeddings.db"))
    started = time.time()
    vectors = dense.embed_documents(texts)
    print(f"{len(chunks)} chunks, {dense.embedded_count} embedded now "
          f"({time.time() - started:.0f}s)", file=sys.stderr)
    qv = np.stack([dense.embed_query(q) for q in queries])
    s_dense = qv @ vectors.T
    d_top = top(s_dense, PREFETCH)

    def row(name, ranked):
        m = metrics(ranked, doc_of, qids, data.qrels)
        print(f"| {name} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {m['mrr@10']:.4f} |",
              flush=True)

    def sparse_top(scores):
        return [[h for h in hits if h.score > 0] for hits in top(scores, PREFETCH)]

    print("| variant | nDCG@10 | Recall@100 | MRR@10 |\n| --- | ---: | ---: | ---: |")
    row("dense only", d_top)
    s_bm25 = bm25(texts, queries, tokeniser())
    b_top = sparse_top(s_bm25)
    row("BM25 only (k1 1.2, b 0.75, stemmed, short stop list)", b_top)
    for k1, b in ((0.9, 0.4), (0.9, 0.75), (1.2, 0.4), (1.5, 0.75)):
        row(f"BM25 only, k1 {k1} b {b}", sparse_top(bm25(texts, queries, tokeniser(), k1, b)))
    row("BM25 only, no stemming", sparse_top(bm25(texts, queries, tokeniser(stem=False))))
    row("BM25 only, longer stop list",
        sparse_top(bm25(texts, queries, tokeniser(STOPWORDS | MORE_STOPWORDS))))
    seen: set[str] = set()
    title_once = []
    for (doc, title, heading, text) in chunks:
        title_once.append(embedding_text(title, heading, text) if doc not in seen else text)
        seen.add(doc)
    row("BM25 only, title in a document's first chunk only",
        sparse_top(bm25(title_once, queries, tokeniser())))
    for config in (FusionConfig("rrf", 0.5, 60), FusionConfig("rrf", 0.5, 20),
                   FusionConfig("rrf", 0.6, 60), FusionConfig("convex", 0.4),
                   FusionConfig("convex", 0.5), FusionConfig("convex", 0.6),
                   FusionConfig("convex", 0.7)):
        fused = [fuse(d, s, config) for d, s in zip(d_top, b_top, strict=True)]
        row(f"hybrid, {config.describe()}", fused)
    pairs = list(zip(d_top, b_top, strict=True))
    row("hybrid, convex with min-max normalisation, dense weight 0.5",
        [convex_with(min_max)(d, s) for d, s in pairs])
    row("hybrid, convex with mean +- 3 sigma normalisation (DBSF), dense weight 0.5",
        [convex_with(three_sigma)(d, s) for d, s in pairs])
    row("hybrid, convex 0.6 over document-level scores",
        [fuse(document_level(d, doc_of), document_level(s, doc_of), FusionConfig("convex", 0.6))
         for d, s in pairs])
    default = [fuse(d, s, FusionConfig("convex", 0.6)) for d, s in pairs]
    for m, alpha in ((2, 0.6), (3, 0.6), (3, 0.8)):
        # Rocchio: move the query towards the best m fused chunks, search dense again, fuse.
        q2 = np.stack([alpha * qv[i] + (1 - alpha) * vectors[[int(h.id) for h in f[:m]]].mean(0)
                       for i, f in enumerate(default)])
        q2 /= np.linalg.norm(q2, axis=1, keepdims=True)
        row(f"hybrid, convex 0.6 after dense pseudo-relevance feedback (top {m}, alpha {alpha})",
            [fuse(d, s, FusionConfig("convex", 0.6))
             for d, s in zip(top(q2 @ vectors.T, PREFETCH), b_top, strict=True)])
    shallow = [fuse(d[:60], s[:60], FusionConfig("convex", 0.6))
               for d, s in zip(d_top, b_top, strict=True)]
    row("hybrid, convex(dense_weight=0.6), 60 candidates per list (Recall@100 capped)", shallow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
