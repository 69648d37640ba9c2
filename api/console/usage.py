"""The console's usage view: a window's time series, totals and top 20 per provider, route,
key and principal, each read with ``UsageLog.report`` (what ``citewise usage`` and
``GET /v1/usage`` print), so the console and the CLI give the same numbers for the same window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from citewise.api.metering.usage import UsageLog

# window -> (bucket name, bucket length, buckets)
WINDOWS = {"24h": ("hour", timedelta(hours=1), 24), "7d": ("day", timedelta(days=1), 7),
           "30d": ("day", timedelta(days=1), 30)}
TOP = 20
TOPS = ("provider", "route", "key", "principal")
NONE_NAME = "(none)"  # a group of requests without a key, or without a model call
_FIGURES = ("requests", "errors", "denied", "answers", "abstentions", "cache_hits", "p50_ms",
            "p95_ms", "tokens_in", "tokens_out", "cost")


def window_bounds(window: str, now: datetime) -> tuple[datetime, datetime]:
    """The window's first bucket's start and its last bucket's end: whole hours or whole UTC
    days, the current one included."""
    bucket, length, count = WINDOWS[window]
    start = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if bucket == "day":
        start = start.replace(hour=0)
    until = start + length
    return until - count * length, until


def dashboard(usage: UsageLog, window: str, now: datetime | None = None) -> dict[str, Any]:
    bucket, length, count = WINDOWS[window]
    since, until = window_bounds(window, now or datetime.now(UTC))
    by_bucket = {r[bucket]: r for r in usage.report(since, until, bucket)}
    series = []
    for i in range(count):
        at = since + i * length
        label = at.strftime("%Y-%m-%dT%H") if bucket == "hour" else at.date().isoformat()
        # ``at`` last, as the response model (``UsagePoint``) orders its fields.
        series.append({**_figures(by_bucket.get(label)),
                       "at": at.isoformat(timespec="seconds")})
    totals = usage.report(since, until, "all")
    top = {group: [_row(r, group) for r in usage.report(since, until, group)[:TOP]]
           for group in TOPS}
    return {"window": window, "bucket": bucket, "since": since.isoformat(timespec="seconds"),
            "until": until.isoformat(timespec="seconds"), "series": series,
            "totals": _figures(totals[0] if totals else None), "top": top}


def _figures(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {k: None if k.endswith("_ms") else (0.0 if k == "cost" else 0) for k in _FIGURES}
    return {k: row[k] for k in _FIGURES}


def _row(row: dict[str, Any], group: str) -> dict[str, Any]:
    return {"name": row[group] or NONE_NAME, "requests": row["requests"],
            "errors": row["errors"], "denied": row["denied"], "p50_ms": row["p50_ms"],
            "p95_ms": row["p95_ms"], "tokens_in": row["tokens_in"],
            "tokens_out": row["tokens_out"], "cost": row["cost"],
            "cache_hits": row["cache_hits"], "answers": row["answers"],
            "abstentions": row["abstentions"]}
