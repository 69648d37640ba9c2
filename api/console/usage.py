"""The console's usage view: a window's time series, totals and top 20 per provider, route,
key and principal, from the metering store that ``citewise usage`` and ``GET /v1/usage`` read,
with the same figures for the same window (the console's tests compare them).
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
    """The window's series, totals and tops. Hours (24h) are read from the requests and
    hourly rows as ``citewise usage`` reads them; whole days (7d, 30d) from the daily rows,
    which hold the same sums (``metering/rollup.py``) in far fewer rows."""
    bucket, length, count = WINDOWS[window]
    since, until = window_bounds(window, now or datetime.now(UTC))
    if bucket == "hour":
        series_rows = {r["hour"]: r for r in usage.report(since, until, "hour")}
        totals = usage.report(since, until, "all")
        tops = {g: [{**r, "name": r[g]} for r in usage.report(since, until, g)[:TOP]]
                for g in TOPS}
    else:
        first, end = since.date(), until.date()
        series_rows = {r["day"]: r for r in usage.daily(first, end, "all", per_day=True)}
        totals = usage.daily(first, end, "all")
        tops = {g: usage.daily(first, end, g)[:TOP] for g in TOPS}
    series = []
    for i in range(count):
        at = since + i * length
        label = at.strftime("%Y-%m-%dT%H") if bucket == "hour" else at.date().isoformat()
        # ``at`` last, as the response model (``UsagePoint``) orders its fields.
        series.append({**_figures(series_rows.get(label)),
                       "at": at.isoformat(timespec="seconds")})
    return {"window": window, "bucket": bucket, "since": since.isoformat(timespec="seconds"),
            "until": until.isoformat(timespec="seconds"), "series": series,
            "totals": _figures(totals[0] if totals else None),
            "top": {g: [_row(r) for r in rows] for g, rows in tops.items()}}


def _figures(row: dict[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {k: None if k.endswith("_ms") else (0.0 if k == "cost" else 0) for k in _FIGURES}
    return {k: row[k] for k in _FIGURES}


def _row(row: dict[str, Any]) -> dict[str, Any]:
    return {"name": row["name"] or NONE_NAME, "requests": row["requests"],
            "errors": row["errors"], "denied": row["denied"], "p50_ms": row["p50_ms"],
            "p95_ms": row["p95_ms"], "tokens_in": row["tokens_in"],
            "tokens_out": row["tokens_out"], "cost": row["cost"],
            "cache_hits": row["cache_hits"], "answers": row["answers"],
            "abstentions": row["abstentions"]}
