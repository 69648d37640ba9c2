"""Where metering keeps what it measured: usage per request then per hour, the audit log, and
the token buckets' levels (so that a restart hands nobody a fresh allowance).

``MeteringStore`` is the contract ``usage.py``, ``audit.py`` and ``buckets.py`` keep their
records in; ``sqlite_store.py`` keeps them in the embedded database. The audit log is
append-only: no method changes or removes an entry, and the SQLite tables refuse it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

GROUPINGS = ("principal", "key", "route", "day", "provider")
# What the console groups by besides: the hour, and everything at once (one row, group None).
REPORT_GROUPINGS = (*GROUPINGS, "hour", "all")


@dataclass
class Usage:
    at: str  # ISO time, UTC
    principal: str
    key: str | None
    route: str  # the route template: /v1/documents/{document_id}
    method: str
    status: int
    latency_ms: float
    results: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    request_id: str | None = None
    cache_hits: int = 0  # 1 when the answer came from the semantic cache
    saved_tokens: int = 0  # the model tokens that hit did not spend
    provider: str | None = None  # the model provider that wrote the answer (None: no model)
    answers: int = 0  # 1 when the request answered a question (not an abstention)
    abstentions: int = 0  # 1 when it declined to answer one


@dataclass
class HourlyUsage:
    """The requests of one hour, principal, key and route, once folded (``compact_usage``)."""

    hour: str  # ISO, to the hour, UTC: 2026-03-01T10
    principal: str
    key: str | None
    route: str
    requests: int
    errors: int
    denied: int
    latency_ms_sum: float
    results: int
    tokens_in: int
    tokens_out: int
    cost: float
    cache_hits: int = 0
    saved_tokens: int = 0
    provider: str | None = None
    answers: int = 0
    abstentions: int = 0
    # Requests per latency bucket (``latency.py``'s index -> count): what p50 and p95 are read
    # from once the requests themselves are gone.
    latency_counts: dict[int, int] = field(default_factory=dict)


@dataclass
class AuditEntry:
    at: str  # ISO time, UTC, to the millisecond
    actor: str
    action: str
    outcome: str = "ok"
    key: str | None = None
    target: str | None = None
    detail: dict | None = None
    client: str | None = None
    request_id: str | None = None


class MeteringStore(Protocol):
    # Usage -------------------------------------------------------------------------------------
    def add_usage(self, rows: list[Usage]) -> None:
        """Keep these requests, all or none."""
        ...

    def compact_usage(self, before: str, drop_before: str) -> int:
        """Fold the requests older than ``before`` into one row per hour, principal, key,
        route and provider (added to the hour's row if it has one) with the count of its
        requests per latency bucket (``latency.py``), and drop hourly rows older than
        ``drop_before``; how many requests were folded."""
        ...

    def usage_report(self, since: str, until: str, group_by: str) -> list[dict]:
        """Requests, errors (status 400 and up), refusals (401, 403, 429), mean latency,
        results, tokens, cost, cache hits, saved tokens, answers and abstentions per
        ``group_by`` (one of ``REPORT_GROUPINGS``) between ``since`` and ``until``, from
        per-request and hourly rows alike; most requests first. Each row names its group under
        ``group_by`` (None for no key, no provider, or ``all``) and carries ``latency_counts``,
        its requests per latency bucket, from which ``UsageLog`` reads p50 and p95, and the
        unrounded ``latency_ms_sum`` and ``cost_sum``, with which it adds windows up."""
        ...

    def usage_by_day(self, first_day: str, end_day: str, dimension: str,
                     per_day: bool) -> list[dict]:
        """From the daily rows (``rollup.py``), the days ``first_day`` <= day < ``end_day``
        (YYYY-MM-DD, UTC) of one of ``rollup.DIMENSIONS``: per ``name`` (``''`` for no key, no
        provider, or ``all``), and with ``per_day`` per ``day`` and name; each with
        ``rollup.SUMS`` (unrounded) and ``latency_counts``; most requests first."""
        ...

    # The audit log -----------------------------------------------------------------------------
    def append_audit(self, entry: AuditEntry) -> None: ...

    def read_audit(self, since: str | None = None, limit: int = 100,
                   action: str | None = None, after_id: int | None = None, *,
                   actor: str | None = None, outcome: str | None = None) -> list[dict]:
        """Entries, newest first, each with an ``id`` that grows with every entry appended
        (``after_id``: only later ones) and its ``detail`` decoded; ``action``, ``actor`` and
        ``outcome`` keep the entries that have that value, exactly."""
        ...

    # Token buckets -----------------------------------------------------------------------------
    def load_buckets(self) -> dict[str, tuple[float, float]]:
        """Every kept bucket's ``(tokens, at)``."""
        ...

    def save_buckets(self, levels: dict[str, tuple[float, float]], forget_before: float) -> None:
        """Keep these buckets' levels, and forget buckets untouched since ``forget_before``
        (a full bucket needs no row)."""
        ...

    # A copy of the whole store (``citewise migrate-catalog``: another installation's records
    # brought into this one, rerun until the cut-over, so every write here is idempotent).
    # Requests and audit entries keep their ids, which is what makes a second copy add
    # nothing twice. -----------------------------------------------------------------------
    def export_usage(self) -> Iterator[tuple[int, Usage]]:
        """Every request not yet folded into an hour, with its id, lowest first."""
        ...

    def export_hourly_usage(self) -> list[HourlyUsage]: ...

    def export_audit(self) -> Iterator[tuple[int, AuditEntry]]:
        """Every entry with its id, in the order they were appended."""
        ...

    def import_usage(self, rows: list[tuple[int, Usage]]) -> int:
        """Keep these requests under their own ids, all or none; a request whose id is kept
        already is left as it is. How many were new. Requests added later get higher ids."""
        ...

    def import_hourly_usage(self, rows: list[HourlyUsage]) -> None:
        """Keep these hours, each replacing the row of the same hour, principal, key and
        route."""
        ...

    def import_audit(self, entries: list[tuple[int, AuditEntry]]) -> int:
        """Append these entries under their own ids, all or none; an entry whose id is kept
        already is left as it is (the log stays append-only). How many were new. Entries
        appended later get higher ids, so the log's order stays the order of events."""
        ...

    def close(self) -> None: ...
