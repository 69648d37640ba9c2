"""An organisation's golden set: questions it knows the answer documents of.

``golden-set.jsonl`` holds one question per line::

    {"question": "How do I fail over the Redis cache?",
     "relevant": ["runbooks/redis-cache-failover.md"], "answerable": true}
    {"question": "Who won the 1998 World Cup?", "relevant": [], "answerable": false}

``relevant`` names documents as ``<source>/<path>``; optional ``user`` and ``groups`` ask as
that identity (for restricted documents). Search is scored on answerable questions (does a
relevant document come back, how high); answers on all of them: citations should point at
relevant documents, answerable questions should be answered and the others should abstain.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from citewise.api.evaluation.runner import RetrievalConfig
from citewise.errors import InvalidRequestError
from citewise.types import Identity

HIT_KS = (1, 3, 5, 10)


@dataclass
class GoldenQuestion:
    question: str
    relevant: list[str]
    answerable: bool
    identity: Identity = field(default_factory=Identity.anonymous)


def load_golden_set(path: Path | str) -> list[GoldenQuestion]:
    path = Path(path)
    if not path.is_file():
        raise InvalidRequestError(f"{path} does not exist", hint="pass a JSON Lines golden set")
    questions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            row = json.loads(line)
            q = GoldenQuestion(
                question=str(row["question"]),
                relevant=[str(r).strip("/") for r in row.get("relevant", [])],
                answerable=bool(row.get("answerable", True)),
                identity=Identity(row.get("user"), tuple(row.get("groups", ()))),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidRequestError(
                f"{path}:{number} is not a golden-set line: {e}",
                hint='{"question": "...", "relevant": ["source/path"], "answerable": true}',
            ) from None
        if q.answerable and not q.relevant:
            raise InvalidRequestError(
                f"{path}:{number}: an answerable question needs at least one relevant document"
            )
        questions.append(q)
    if not questions:
        raise InvalidRequestError(f"{path} holds no questions")
    return questions


def _doc_key(source: str, path: str | None, document_id: str) -> str:
    return f"{source}/{path}" if path else f"{source}/{document_id}"


def evaluate_search(search, questions: list[GoldenQuestion], config: RetrievalConfig) -> dict:
    """hit@k (a relevant document among the first k documents) and MRR@10, answerable only."""
    answerable = [q for q in questions if q.answerable]
    # Embed the questions first, so that latency is search alone for every configuration.
    for q in answerable:
        search.query_vector(q.question)
    hits = {k: 0 for k in HIT_KS}
    reciprocal = []
    timings = []
    misses = []
    for q in answerable:
        started = time.perf_counter()
        results = search.search(q.question, q.identity, top_k=30, mode=config.mode,
                                fusion=config.fusion)
        timings.append((time.perf_counter() - started) * 1000)
        docs: list[str] = []
        for r in results:
            key = _doc_key(r.source, r.path, r.document_id)
            if key not in docs:
                docs.append(key)
        first = next((i for i, d in enumerate(docs) if d in q.relevant), None)
        for k in HIT_KS:
            hits[k] += first is not None and first < k
        reciprocal.append(1.0 / (first + 1) if first is not None and first < 10 else 0.0)
        if first != 0:
            misses.append({"question": q.question, "relevant": q.relevant, "got": docs[:3]})
    n = max(1, len(answerable))
    return {
        "config": config.name,
        "questions": len(answerable),
        **{f"hit@{k}": hits[k] / n for k in HIT_KS},
        "mrr@10": sum(reciprocal) / n,
        "p50_ms": statistics.median(timings) if timings else 0.0,
        "misses": misses,
    }


def evaluate_answers(answers, questions: list[GoldenQuestion]) -> dict:
    """Citation precision, answered share of answerable ones, abstained share of the others."""
    cited = relevant_cited = first_relevant = answered = abstained = 0
    wrong: list[dict] = []
    answerable = [q for q in questions if q.answerable]
    unanswerable = [q for q in questions if not q.answerable]
    for q in answerable:
        a = answers.answer(q.question, q.identity)
        if a.abstained:
            wrong.append({"question": q.question, "problem": "abstained"})
            continue
        answered += 1
        keys = [_doc_key(c.source, c.path, c.document_id) for c in a.citations]
        cited += len(keys)
        relevant_cited += sum(k in q.relevant for k in keys)
        first_relevant += bool(keys) and keys[0] in q.relevant
        if not keys or keys[0] not in q.relevant:
            wrong.append({"question": q.question, "problem": "first citation not relevant",
                          "cited": keys, "relevant": q.relevant})
    for q in unanswerable:
        a = answers.answer(q.question, q.identity)
        if a.abstained:
            abstained += 1
        else:
            wrong.append({"question": q.question, "problem": "answered an unanswerable question",
                          "evidence": round(a.evidence, 3)})
    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "answered_share": answered / max(1, len(answerable)),
        "citation_precision": relevant_cited / max(1, cited),
        "first_citation_relevant": first_relevant / max(1, answered),
        "abstained_share": abstained / max(1, len(unanswerable)),
        "problems": wrong,
    }
