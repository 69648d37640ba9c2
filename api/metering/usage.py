"""Usage: every request, who made it, what it cost and what the answer cache saved; kept small.

The front door hands each finished request to ``UsageLog.record`` (a list append); a background
flush writes them in one transaction every second, so recording never waits on the database.
Rows older than ``CITEWISE_USAGE_RAW_DAYS`` are folded into one row per hour, principal, key and
route, and hourly rows older than ``CITEWISE_USAGE_RETENTION_DAYS`` are dropped: a year of use
by a few hundred people stays in the megabytes.
"""

from __future__ import annotations

import threading
from dataclasses import astuple, dataclass
from datetime import UTC, datetime, timedelta

from citewise.errors import InvalidRequestError
from citewise.index.catalog import Catalog

GROUPINGS = {"principal": "principal", "key": "key", "route": "route", "day": "day"}


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


class UsageLog:
    def __init__(self, catalog: Catalog, *, raw_days: int = 7, retention_days: int = 400) -> None:
        self.catalog = catalog
        self.raw_days = raw_days
        self.retention_days = retention_days
        self._pending: list[Usage] = []
        self._lock = threading.Lock()

    def record(self, usage: Usage) -> None:
        with self._lock:
            self._pending.append(usage)

    def flush(self) -> int:
        with self._lock:
            rows, self._pending = self._pending, []
        if rows:
            conn = self.catalog.connection()
            with self.catalog.transaction():
                conn.executemany(
                    "INSERT INTO usage (at, principal, key, route, method, status, latency_ms, "
                    "results, tokens_in, tokens_out, cost, request_id, cache_hits, saved_tokens) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [astuple(r) for r in rows])
                used: dict[str, str] = {}
                for r in rows:
                    if r.key and r.status < 400:
                        used[r.key] = max(used.get(r.key, ""), r.at)
                conn.executemany("UPDATE api_keys SET last_used_at = ? WHERE name = ?",
                                 [(at, name) for name, at in used.items()])
        return len(rows)

    def compact(self, now: datetime | None = None) -> int:
        """Fold raw rows older than ``raw_days`` into hourly rows; drop what is past retention.
        Returns the number of raw rows folded."""
        now = now or datetime.now(UTC)
        cutoff = (now - timedelta(days=self.raw_days)).isoformat(timespec="seconds")
        expiry = (now - timedelta(days=self.retention_days)).isoformat(timespec="seconds")
        conn = self.catalog.connection()
        with self.catalog.transaction():
            conn.execute(
                "INSERT INTO usage_hourly (hour, principal, key, route, requests, errors, denied,"
                " latency_ms_sum, results, tokens_in, tokens_out, cost, cache_hits, "
                "saved_tokens) "
                "SELECT substr(at, 1, 13), principal, coalesce(key, ''), route, count(*), "
                "sum(status >= 400), sum(status IN (401, 403, 429)), sum(latency_ms), "
                "sum(results), sum(tokens_in), sum(tokens_out), sum(cost), sum(cache_hits), "
                "sum(saved_tokens) FROM usage "
                "WHERE at < ? GROUP BY 1, 2, 3, 4 "
                "ON CONFLICT(hour, principal, key, route) DO UPDATE SET "
                "requests = requests + excluded.requests, errors = errors + excluded.errors, "
                "denied = denied + excluded.denied, "
                "latency_ms_sum = latency_ms_sum + excluded.latency_ms_sum, "
                "results = results + excluded.results, "
                "tokens_in = tokens_in + excluded.tokens_in, "
                "tokens_out = tokens_out + excluded.tokens_out, cost = cost + excluded.cost, "
                "cache_hits = cache_hits + excluded.cache_hits, "
                "saved_tokens = saved_tokens + excluded.saved_tokens",
                [cutoff])
            folded = conn.execute("DELETE FROM usage WHERE at < ?", [cutoff]).rowcount
            conn.execute("DELETE FROM usage_hourly WHERE hour < ?", [expiry[:13]])
        return folded

    def report(self, since: datetime, until: datetime | None = None,
               group_by: str = "principal") -> list[dict]:
        """Requests, errors, refusals, mean latency, results, tokens and cost per group, from
        the raw rows and the hourly ones alike."""
        if group_by not in GROUPINGS:
            raise InvalidRequestError(f"cannot group usage by {group_by!r}",
                                      hint=f"group_by is one of {', '.join(GROUPINGS)}")
        self.flush()
        until = until or datetime.now(UTC) + timedelta(seconds=1)
        lo, hi = since.isoformat(timespec="seconds"), until.isoformat(timespec="seconds")
        group = {"principal": "principal", "key": "coalesce(key, '')", "route": "route",
                 "day": "substr(t, 1, 10)"}[group_by]
        sql = f"""
            WITH rows AS (
                SELECT at AS t, principal, key, route, 1 AS requests, status >= 400 AS errors,
                       status IN (401, 403, 429) AS denied, latency_ms AS latency_ms_sum,
                       results, tokens_in, tokens_out, cost, cache_hits, saved_tokens
                FROM usage WHERE at >= ? AND at < ?
                UNION ALL
                SELECT hour || ':00:00+00:00', principal, nullif(key, ''), route, requests,
                       errors, denied, latency_ms_sum, results, tokens_in, tokens_out, cost,
                       cache_hits, saved_tokens
                FROM usage_hourly WHERE hour >= ? AND hour < ?
            )
            SELECT {group} AS grp, sum(requests) AS requests, sum(errors) AS errors,
                   sum(denied) AS denied, round(sum(latency_ms_sum) / sum(requests), 1)
                   AS mean_latency_ms, sum(results) AS results, sum(tokens_in) AS tokens_in,
                   sum(tokens_out) AS tokens_out, round(sum(cost), 6) AS cost,
                   sum(cache_hits) AS cache_hits, sum(saved_tokens) AS saved_tokens
            FROM rows GROUP BY grp ORDER BY requests DESC, grp"""
        rows = self.catalog.connection().execute(sql, [lo, hi, lo[:13], hi[:13]]).fetchall()
        return [{group_by: r["grp"] or None, **{k: r[k] for k in r.keys() if k != "grp"}}
                for r in rows]
