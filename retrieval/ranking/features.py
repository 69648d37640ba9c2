"""What the learned second stage knows of each fused candidate: one row of numbers per chunk.

Every feature is something search already has in hand, or can compute from the candidate's own
payload in microseconds: the dense and BM25 scores and ranks that fusion saw, how much of the
question lands in the chunk's body, title, heading and path, exact phrases and alert names,
the question's kind (``answering/question.py``) against the kind of section the chunk sits in,
what kind of document it is, how fresh it is, and what people said of it (feedback counts).

``FEATURES`` is the one list of names, in row order; a model file records the list it was
trained on, and ``model.py`` refuses a file whose list differs, so a row is never read with the
wrong meaning. Changing, adding or reordering a feature means retraining: bump nothing else.

The field matches are not BM25 proper (that would need each field's collection statistics,
which the index does not keep per field): each is the share of the question's terms found in
the field, each term weighted by how rare it is among the candidates (a term every candidate
holds tells them apart by nothing). The body's true BM25 score is the ``sparse_score`` feature.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from threading import Lock
from typing import TYPE_CHECKING, Protocol

from citewise.index.sparse import tokenize
from citewise.retrieval.answering.question import Question, analyse
from citewise.retrieval.ranking.signals import Signals

if TYPE_CHECKING:
    from citewise.retrieval.search import SearchResult

MISSING = float("nan")  # LightGBM's missing value: a candidate one list did not return

QUESTION_KINDS = ("action", "alert", "fact", "code", "cause", "definition", "yesno")

# What a section is for, read from its heading path (the last heading weighs most, but a
# "Mitigation > Step 2" chunk is still a procedure).
SECTION_KINDS: dict[str, re.Pattern[str]] = {
    "procedure": re.compile(r"\b(mitigat\w*|steps?|procedures?|how to|resolv\w*|resolution|"
                            r"fix\w*|remediat\w*|runbook|playbook|recover\w*|restor\w*|"
                            r"instructions?|actions?|what to do|solution)\b", re.I),
    "meaning": re.compile(r"\b(meaning|overview|descriptions?|summary|about|introduction|"
                          r"what is|purpose|background|context)\b", re.I),
    "diagnosis": re.compile(r"\b(diagnos\w*|troubleshoot\w*|investigat\w*|debug\w*|check\w*|"
                            r"symptoms?|verif\w*|monitor\w*|dashboards?|logs?)\b", re.I),
    "cause": re.compile(r"\b(causes?|why|root|reasons?)\b", re.I),
    "impact": re.compile(r"\b(impact|severity|consequences?)\b", re.I),
    "related": re.compile(r"\b(related|see also|links?|references?|further reading)\b", re.I),
}

# Which section kinds answer which question kinds (``kind_agrees``).
_AGREES = {
    "action": {"procedure", "diagnosis"},
    "alert": {"meaning", "procedure", "diagnosis"},
    "cause": {"cause", "diagnosis"},
    "definition": {"meaning"},
    "fact": {"meaning"},
    "general": {"meaning"},
    "yesno": {"meaning"},
}

_INDEX_PAGES = frozenset({"readme.md", "index.md", "_index.md", "readme", "index.html"})

FEATURES: tuple[str, ...] = (
    "fused_score", "fused_rank",
    "dense_score", "dense_rank", "dense_gap",
    "sparse_score", "sparse_rank", "sparse_share",
    "body_match", "title_match", "heading_match", "path_match", "phrase_match",
    "alert_in_title_or_path", "alert_in_text", "names_matched",
    *(f"question_{k}" for k in QUESTION_KINDS),
    *(f"section_{k}" for k in SECTION_KINDS),
    "kind_agrees", "is_code", "is_index_page", "path_depth", "first_line", "words",
    "document_chunks", "document_best_rank",
    "age_days", "feedback_helpful", "feedback_unhelpful",
    "question_terms",
)


class FeedbackCounts(Protocol):
    def counts(self) -> Mapping[str, tuple[int, int]]:
        """Per document id: how many times an answer citing it was marked helpful, and how
        many times not helpful."""
        ...


class NoFeedback:
    def counts(self) -> Mapping[str, tuple[int, int]]:
        return {}


class RankFeatures:
    """Builds the feature rows of a question's candidates. Holds a cache of each chunk's terms
    (a chunk id names one version of one chunk, so its terms never change): the same runbooks
    come back for many questions, and tokenising their text is most of the cost. A chunk's
    terms are kept as one string (about 2 KB a chunk, so 20 MB for the 10,000 the cache
    holds), not as sets, which would take twenty times that."""

    def __init__(self, feedback: FeedbackCounts | None = None, cache_size: int = 10_000) -> None:
        self.feedback = feedback or NoFeedback()
        self._terms: OrderedDict[str, _ChunkTerms] = OrderedDict()
        self._cache_size = cache_size
        self._lock = Lock()

    def rows(self, query: str, results: list[SearchResult], signals: Signals,
             question: Question | None = None) -> list[list[float]]:
        """One row per result, in ``FEATURES`` order; ``results`` in fused order."""
        if not results:
            return []
        question = question or analyse(query)
        q_terms = list(dict.fromkeys(tokenize(query)))
        q_pairs = {f" {a} {b} " for a, b in zip(q_terms, q_terms[1:], strict=False)}
        chunks = [self._chunk_terms(r) for r in results]
        idf = _idf(q_terms, chunks)
        total = sum(idf.values()) or 1.0
        alerts = [a.lower() for a in question.alerts]
        names = [n.lower() for n in question.names]
        per_doc: dict[str, list[int]] = {}
        for rank, r in enumerate(results):
            per_doc.setdefault(r.document_id, []).append(rank)
        best_dense = max((p.score for p in signals.dense.values()), default=0.0)
        best_sparse = max((p.score for p in signals.sparse.values()), default=0.0)
        depth = signals.depth or len(results)
        feedback = self.feedback.counts()
        now = datetime.now(UTC)
        rows = []
        for rank, (r, c) in enumerate(zip(results, chunks, strict=True)):
            dense = signals.dense.get(r.chunk_id)
            sparse = signals.sparse.get(r.chunk_id)
            sections = {k for k, pattern in SECTION_KINDS.items() if pattern.search(r.heading)}
            if r.symbol:
                sections_code = 1.0
            else:
                sections_code = float((r.metadata or {}).get("language") is not None
                                      and not (r.path or "").endswith((".md", ".html", ".txt")))
            agrees = (question.kind == "code" and sections_code > 0) or bool(
                _AGREES.get(question.kind, set()) & sections)
            helpful, unhelpful = feedback.get(r.document_id, (0, 0))
            where = f"{r.title} {r.path or ''}".lower()
            text = r.text.lower() if alerts or names else ""
            everything = f"{where} {r.heading.lower()} {text}"
            in_body = frozenset(t for t in q_terms if f" {t} " in c.body)
            row = [
                r.score, float(rank),
                dense.score if dense else MISSING,
                float(dense.rank if dense else depth),
                best_dense - dense.score if dense else MISSING,
                sparse.score if sparse else MISSING,
                float(sparse.rank if sparse else depth),
                sparse.score / best_sparse if sparse and best_sparse > 0 else 0.0,
                _share(q_terms, in_body, idf, total),
                _share(q_terms, c.title, idf, total),
                _share(q_terms, c.heading, idf, total),
                _share(q_terms, c.path, idf, total),
                sum(p in c.body for p in q_pairs) / len(q_pairs) if q_pairs else 0.0,
                float(any(a in where for a in alerts)),
                float(any(a in text for a in alerts)),
                sum(n in everything for n in names) / len(names) if names else 0.0,
                *(float(question.kind == k) for k in QUESTION_KINDS),
                *(float(k in sections) for k in SECTION_KINDS),
                float(agrees), sections_code,
                float((r.path or "").rsplit("/", 1)[-1].lower() in _INDEX_PAGES),
                float((r.path or "").count("/")),
                math.log1p(r.start_line) if r.start_line else MISSING,
                math.log1p(c.words),
                float(len(per_doc[r.document_id])),
                float(per_doc[r.document_id][0]),
                _age_days(r, now),
                math.log1p(helpful), math.log1p(unhelpful),
                float(len(q_terms)),
            ]
            rows.append(row)
        return rows

    def _chunk_terms(self, r: SearchResult) -> _ChunkTerms:
        with self._lock:
            cached = self._terms.get(r.chunk_id)
            if cached is not None:
                self._terms.move_to_end(r.chunk_id)
                return cached
        body = tokenize(r.text)
        terms = _ChunkTerms(
            body=f" {' '.join(body)} ",
            title=frozenset(tokenize(r.title)), heading=frozenset(tokenize(r.heading)),
            path=frozenset(tokenize(re.sub(r"[/._-]+", " ", r.path or ""))), words=len(body))
        with self._lock:
            self._terms[r.chunk_id] = terms
            while len(self._terms) > self._cache_size:
                self._terms.popitem(last=False)
        return terms


@dataclass(frozen=True)
class _ChunkTerms:
    body: str  # its terms in order, space-separated with a space at each end
    title: frozenset[str]
    heading: frozenset[str]
    path: frozenset[str]
    words: int


def _idf(q_terms: list[str], chunks: list[_ChunkTerms]) -> dict[str, float]:
    """How rare each question term is among the candidates (any field), BM25's formula."""
    n = len(chunks)
    out = {}
    for t in q_terms:
        padded = f" {t} "
        df = sum(padded in c.body or t in c.title or t in c.heading or t in c.path
                 for c in chunks)
        out[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return out


def _share(q_terms: list[str], field: frozenset[str], idf: dict[str, float],
           total: float) -> float:
    return sum(idf[t] for t in q_terms if t in field) / total


def _age_days(r: SearchResult, now: datetime) -> float:
    """Days since the document last changed, where its source says (a git commit's date)."""
    last = (r.metadata or {}).get("last_commit")
    date = last.get("date") if isinstance(last, dict) else None
    if not isinstance(date, str):
        return MISSING
    try:
        at = datetime.fromisoformat(date)
    except ValueError:
        return MISSING
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(0.0, (now - at).total_seconds() / 86400)
