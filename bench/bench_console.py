"""The operator console's routes under a month of history: how fast each admin route answers.

A fresh installation is seeded (``tests/console_data.py``) with 30 days of usage for 50
principals (folded into hourly rows past 7 days, as the server's hourly upkeep does), 10 sources
with 30 runs each (the last run of the first failed, with per-document errors) and 200 feedback
entries; the server runs for real (uvicorn on loopback) and each admin route is called
repeatedly with an admin key over one keep-alive connection, as the console page does. Every
call passes the front door (key check, scope, usage recorded) and is written to the audit log.
Target: p95 <= 200 ms per route.

    .venv/bin/python bench/bench_console.py      # -> bench/results/console.{json,md}
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import logging  # noqa: E402

import httpx  # noqa: E402

# One line per timed request would bury the table: the bench's own client stays quiet.
logging.getLogger("httpx").setLevel(logging.WARNING)

from citewise.api.app import create_app  # noqa: E402
from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from tests.console_data import seed_console  # noqa: E402
from tests.kb import make_key  # noqa: E402
from tests.live import LiveServer  # noqa: E402

PRINCIPALS, SOURCES, DAYS, PER_DAY, FEEDBACK = 50, 10, 30, 40, 200
CALLS, WARM_UP = 40, 3
TARGET_P95_MS = 200.0
ROUTES = (
    ("GET /v1/admin/sources", "/v1/admin/sources", {}),
    ("GET /v1/admin/usage?window=24h", "/v1/admin/usage", {"window": "24h"}),
    ("GET /v1/admin/usage?window=7d", "/v1/admin/usage", {"window": "7d"}),
    ("GET /v1/admin/usage?window=30d", "/v1/admin/usage", {"window": "30d"}),
    ("GET /v1/admin/models", "/v1/admin/models", {}),
    ("GET /v1/admin/feedback", "/v1/admin/feedback", {}),
    ("GET /v1/admin/feedback?status=open", "/v1/admin/feedback", {"status": "open"}),
    ("GET /v1/keys", "/v1/keys", {}),
    ("GET /v1/audit", "/v1/audit", {}),
    ("GET /v1/usage?since=30d", "/v1/usage", {"since": "30d"}),
)


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(ordered[max(0, int(round(0.95 * len(ordered))) - 1)], 1),
            "max_ms": round(ordered[-1], 1)}


def main() -> None:
    out_dir = ROOT / "bench" / "results"
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", require_auth=True)
        services = build_services(settings)
        try:
            started = time.perf_counter()
            seeded = seed_console(services.stores, principals=PRINCIPALS, sources=SOURCES,
                                  days=DAYS, requests_per_day=PER_DAY, feedback=FEEDBACK)
            seed_s = round(time.perf_counter() - started, 1)
            print(f"seeded {len(seeded.usage)} requests, {seeded.runs} runs, "
                  f"{seeded.feedback} feedback in {seed_s} s", file=sys.stderr)
            admin = make_key(services, "bench-admin", "admin")
            results = {}
            with LiveServer(create_app(services=services), settings) as url, \
                    httpx.Client(base_url=url, headers=admin, timeout=30) as client:
                for name, path, params in ROUTES:
                    samples = []
                    for i in range(WARM_UP + CALLS):
                        t0 = time.perf_counter()
                        response = client.get(path, params=params)
                        elapsed = (time.perf_counter() - t0) * 1000
                        if response.status_code != 200:
                            raise SystemExit(f"{name}: {response.status_code} {response.text}")
                        if i >= WARM_UP:
                            samples.append(elapsed)
                    results[name] = {**percentiles(samples), "bytes": len(response.content)}
                    print(f"{name}: {results[name]}", file=sys.stderr)
            rows = services.stores.metering.export_hourly_usage()
            raw = sum(1 for _ in services.stores.metering.export_usage())
        finally:
            services.close()
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} cores",
        "seeded": {"principals": PRINCIPALS, "sources": SOURCES, "days": DAYS,
                   "requests": len(seeded.usage), "raw_rows": raw, "hourly_rows": len(rows),
                   "runs": seeded.runs, "feedback": seeded.feedback, "seconds": seed_s},
        "calls_per_route": CALLS, "target_p95_ms": TARGET_P95_MS, "routes": results,
        "all_within_target": all(r["p95_ms"] <= TARGET_P95_MS for r in results.values()),
    }
    write_results(out_dir, result)


def write_results(out_dir: Path, result: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "console.json").write_text(json.dumps(result, indent=2) + "\n")
    seeded = result["seeded"]
    md = [
        "# Operator console: the admin routes under a month of history",
        "",
        f"{result['when']}, {result['machine']} (`bench/bench_console.py`). Seeded by "
        f"`tests/console_data.py`: {seeded['days']} days of usage for {seeded['principals']} "
        f"principals ({seeded['requests']} requests: {seeded['raw_rows']} kept raw, the rest "
        f"folded into {seeded['hourly_rows']} hourly rows), {seeded['sources']} sources with "
        f"{seeded['runs']} runs, {seeded['feedback']} feedback entries; SQLite. Each route "
        f"called {result['calls_per_route']} times with an admin key through uvicorn on "
        "loopback (front door, usage and audit included), after a warm-up.",
        "",
        "| route | p50 ms | p95 ms | max ms | body bytes |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in result["routes"].items():
        md.append(f"| `{name}` | {r['p50_ms']} | {r['p95_ms']} | {r['max_ms']} | {r['bytes']} |")
    over = [name for name, r in result["routes"].items()
            if r["p95_ms"] > result["target_p95_ms"]]
    verdict = "every route within it" if not over else \
        "over it: " + ", ".join(f"`{name}`" for name in over)
    md += ["", f"Target: p95 <= {result['target_p95_ms']:.0f} ms per route: {verdict}.",
           "", "Usage reads whole UTC days from the daily rows (`api/metering/rollup.py`) "
           "and the hours around them from the requests and hourly rows; the 24-hour view "
           "reads the requests and hourly rows of its hours.", ""]
    (out_dir / "console.md").write_text("\n".join(md))


if __name__ == "__main__":
    main()
