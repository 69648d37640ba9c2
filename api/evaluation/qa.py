"""An organisation's golden set: questions it knows the answer documents of.

``golden-set.jsonl`` holds one question per line::

    {"question": "How do I fail over the Redis cache?",
     "relevant": ["runbooks/redis-cache-failover.md"], "answerable": true}
    {"question": "Who won the 1998 World Cup?", "relevant": [], "answerable": false}

``relevant`` names documents as ``<source>/<path>``; optional ``user`` and ``groups`` ask as
that identity (for restricted documents). ``must_contain_any`` lists strings of which an
answer must quote at least one (the command, the value, the name asked for): the answer is
right only if it carries the key fact, not merely if it cites the right page. ``kind`` says
what shape the answer should take (action, alert, fact, code, definition...) and ``split``
(tune or test) keeps apart the questions thresholds were tuned on and those that measure them.

Search is scored on answerable questions (does a relevant document come back, how high);
answers on all of them: the key fact in the answer, citations that point at relevant
documents, answerable questions answered and the others abstained.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from citewise.api.evaluation.runner import RetrievalConfig, percentile
from citewise.errors import InvalidRequestError
from citewise.types import Identity

HIT_KS = (1, 3, 5, 10)


@dataclass
class GoldenQuestion:
    question: str
    relevant: list[str]
    answerable: bool
    identity: Identity = field(default_factory=Identity.anonymous)
    must_contain_any: list[str] = field(default_factory=list)
    kind: str = "general"
    split: str = "test"


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
                must_contain_any=[str(m) for m in row.get("must_contain_any", [])],
                kind=str(row.get("kind", "general")),
                split=str(row.get("split", "test")),
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


def doc_key(source: str, path: str | None, document_id: str) -> str:
    return f"{source}/{path}" if path else f"{source}/{document_id}"


def evaluate_search(search, questions: list[GoldenQuestion], config: RetrievalConfig) -> dict:
    """hit@k (a relevant document among the first k documents) and MRR@10, answerable only."""
    answerable = [q for q in questions if q.answerable]
    # Embed the questions first, so that latency is search alone for every configuration.
    for q in answerable:
        search.query_vector(q.question)
    firsts: list[int | None] = []
    timings = []
    misses = []
    for q in answerable:
        started = time.perf_counter()
        results = search.search(q.question, q.identity, top_k=30, mode=config.mode,
                                fusion=config.fusion)
        timings.append((time.perf_counter() - started) * 1000)
        docs: list[str] = []
        for r in results:
            key = doc_key(r.source, r.path, r.document_id)
            if key not in docs:
                docs.append(key)
        first = next((i for i, d in enumerate(docs) if d in q.relevant), None)
        firsts.append(first)
        if first != 0:
            misses.append({"question": q.question, "relevant": q.relevant, "got": docs[:3],
                           "split": q.split})
    by_split = {split: _search_figures([f for f, q in zip(firsts, answerable, strict=True)
                                        if q.split == split])
                for split in sorted({q.split for q in answerable})}
    return {
        "config": config.name,
        **_search_figures(firsts),
        "p50_ms": statistics.median(timings) if timings else 0.0,
        "p95_ms": percentile(timings, 95),
        "by_split": by_split,
        "misses": misses,
    }


def _search_figures(firsts: list[int | None]) -> dict:
    """hit@k and MRR@10 from where each question's first relevant document came."""
    n = max(1, len(firsts))
    return {
        "questions": len(firsts),
        **{f"hit@{k}": sum(f is not None and f < k for f in firsts) / n for k in HIT_KS},
        "mrr@10": sum(1.0 / (f + 1) for f in firsts if f is not None and f < 10) / n,
    }


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def has_key_fact(answer_text: str, must_contain_any: list[str]) -> bool:
    """Whether the answer quotes one of the strings (case and spacing aside)."""
    text = _normal(answer_text.replace("`", ""))
    return any(_normal(m.replace("`", "")) in text for m in must_contain_any)


def evaluate_answers(answers, questions: list[GoldenQuestion]) -> dict:
    """Key fact in the answer, citation precision, answered and abstained shares; overall and
    per split (tune/test) and kind."""
    rows = []
    for q in questions:
        started = time.perf_counter()
        a = answers.answer(q.question, q.identity, use_cache=False)
        ms = (time.perf_counter() - started) * 1000
        keys = [doc_key(c.source, c.path, c.document_id) for c in a.citations]
        rows.append({
            "q": q, "abstained": a.abstained, "ms": ms, "keys": keys,
            "key_fact": bool(q.must_contain_any) and not a.abstained
            and has_key_fact(a.answer, q.must_contain_any),
            "answer": a.answer, "reason": a.reason, "kind": a.kind, "evidence": a.evidence,
        })
    out = _answer_figures(rows)
    out["by_split"] = {split: _answer_figures([r for r in rows if r["q"].split == split])
                       for split in sorted({r["q"].split for r in rows})}
    out["by_kind"] = {kind: _answer_figures([r for r in rows if r["q"].kind == kind])
                      for kind in sorted({r["q"].kind for r in rows})}
    for part in (*out["by_split"].values(), *out["by_kind"].values()):
        part.pop("problems", None)
    return out


def _answer_figures(rows: list[dict]) -> dict:
    answerable = [r for r in rows if r["q"].answerable]
    unanswerable = [r for r in rows if not r["q"].answerable]
    answered = [r for r in answerable if not r["abstained"]]
    with_facts = [r for r in answerable if r["q"].must_contain_any]
    cited = sum(len(r["keys"]) for r in answered)
    relevant_cited = sum(sum(k in r["q"].relevant for k in r["keys"]) for r in answered)
    first_relevant = sum(bool(r["keys"]) and r["keys"][0] in r["q"].relevant for r in answered)
    timings = sorted(r["ms"] for r in rows)
    problems = []
    for r in answerable:
        q = r["q"]
        if r["abstained"]:
            problems.append({"question": q.question, "problem": "abstained",
                             "reason": r["reason"]})
        elif q.must_contain_any and not r["key_fact"]:
            problems.append({"question": q.question, "problem": "key fact missing",
                             "kind": q.kind, "answered_as": r["kind"],
                             "wanted": q.must_contain_any, "cited": r["keys"]})
        elif not r["keys"] or r["keys"][0] not in q.relevant:
            problems.append({"question": q.question, "problem": "first citation not relevant",
                             "cited": r["keys"], "relevant": q.relevant})
    for r in unanswerable:
        if not r["abstained"]:
            problems.append({"question": r["q"].question,
                             "problem": "answered an unanswerable question",
                             "evidence": round(r["evidence"], 3), "cited": r["keys"]})
    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "answered_share": len(answered) / max(1, len(answerable)),
        "key_fact_share": sum(r["key_fact"] for r in with_facts) / max(1, len(with_facts)),
        "citation_precision": relevant_cited / max(1, cited),
        "first_citation_relevant": first_relevant / max(1, len(answered)),
        "abstained_share": sum(r["abstained"] for r in unanswerable) / max(1, len(unanswerable)),
        "p50_ms": percentile(timings, 50),
        "p95_ms": percentile(timings, 95),
        "problems": problems,
    }
