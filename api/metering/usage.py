"""Usage: every request, who made it, what it cost and what the answer cache saved; kept small.

The front door hands each finished request to ``UsageLog.record`` (a list append); a background
flush writes them in one transaction every second, so recording never waits on the database.
Rows older than ``CITEWISE_USAGE_RAW_DAYS`` are folded into one row per hour, principal, key and
route, and hourly rows older than ``CITEWISE_USAGE_RETENTION_DAYS`` are dropped: a year of use
by a few hundred people stays in the megabytes.
"""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

from citewise.api.identity.key_store import KeyStore
from citewise.api.metering.latency import percentile
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
        of its bucket, at most 25% above the true value)."""
        if group_by not in REPORT_GROUPINGS:
            raise InvalidRequestError(f"cannot group usage by {group_by!r}",
                                      hint=f"group_by is one of {', '.join(REPORT_GROUPINGS)}")
        self.flush()
        until = until or datetime.now(UTC) + timedelta(seconds=1)
        lo, hi = since.isoformat(timespec="seconds"), until.isoformat(timespec="seconds")
        return _with_percentiles(self.store.usage_report(lo, hi, group_by))

    def daily(self, first: date, end: date, dimension: str, *,
              per_day: bool = False) -> list[dict]:
        """The figures ``report`` gives, for the whole UTC days ``first`` <= day < ``end``,
        per name of one of ``rollup.DIMENSIONS`` (and with ``per_day``, per day), read from
        the daily rows: a month in a few thousand rows (``rollup.py``)."""
        self.flush()
        return _with_percentiles(self.store.usage_by_day(first.isoformat(), end.isoformat(),
                                                         dimension, per_day))


def _with_percentiles(rows: list[dict]) -> list[dict]:
    for row in rows:
        counts = row.pop("latency_counts")
        row["p50_ms"] = percentile(counts, 0.50)
        row["p95_ms"] = percentile(counts, 0.95)
    return rows
