"""Synthetic history for the operator console: days of usage for many principals, sources with
their ingest runs (the last run of the first source failed, with per-document errors), and
feedback on answers. Written through the stores' own contracts (``add_usage`` then the usage
log's compaction, ``import_runs``, ``add_answer`` and ``add_feedback``), so what the console
reads is what a real installation would hold, on SQLite or PostgreSQL alike.

Used by the console's tests (``tests/api/test_console_routes.py``), the benchmark
(``bench/bench_console.py``) and the page's browser test::

    from tests.console_data import seed_console
    seeded = seed_console(stores, principals=50, sources=10, days=30)

Deterministic for a given ``seed`` and ``now``. ``seeded.usage`` holds every request written,
so a test can compute the figures it expects without asking the code under test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from citewise.api.conversation_store import StoredAnswer
from citewise.api.metering.store import Usage
from citewise.api.metering.usage import UsageLog
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.model import Citation

PROVIDERS = ("primary", "fallback")
# route, method, share of requests, typical latency in ms
ROUTES = (("/v1/answer", "POST", 0.55, 900.0), ("/v1/search", "POST", 0.30, 60.0),
          ("/v1/chat/completions", "POST", 0.10, 1200.0), ("/v1/sources", "GET", 0.05, 15.0))
FAILED_DOCUMENTS = ("runbooks/huge-dump.md", "runbooks/broken-link.md", "wiki/Latin1 page.md")


@dataclass
class Seeded:
    usage: list[Usage] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    failed_run_id: int | None = None  # the last run of sources[0]
    runs: int = 0
    feedback: int = 0
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


def seed_console(stores, *, principals: int = 5, sources: int = 3, days: int = 30,
                 requests_per_day: int = 12, runs_per_source: int = 30, feedback: int = 8,
                 now: datetime | None = None, seed: int = 34, raw_days: int = 7,
                 right_documents: tuple[str, ...] = ()) -> Seeded:
    """Write the history into ``stores`` (``api.composition.Stores``); ``requests_per_day``
    per principal. Requests older than ``raw_days`` are folded into hourly rows, as the
    server's hourly upkeep does. ``right_documents`` (``<source>/<path>`` of indexed
    documents) are named by the not-helpful feedback, so that it can join the golden set."""
    rng = random.Random(seed)
    now = (now or datetime.now(UTC)).astimezone(UTC)
    out = Seeded(now=now)
    out.usage = _usage(rng, principals, days, requests_per_day, now)
    for i in range(0, len(out.usage), 5000):
        stores.metering.add_usage(out.usage[i:i + 5000])
    UsageLog(stores.metering, raw_days=raw_days).compact(now)
    out.sources = [f"source-{i:02d}" for i in range(sources)]
    out.failed_run_id, out.runs = _runs(stores.sources, rng, out.sources, runs_per_source, now)
    out.feedback = _feedback(stores.conversations, rng, principals, feedback, now,
                             out.sources, right_documents)
    return out


def _usage(rng: random.Random, principals: int, days: int, per_day: int,
           now: datetime) -> list[Usage]:
    rows = []
    start = now - timedelta(days=days)
    for p in range(principals):
        principal = f"user:person{p:02d}"
        key = f"key-{p:02d}" if p % 3 else None  # a third sign in without a key
        weight = 1 + (p % 7)  # some use it far more than others
        for d in range(days):
            for _ in range(max(1, per_day * weight // 4)):
                at = start + timedelta(days=d, seconds=rng.randrange(86400))
                if at >= now:
                    continue
                rows.append(_request(rng, principal, key, at))
    rows.sort(key=lambda r: r.at)
    return rows


def _request(rng: random.Random, principal: str, key: str | None, at: datetime) -> Usage:
    route, method, _, typical = rng.choices(ROUTES, weights=[r[2] for r in ROUTES])[0]
    roll = rng.random()
    status = 500 if roll < 0.02 else 429 if roll < 0.04 else 403 if roll < 0.05 else 200
    latency = round(typical * rng.lognormvariate(0, 0.5), 3)
    usage = Usage(at.isoformat(timespec="milliseconds"), principal, key, route, method, status,
                  latency)
    if status == 200 and route in ("/v1/answer", "/v1/chat/completions"):
        usage.results = rng.randint(1, 4)
        if rng.random() < 0.12:
            usage.abstentions = 1
            usage.results = 0
        else:
            usage.answers = 1
        if rng.random() < 0.15:
            usage.cache_hits, usage.saved_tokens = 1, rng.randint(800, 2500)
        elif rng.random() < 0.8:
            usage.provider = PROVIDERS[0] if rng.random() < 0.85 else PROVIDERS[1]
            usage.tokens_in, usage.tokens_out = rng.randint(600, 2400), rng.randint(80, 400)
            usage.cost = round(usage.tokens_in * 0.15e-6 + usage.tokens_out * 0.6e-6, 8)
    elif status == 200 and route == "/v1/search":
        usage.results = rng.randint(0, 10)
    return usage


def _runs(store, rng: random.Random, names: list[str], per_source: int,
          now: datetime) -> tuple[int | None, int]:
    latest = store.list_runs(None, limit=1)
    next_id = (latest[0]["id"] if latest else 0) + 1
    runs, failed_id = [], None
    for s, name in enumerate(names):
        store.ensure_source(name, "folder" if s % 2 else "git", {"path": f"/srv/{name}"})
        documents = 40 + 25 * s
        for r in range(per_source):
            started = now - timedelta(days=per_source - r, hours=s, minutes=rng.randrange(50))
            seconds = round(rng.uniform(4, 30) + s, 3)
            last_of_first = s == 0 and r == per_source - 1
            errors = []
            if last_of_first:
                errors = [{"external_id": uri, "error": error, "at": started.isoformat()}
                          for uri, error in zip(FAILED_DOCUMENTS, (
                              "file is 9000000 bytes, over the limit of 5000000 (raise "
                              "max_file_bytes for this source, or exclude the file)",
                              "cannot read file: Permission denied",
                              "'utf-8' codec can't decode byte 0xe9: not valid UTF-8"),
                              strict=True)]
                errors.append({"external_id": None, "error": "the mass-deletion brake "
                               "stopped the run: 80% of the documents would go",
                               "at": started.isoformat()})
                failed_id = next_id
            added = rng.randint(0, 3) if r else documents
            runs.append({
                "id": next_id, "source": name, "trigger": "schedule" if r % 5 else "api",
                "status": "failed" if last_of_first else "succeeded",
                "started_at": started.isoformat(timespec="seconds"),
                "finished_at": (started + timedelta(seconds=seconds)).isoformat(
                    timespec="seconds"),
                "seen": documents, "added": added, "updated": rng.randint(0, 4) if r else 0,
                "unchanged": documents - added, "deleted": rng.randint(0, 1) if r else 0,
                "failed": len(FAILED_DOCUMENTS) if last_of_first else 0,
                "chunks_written": added * 6, "chunks_embedded": added * 6,
                "message": "the mass-deletion brake stopped the run" if last_of_first else None,
                "host": "seed", "pid": None, "errors": errors})
            next_id += 1
    store.import_runs(runs)
    return failed_id, len(runs)


def _feedback(store, rng: random.Random, principals: int, count: int, now: datetime,
              sources: list[str], right_documents: tuple[str, ...]) -> int:
    for i in range(count):
        at = (now - timedelta(days=rng.randrange(1, 28), minutes=i)).isoformat(
            timespec="seconds")
        source = sources[i % len(sources)] if sources else "kb"
        citation = Citation(n=1, document_id=f"doc{i}", source=source,
                            title=f"Runbook {i}", heading="Mitigation", path=f"runbook-{i}.md",
                            start_line=10 + i, end_line=20 + i, score=0.6, quote="...")
        answer = Answer(answer=f"Restart the worker pool [1] (answer {i}).", kind="action",
                        citations=[citation], evidence=0.6)
        answer_id = f"seed-answer-{i}"
        owner = f"user:person{i % max(principals, 1):02d}"
        store.add_answer(StoredAnswer(id=answer_id, owner=owner,
                                      question=f"How do I recover the worker pool {i}?",
                                      standalone=f"How do I recover the worker pool {i}?",
                                      answer=answer, created_at=at,
                                      documents=[citation.document_id]))
        helpful = i % 3 == 0
        right = None if helpful or not right_documents else right_documents[
            i % len(right_documents)]
        store.add_feedback(answer_id, owner, helpful,
                           None if helpful else f"wrong runbook ({i})", None, at,
                           right_document=right)
    return count
