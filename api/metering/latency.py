"""Latency percentiles that survive compaction: a fixed-bucket histogram.

Usage keeps each request for ``CITEWISE_USAGE_RAW_DAYS`` and then folds it into an hourly row,
where a mean would be all that is left of its latency. So every request is also counted in one
of a fixed set of latency buckets, and the hourly rows keep those counts
(``usage_latency_hourly``); p50 and p95 of any span or group are read from the summed counts,
for raw and folded requests alike, so a figure does not change when its requests are folded.

The buckets grow by 25%: bucket ``i`` holds latencies in ``(BOUNDS[i-1], BOUNDS[i]]``
milliseconds (bucket 0: up to 1 ms), up to about 334 s, and one more bucket holds anything
longer. A percentile is reported as the upper bound of the bucket it falls in: never below the
true value, and at most 25% above it (a true p95 of 180 ms reads as 211.758 ms, one
of 150 ms as 169.407 ms). Past the last bound it reads as that bound (about 334 s), a floor.

The bounds are part of the stored data: never change them (a new set needs a new table).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping

RATIO = 1.25
BOUNDS: tuple[float, ...] = tuple(round(RATIO ** i, 3) for i in range(58))  # ms
OVERFLOW = len(BOUNDS)  # the bucket of latencies above the last bound


def bucket_of(latency_ms: float) -> int:
    """The bucket ``latency_ms`` is counted in."""
    return bisect_left(BOUNDS, latency_ms)


def merge(counts: Iterable[Mapping[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c in counts:
        for bucket, n in c.items():
            out[bucket] = out.get(bucket, 0) + n
    return out


def percentile(counts: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of the counted requests, nearest rank, as its bucket's
    upper bound in ms; None when nothing was counted."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return BOUNDS[min(bucket, OVERFLOW - 1)]
    return BOUNDS[-1]


def bucket_case_sql(column: str) -> str:
    """A SQL expression (SQLite and PostgreSQL alike) giving ``bucket_of(column)``: a nested
    binary search, so a row costs six comparisons; for the migration that counts the requests
    kept before buckets existed."""

    def search(lo: int, hi: int) -> str:  # the bucket is in [lo, hi]
        if lo == hi:
            return str(lo)
        mid = (lo + hi) // 2
        return (f"CASE WHEN {column} <= {BOUNDS[mid]!r} THEN {search(lo, mid)} "
                f"ELSE {search(mid + 1, hi)} END")

    return search(0, OVERFLOW)
