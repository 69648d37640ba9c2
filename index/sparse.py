"""BM25 sparse vectors, computed by us so that both Qdrant backends share one vocabulary.

A document chunk becomes ``{term_id: saturated term frequency}``; the collection's sparse vector
uses Qdrant's IDF modifier, so the engine multiplies in the inverse document frequency at query
time and the dot product with a query of ones is exactly BM25. Computing the term-frequency part
here (not with qdrant-edge's built-in encoder) keeps the server backend identical to the embedded
one and lets us control tokenisation for engineering text.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections import Counter

import Stemmer

from citewise.index.vector_index import SparseVector

# Alphanumeric runs; identifiers like kube-apiserver or db_pool_size split on their separators.
_TOKEN = re.compile(r"[A-Za-z0-9]+")
# CamelCase boundaries: "CheckoutAPIHighLatencyP99" -> Checkout, API, High, Latency, P99.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

STOPWORDS = frozenset(
    """a an and are as at be but by for from has have how i if in into is it its of on or our
    so that the their then there these this to was we were what when where which who why will
    with you your do does can""".split()
)


_local = threading.local()


def tokenize(text: str, *, stopwords: frozenset[str] = STOPWORDS, stem: bool = True) -> list[str]:
    """BM25 terms of ``text``: alphanumeric runs, lowercased, stop words dropped, stemmed.

    An exact alert or class name matches as a whole and its CamelCase parts match too. The
    keywords are the variants a tuning sweep tries (``bench/scifact_sweep.py``); the index always
    uses the defaults.
    """
    out: list[str] = []
    for raw in _TOKEN.findall(text):
        low = raw.lower()
        if low not in stopwords:
            out.append(low)
        parts = _CAMEL.findall(raw)
        if len(parts) > 1:
            out.extend(p.lower() for p in parts if len(p) > 1 and p.lower() not in stopwords)
    if not stem:
        return out
    # A PyStemmer object is not safe to share between threads: one per thread.
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    stems: list[str] = stemmer.stemWords(out)  # PyStemmer ships no types
    return stems


class Bm25Encoder:
    """Tokenise (``tokenize``), hash terms to stable 32-bit ids, weight by saturated tf."""

    version = "bm25-v1"

    def __init__(self, k1: float = 1.2, b: float = 0.75, avg_len: float = 120.0) -> None:
        self.k1 = k1
        self.b = b
        self.avg_len = avg_len

    def terms(self, text: str) -> list[str]:
        return tokenize(text)

    @staticmethod
    def term_id(term: str) -> int:
        return zlib.crc32(term.encode("utf-8"))

    def embed_document(self, text: str) -> SparseVector:
        terms = self.terms(text)
        if not terms:
            return SparseVector([], [])
        counts = Counter(self.term_id(t) for t in terms)
        norm = self.k1 * (1 - self.b + self.b * len(terms) / self.avg_len)
        indices = sorted(counts)
        values = [counts[i] * (self.k1 + 1) / (counts[i] + norm) for i in indices]
        return SparseVector(indices, values)

    def embed_query(self, text: str) -> SparseVector:
        ids = sorted({self.term_id(t) for t in self.terms(text)})
        return SparseVector(ids, [1.0] * len(ids))
