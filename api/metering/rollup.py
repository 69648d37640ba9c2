"""Usage per day and dimension: what usage reports read for the whole days of a window.

Reading a month of usage per request and per hour (``usage`` and ``usage_hourly``) means
tens of thousands of rows per grouping; the console groups five ways at each page load. So the
stores also keep one row per UTC day, dimension (``principal``, ``key``, ``route``,
``provider``, and ``all``) and name, with the same sums and the latency buckets
(``usage_daily``, ``usage_daily_latency``): a month of 50 people is a few thousand rows.
``UsageLog.report`` (``citewise usage``, ``GET /v1/usage``) and the console's 7- and 30-day
views read the whole UTC days of a window here, and the hours around them as they are kept.

The daily rows are written with the requests themselves (``add_usage``, in the same
transaction), so they never lag the raw rows; folding requests into hours does not touch them
(the day's figures do not change), and retention drops whole days. For a window of whole UTC
days they hold exactly what ``usage_report`` sums from the raw and hourly rows, which the
console's tests check against ``citewise usage``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import astuple, dataclass

from citewise.api.metering.latency import bucket_of
from citewise.api.metering.store import Usage

DIMENSIONS = ("principal", "key", "route", "provider", "all")
# The figures kept per row, in the order of the tables' columns.
SUMS = ("requests", "errors", "denied", "latency_ms_sum", "results", "tokens_in", "tokens_out",
        "cost", "cache_hits", "saved_tokens", "answers", "abstentions")


@dataclass
class Figures:
    requests: int = 0
    errors: int = 0
    denied: int = 0
    latency_ms_sum: float = 0.0
    results: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    cache_hits: int = 0
    saved_tokens: int = 0
    answers: int = 0
    abstentions: int = 0

    def add(self, u: Usage) -> None:
        self.requests += 1
        self.errors += u.status >= 400
        self.denied += u.status in (401, 403, 429)
        self.latency_ms_sum += u.latency_ms
        self.results += u.results
        self.tokens_in += u.tokens_in
        self.tokens_out += u.tokens_out
        self.cost += u.cost
        self.cache_hits += u.cache_hits
        self.saved_tokens += u.saved_tokens
        self.answers += u.answers
        self.abstentions += u.abstentions


def names_of(u: Usage) -> tuple[tuple[str, str], ...]:
    """The (dimension, name) rows a request counts in; no key or no provider is ''."""
    return (("principal", u.principal), ("key", u.key or ""), ("route", u.route),
            ("provider", u.provider or ""), ("all", ""))


def daily(rows: Iterable[Usage]) -> tuple[list[tuple], list[tuple]]:
    """A batch of requests as daily rows to add: ``(day, dimension, name, *SUMS)`` and
    ``(day, dimension, name, bucket, requests)``."""
    sums: dict[tuple[str, str, str], Figures] = {}
    latency: dict[tuple[str, str, str, int], int] = {}
    for u in rows:
        day = u.at[:10]
        bucket = bucket_of(u.latency_ms)
        for dimension, name in names_of(u):
            sums.setdefault((day, dimension, name), Figures()).add(u)
            key = (day, dimension, name, bucket)
            latency[key] = latency.get(key, 0) + 1
    return ([(*k, *astuple(f)) for k, f in sums.items()],
            [(*k, n) for k, n in latency.items()])


def fill_sql(dimension: str, raw_where: str = "", hourly_where: str = "") -> tuple[str, str]:
    """SQL (SQLite and PostgreSQL alike) that writes ``dimension``'s daily rows and latency
    rows from the raw and hourly rows (the WHERE clauses, if given, choose which): the
    migration that makes the tables, and a copy's import (``import_hourly_usage``)."""
    name = {"principal": "principal", "key": "coalesce(key, '')", "route": "route",
            "provider": "coalesce(provider, '')", "all": "''"}[dimension]
    # PostgreSQL refuses a constant in GROUP BY: ``all`` groups by the day alone.
    grouped = "substr(t, 1, 10)" + ("" if dimension == "all" else f", {name}")
    columns = ", ".join(SUMS)
    sums = ", ".join(f"sum({c})" for c in SUMS)
    figures = f"""
        INSERT INTO usage_daily (day, dimension, name, {columns})
        SELECT substr(t, 1, 10), '{dimension}', {name}, {sums} FROM (
            SELECT at AS t, principal, key, route, provider, 1 AS requests,
                   CASE WHEN status >= 400 THEN 1 ELSE 0 END AS errors,
                   CASE WHEN status IN (401, 403, 429) THEN 1 ELSE 0 END AS denied,
                   latency_ms AS latency_ms_sum, results, tokens_in, tokens_out, cost,
                   cache_hits, saved_tokens, answers, abstentions
            FROM usage {raw_where}
            UNION ALL
            SELECT hour, principal, key, route, provider, requests, errors, denied,
                   latency_ms_sum, results, tokens_in, tokens_out, cost, cache_hits,
                   saved_tokens, answers, abstentions
            FROM usage_hourly {hourly_where}
        ) AS r GROUP BY {grouped}"""
    latency = f"""
        INSERT INTO usage_daily_latency (day, dimension, name, bucket, requests)
        SELECT substr(t, 1, 10), '{dimension}', {name}, bucket, sum(n) FROM (
            SELECT at AS t, principal, key, route, provider, latency_bucket AS bucket, 1 AS n
            FROM usage {raw_where}
            UNION ALL
            SELECT hour, principal, key, route, provider, bucket, requests
            FROM usage_latency_hourly {hourly_where}
        ) AS r GROUP BY {grouped}, bucket"""
    return figures, latency


def migration_sql() -> str:
    """The daily tables' fill from the rows kept before they existed (every day)."""
    return ";\n".join(sql for d in DIMENSIONS for sql in fill_sql(d)) + ";"
