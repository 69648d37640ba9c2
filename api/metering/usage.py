"""Usage: every request, who made it, what it cost and what the answer cache saved; kept small.

The front door hands each finished request to ``UsageLog.record`` (a list append); a background
flush writes them in one transaction every second, so recording never waits on the database.
Rows older than ``CITEWISE_USAGE_RAW_DAYS`` are folded into one row per hour, principal, key and
route, and hourly rows older than ``CITEWISE_USAGE_RETENTION_DAYS`` are dropped: a year of use
by a few hundred people stays in the megabytes.
"""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, time, timedelta

from citewise.api.identity.key_store import KeyStore
from citewise.api.metering import rollup
from citewise.api.metering.latency import merge, percentile
from citewise.api.metering.store import REPORT_GROUPINGS, MeteringStore, Usage
from citewise.errors import InvalidRequestError

MAX_PENDING = 50_000  # requests' usage kept in memory while it cannot be written


class UsageLog:
    def __init__(self, store: MeteringStore, keys: KeyStore | None = None, *,
                 raw_days: int = 7, retention_days: int = 400) -> None:
        self.store = store
        self.keys = keys  # told when each key last served a request
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
            try:
                self.store.add_usage(rows)
            except Exception:
                # Usage is the record: kept for the next flush while the database is away,
                # up to MAX_PENDING rows (an outage of hours drops the oldest, not memory).
                with self._lock:
                    self._pending = (rows + self._pending)[-MAX_PENDING:]
                raise
            # Two stores, two writes (not one transaction): the usage rows are the record and
            # are written first; a key's last-used stamp is a hint for `citewise keys list`,
            # so a crash between the two loses at most one flush's stamps, never usage.
            used: dict[str, str] = {}
            for r in rows:
                if r.key and r.status < 400:
                    used[r.key] = max(used.get(r.key, ""), r.at)
            if used and self.keys is not None:
                self.keys.touch(used)
        return len(rows)

    def compact(self, now: datetime | None = None) -> int:
        """Fold raw rows older than ``raw_days`` into hourly rows; drop what is past retention.
        Returns the number of raw rows folded."""
        now = now or datetime.now(UTC)
        cutoff = (now - timedelta(days=self.raw_days)).isoformat(timespec="seconds")
        expiry = (now - timedelta(days=self.retention_days)).isoformat(timespec="seconds")
        return self.store.compact_usage(cutoff, expiry)

    def report(self, since: datetime, until: datetime | None = None,
               group_by: str = "principal") -> list[dict]:
        """Requests, errors, refusals, mean latency, results, tokens and cost, cache hits,
        answers and abstentions per group, from the raw rows and the hourly ones alike, with
        p50 and p95 latency read from the latency buckets (``latency.py``: each the upper bound
        of its bucket, at most 25% above the true value). The whole UTC days inside the window
        are read from the daily rows (``rollup.py``), which hold the same sums in far fewer
        rows; the hours before and after them as they are kept."""
        if group_by not in REPORT_GROUPINGS:
            raise InvalidRequestError(f"cannot group usage by {group_by!r}",
                                      hint=f"group_by is one of {', '.join(REPORT_GROUPINGS)}")
        self.flush()
        until = until or datetime.now(UTC) + timedelta(seconds=1)
        first = _next_midnight(since)
        end = datetime.combine(until.astimezone(UTC).date(), time(), UTC)
        if group_by == "hour" or end <= first:
            return [_finished(r) for r in _with_percentiles(self._kept(since, until, group_by))]
        parts = [*(self._kept(since, first, group_by) if since < first else []),
                 *self._days(first, end, group_by),
                 *(self._kept(end, until, group_by) if end < until else [])]
        return _with_percentiles(_added_up(parts, group_by))

    def _kept(self, since: datetime, until: datetime, group_by: str) -> list[dict]:
        lo, hi = since.isoformat(timespec="seconds"), until.isoformat(timespec="seconds")
        return self.store.usage_report(lo, hi, group_by)

    def _days(self, first: datetime, end: datetime, group_by: str) -> list[dict]:
        dimension, per_day = ("all", True) if group_by == "day" else (group_by, False)
        rows = self.store.usage_by_day(first.date().isoformat(), end.date().isoformat(),
                                       dimension, per_day)
        return [{group_by: (r["day"] if per_day else r["name"]) or None,
                 **{k: r[k] for k in rollup.SUMS if k not in ("cost", "latency_ms_sum")},
                 "latency_ms_sum": r["latency_ms_sum"], "cost_sum": r["cost"],
                 "latency_counts": r["latency_counts"]} for r in rows]

    def daily(self, first: date, end: date, dimension: str, *,
              per_day: bool = False) -> list[dict]:
        """The figures ``report`` gives, for the whole UTC days ``first`` <= day < ``end``,
        per name of one of ``rollup.DIMENSIONS`` (and with ``per_day``, per day), read from
        the daily rows: a month in a few thousand rows (``rollup.py``)."""
        self.flush()
        rows = self.store.usage_by_day(first.isoformat(), end.isoformat(), dimension, per_day)
        for row in rows:
            row["cost"] = round(row["cost"], 6)
        return _with_percentiles(rows)


def _next_midnight(at: datetime) -> datetime:
    day = datetime.combine(at.astimezone(UTC).date(), time(), UTC)
    return day if day == at else day + timedelta(days=1)


def _finished(row: dict) -> dict:
    row.pop("latency_ms_sum", None)
    row.pop("cost_sum", None)
    return row


_ADDED = ("requests", "errors", "denied", "results", "tokens_in", "tokens_out", "cache_hits",
          "saved_tokens", "answers", "abstentions", "latency_ms_sum", "cost_sum")


def _added_up(parts: list[dict], group_by: str) -> list[dict]:
    """Rows of the same group from several spans, as one: the sums added, the mean and the
    cost rounded once, most requests first (then by name, as the stores order them)."""
    groups: dict[object, dict] = {}
    for part in parts:
        # The sums of money and time stay floats, as the stores give them (0.0, not 0).
        into = groups.setdefault(part[group_by], {k: 0 for k in _ADDED} | {
            "latency_ms_sum": 0.0, "cost_sum": 0.0, "latency_counts": {}})
        for k in _ADDED:
            into[k] += part[k]
        into["latency_counts"] = merge((into["latency_counts"], part["latency_counts"]))
    rows = []
    for name, g in groups.items():
        rows.append({group_by: name, "requests": g["requests"], "errors": g["errors"],
                     "denied": g["denied"],
                     "mean_latency_ms": round(g["latency_ms_sum"] / g["requests"], 1),
                     "results": g["results"], "tokens_in": g["tokens_in"],
                     "tokens_out": g["tokens_out"], "cost": round(g["cost_sum"], 6),
                     "cache_hits": g["cache_hits"], "saved_tokens": g["saved_tokens"],
                     "answers": g["answers"], "abstentions": g["abstentions"],
                     "latency_counts": g["latency_counts"]})
    rows.sort(key=lambda r: (-r["requests"], r[group_by] or ""))
    return rows


def _with_percentiles(rows: list[dict]) -> list[dict]:
    for row in rows:
        counts = row.pop("latency_counts")
        row["p50_ms"] = percentile(counts, 0.50)
        row["p95_ms"] = percentile(counts, 0.95)
    return rows
