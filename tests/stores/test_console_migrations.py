"""The console's migrations keep what was there: usage rows and hours written before usage knew
providers and latency buckets, and feedback from before triage, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest

from citewise.api.metering import postgres_store, sqlite_store
from citewise.api.metering.store import Usage
from citewise.api.metering.usage import UsageLog
from citewise.store_schema import StoreSchema

RAW = ("2026-03-01T09:00:00+00:00", "user:dana", None, "/v1/search", "POST", 200, 42.0, 3, 0,
       0, 0.0, "r1", 0, 0)
HOUR = ("2026-02-01T10", "user:ci", "ci-bot", "/v1/answer", 4, 1, 1, 400.0, 8, 100, 50, 0.5, 1,
        20)
WINDOW = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))


def _first_two(schema: StoreSchema) -> StoreSchema:
    """The store's schema as the release before the console shipped it."""
    return StoreSchema(schema.store, schema.migrations[:2] if len(schema.migrations) > 2
                       else schema.migrations[:1])


def _check(log: UsageLog) -> None:
    by_principal = {r["principal"]: r for r in log.report(*WINDOW)}
    assert by_principal["user:dana"]["requests"] == 1
    assert by_principal["user:dana"]["p50_ms"] == 44.409  # 42 ms: the bucket up to 1.25^17
    assert by_principal["user:ci"]["requests"] == 4 and by_principal["user:ci"]["errors"] == 1
    assert by_principal["user:ci"]["p50_ms"] is None  # folded before buckets: none made up
    [row] = log.report(*WINDOW, group_by="provider")
    assert row["provider"] is None and row["requests"] == 5
    # New requests land beside them, with their provider.
    log.record(Usage("2026-03-02T09:00:00+00:00", "user:dana", None, "/v1/answer", "POST", 200,
                     900.0, provider="primary", answers=1))
    providers = {r["provider"]: r["requests"] for r in log.report(*WINDOW, "provider")}
    assert providers == {None: 5, "primary": 1}


def test_sqlite_usage_from_before_the_console_is_kept(tmp_path):
    from citewise.sqlite import SqliteDatabase
    from citewise.sqlite_schema import check_layout, migrate

    path = tmp_path / "catalog.db"
    db = SqliteDatabase(path)
    check_layout(db)
    migrate(db, _first_two(sqlite_store.SCHEMA))
    conn = sqlite3.connect(path)
    conn.execute(f"INSERT INTO usage (at, principal, key, route, method, status, latency_ms, "
                 f"results, tokens_in, tokens_out, cost, request_id, cache_hits, saved_tokens) "
                 f"VALUES ({', '.join('?' * len(RAW))})", RAW)
    conn.execute(f"INSERT INTO usage_hourly VALUES ({', '.join('?' * len(HOUR))})", HOUR)
    conn.commit()
    conn.close()
    _check(UsageLog(sqlite_store.SqliteMeteringStore(db)))


def test_postgresql_usage_from_before_the_console_is_kept(postgres_url):
    from citewise.postgres import PostgresDatabase

    database = PostgresDatabase(postgres_url, pool_size=2)
    try:
        database.migrate(_first_two(postgres_store.SCHEMA))
        database.execute(
            "INSERT INTO usage (at, principal, key, route, method, status, latency_ms, results, "
            "tokens_in, tokens_out, cost, request_id, cache_hits, saved_tokens) VALUES "
            f"({', '.join(['%s'] * len(RAW))})", RAW)
        database.execute(
            "INSERT INTO usage_hourly (hour, principal, key, route, requests, errors, denied, "
            "latency_ms_sum, results, tokens_in, tokens_out, cost, cache_hits, saved_tokens) "
            f"VALUES ({', '.join(['%s'] * len(HOUR))})", HOUR)
        _check(UsageLog(postgres_store.PostgresMeteringStore(database)))
    finally:
        database.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_feedback_from_before_triage_is_open(backend, tmp_path, request):
    from citewise.api.composition import build_stores
    from citewise.api.settings import Settings
    from tests.console_data import seed_console

    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    stores = build_stores(Settings(data_dir=tmp_path / "data", database_url=url))
    try:
        seed_console(stores, principals=2, sources=1, days=1, feedback=3)
        items = stores.conversations.feedback_items(None, 10)
        assert [f.status for _, f, _ in items] == ["open"] * 3
        first = items[-1][0]
        assert stores.conversations.set_feedback_status(first, "dismissed", "user:ops",
                                                        "2026-12-01T00:00:00+00:00")
        assert not stores.conversations.set_feedback_status(10**9, "dismissed", "x", "y")
        [(kept_id, kept, _)] = stores.conversations.feedback_items("dismissed", 10)
        assert kept_id == first and kept.triaged_by == "user:ops"
        exported = list(stores.conversations.export_feedback())
        assert [f.status for _, f in exported] == ["dismissed", "open", "open"]
    finally:
        stores.close()
