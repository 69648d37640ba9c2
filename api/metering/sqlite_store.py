"""Metering (``store.py``) in the embedded SQLite database: ``usage``, ``usage_hourly``,
``audit`` (kept append-only by triggers) and ``rate_buckets``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import astuple, fields
from typing import Any

from citewise.api.metering.store import AuditEntry, HourlyUsage, Usage
from citewise.sqlite import SqliteStore
from citewise.sqlite_schema import Migration, StoreSchema

# ``shipped_as``: the catalog's PRAGMA user_version that first held the change, before the
# stores split (``citewise.sqlite_schema``).
SCHEMA = StoreSchema("metering", (
    # Token buckets that survive a restart, usage per request then per hour, and the audit
    # log, which triggers keep append-only.
    Migration("""
    CREATE TABLE rate_buckets (
        bucket TEXT PRIMARY KEY,
        tokens REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE usage (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        principal TEXT NOT NULL,
        key TEXT,
        route TEXT NOT NULL,
        method TEXT NOT NULL,
        status INTEGER NOT NULL,
        latency_ms REAL NOT NULL,
        results INTEGER NOT NULL DEFAULT 0,
        tokens_in INTEGER NOT NULL DEFAULT 0,
        tokens_out INTEGER NOT NULL DEFAULT 0,
        cost REAL NOT NULL DEFAULT 0,
        request_id TEXT
    );
    CREATE INDEX usage_at ON usage(at);
    CREATE TABLE usage_hourly (
        hour TEXT NOT NULL,
        principal TEXT NOT NULL,
        key TEXT NOT NULL DEFAULT '',
        route TEXT NOT NULL,
        requests INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        denied INTEGER NOT NULL,
        latency_ms_sum REAL NOT NULL,
        results INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        cost REAL NOT NULL,
        PRIMARY KEY (hour, principal, key, route)
    );
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        key TEXT,
        action TEXT NOT NULL,
        target TEXT,
        outcome TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}',
        client TEXT,
        request_id TEXT
    );
    CREATE INDEX audit_at ON audit(at);
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    """, shipped_as=5),
    # Usage counts answers served from the semantic cache and the model tokens they saved.
    Migration("""
    ALTER TABLE usage ADD COLUMN cache_hits INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN saved_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage_hourly ADD COLUMN cache_hits INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage_hourly ADD COLUMN saved_tokens INTEGER NOT NULL DEFAULT 0;
    """, shipped_as=8),
))

_GROUP_SQL = {"principal": "principal", "key": "coalesce(key, '')", "route": "route",
              "day": "substr(t, 1, 10)"}


class SqliteMeteringStore(SqliteStore):
    """``MeteringStore`` over the tables above, in ``database``."""

    schema = SCHEMA

    # Usage -------------------------------------------------------------------------------------
    def add_usage(self, rows: list[Usage]) -> None:
        with self.database.transaction():
            self._conn().executemany(
                "INSERT INTO usage (at, principal, key, route, method, status, latency_ms, "
                "results, tokens_in, tokens_out, cost, request_id, cache_hits, saved_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [astuple(r) for r in rows])

    def compact_usage(self, before: str, drop_before: str) -> int:
        with self.database.transaction():
            conn = self._conn()
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
                [before])
            folded = conn.execute("DELETE FROM usage WHERE at < ?", [before]).rowcount
            conn.execute("DELETE FROM usage_hourly WHERE hour < ?", [drop_before[:13]])
        return folded

    def usage_report(self, since: str, until: str, group_by: str) -> list[dict]:
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
            SELECT {_GROUP_SQL[group_by]} AS grp, sum(requests) AS requests,
                   sum(errors) AS errors, sum(denied) AS denied,
                   round(sum(latency_ms_sum) / sum(requests), 1) AS mean_latency_ms,
                   sum(results) AS results, sum(tokens_in) AS tokens_in,
                   sum(tokens_out) AS tokens_out, round(sum(cost), 6) AS cost,
                   sum(cache_hits) AS cache_hits, sum(saved_tokens) AS saved_tokens
            FROM rows GROUP BY grp ORDER BY requests DESC, grp"""
        rows = self._conn().execute(sql, [since, until, since[:13], until[:13]]).fetchall()
        return [{group_by: r["grp"] or None, **{k: r[k] for k in r.keys() if k != "grp"}}
                for r in rows]

    # The audit log -----------------------------------------------------------------------------
    def append_audit(self, entry: AuditEntry) -> None:
        self._conn().execute(
            "INSERT INTO audit (at, actor, key, action, target, outcome, detail, client, "
            "request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [entry.at, entry.actor, entry.key, entry.action, entry.target, entry.outcome,
             json.dumps(entry.detail or {}, sort_keys=True, default=str), entry.client,
             entry.request_id])

    def read_audit(self, since: str | None = None, limit: int = 100,
                   action: str | None = None, after_id: int | None = None) -> list[dict]:
        sql = "SELECT * FROM audit WHERE 1 = 1"
        args: list[Any] = []
        if since:
            sql += " AND at >= ?"
            args.append(since)
        if action:
            sql += " AND action = ?"
            args.append(action)
        if after_id is not None:
            sql += " AND id > ?"
            args.append(after_id)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        rows = self._conn().execute(sql, args).fetchall()
        return [{**dict(r), "detail": json.loads(r["detail"])} for r in rows]

    # Token buckets -----------------------------------------------------------------------------
    def load_buckets(self) -> dict[str, tuple[float, float]]:
        return {r["bucket"]: (r["tokens"], r["updated_at"]) for r in self._conn().execute(
            "SELECT bucket, tokens, updated_at FROM rate_buckets")}

    def save_buckets(self, levels: dict[str, tuple[float, float]], forget_before: float) -> None:
        with self.database.transaction():
            conn = self._conn()
            conn.executemany(
                "INSERT INTO rate_buckets (bucket, tokens, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(bucket) DO UPDATE SET tokens = excluded.tokens, "
                "updated_at = excluded.updated_at",
                [(b, t, at) for b, (t, at) in levels.items()])
            conn.execute("DELETE FROM rate_buckets WHERE updated_at < ?", [forget_before])

    # A copy of the whole store -------------------------------------------------------------------
    def export_usage(self) -> Iterator[tuple[int, Usage]]:
        columns = ", ".join(_USAGE)
        for row in self._conn().execute(f"SELECT id, {columns} FROM usage ORDER BY id"):
            yield row[0], Usage(*row[1:])

    def export_hourly_usage(self) -> list[HourlyUsage]:
        columns = ", ".join(_HOURLY)
        return [HourlyUsage(**{**dict(r), "key": r["key"] or None}) for r in self._conn().execute(
            f"SELECT {columns} FROM usage_hourly ORDER BY hour, principal, key, route")]

    def export_audit(self) -> Iterator[tuple[int, AuditEntry]]:
        for r in self._conn().execute("SELECT * FROM audit ORDER BY id"):
            yield r["id"], AuditEntry(
                at=r["at"], actor=r["actor"], action=r["action"], outcome=r["outcome"],
                key=r["key"], target=r["target"], detail=json.loads(r["detail"]),
                client=r["client"], request_id=r["request_id"])

    def import_usage(self, rows: list[tuple[int, Usage]]) -> int:
        columns = ", ".join(("id", *_USAGE))
        with self.database.transaction():
            return sum(self._conn().execute(
                f"INSERT INTO usage ({columns}) VALUES ({', '.join('?' * (len(_USAGE) + 1))}) "
                "ON CONFLICT(id) DO NOTHING", (row_id, *astuple(usage))).rowcount
                for row_id, usage in rows)

    def import_hourly_usage(self, rows: list[HourlyUsage]) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in _HOURLY[4:])
        with self.database.transaction():
            self._conn().executemany(
                f"INSERT INTO usage_hourly ({', '.join(_HOURLY)}) "
                f"VALUES ({', '.join('?' * len(_HOURLY))}) "
                f"ON CONFLICT(hour, principal, key, route) DO UPDATE SET {updates}",
                # The table keeps no key as '' (part of its primary key), as compact_usage does.
                [(*astuple(row)[:2], row.key or "", *astuple(row)[3:]) for row in rows])

    def import_audit(self, entries: list[tuple[int, AuditEntry]]) -> int:
        with self.database.transaction():
            return sum(self._conn().execute(
                "INSERT INTO audit (id, at, actor, key, action, target, outcome, detail, "
                "client, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO NOTHING",
                [row_id, e.at, e.actor, e.key, e.action, e.target, e.outcome,
                 json.dumps(e.detail or {}, sort_keys=True, default=str), e.client,
                 e.request_id]).rowcount for row_id, e in entries)


# The columns of ``usage`` and ``usage_hourly`` in the order of ``Usage``'s and
# ``HourlyUsage``'s fields (which add_usage's ``astuple`` relies on too).
_USAGE = tuple(f.name for f in fields(Usage))
_HOURLY = tuple(f.name for f in fields(HourlyUsage))
