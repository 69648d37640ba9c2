"""Where metering keeps what it measured: usage per request then per hour, the audit log, and
the token buckets' levels (so that a restart hands nobody a fresh allowance).

``MeteringStore`` is the contract ``usage.py``, ``audit.py`` and ``buckets.py`` keep their
records in; ``sqlite_store.py`` keeps them in the embedded database. The audit log is
append-only: no method changes or removes an entry, and the SQLite tables refuse it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

GROUPINGS = ("principal", "key", "route", "day")


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
        """Fold the requests older than ``before`` into one row per hour, principal, key and
        route (added to the hour's row if it has one), and drop hourly rows older than
        ``drop_before``; how many requests were folded."""
        ...

    def usage_report(self, since: str, until: str, group_by: str) -> list[dict]:
        """Requests, errors (status 400 and up), refusals (401, 403, 429), mean latency,
        results, tokens, cost, cache hits and saved tokens per ``group_by`` (one of
        ``GROUPINGS``) between ``since`` and ``until``, from per-request and hourly rows alike;
        most requests first. Each row names its group under ``group_by`` (None for no key)."""
        ...

    # The audit log -----------------------------------------------------------------------------
    def append_audit(self, entry: AuditEntry) -> None: ...

    def read_audit(self, since: str | None = None, limit: int = 100,
                   action: str | None = None, after_id: int | None = None) -> list[dict]:
        """Entries, newest first, each with an ``id`` that grows with every entry appended
        (``after_id``: only later ones) and its ``detail`` decoded."""
        ...

    # Token buckets -----------------------------------------------------------------------------
    def load_buckets(self) -> dict[str, tuple[float, float]]:
        """Every kept bucket's ``(tokens, at)``."""
        ...

    def save_buckets(self, levels: dict[str, tuple[float, float]], forget_before: float) -> None:
        """Keep these buckets' levels, and forget buckets untouched since ``forget_before``
        (a full bucket needs no row)."""
        ...

    def close(self) -> None: ...
