"""Metering (``store.py``) in the embedded SQLite database: ``usage``, ``usage_hourly``,
``audit`` (kept append-only by triggers) and ``rate_buckets``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import astuple, fields
from typing import Any

from citewise.api.metering import rollup
from citewise.api.metering.latency import bucket_case_sql, bucket_of
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
    # The console's figures: the model provider that wrote the answer (part of an hour's key,
    # so the table is rebuilt), answers and abstentions, and requests per latency bucket
    # (``latency.py``), counted for the requests kept; hours folded before have none.
    Migration(f"""
    ALTER TABLE usage ADD COLUMN provider TEXT;
    ALTER TABLE usage ADD COLUMN answers INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN abstentions INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN latency_bucket INTEGER NOT NULL DEFAULT 0;
    UPDATE usage SET latency_bucket = {bucket_case_sql("latency_ms")};
    CREATE TABLE usage_hourly_by_provider (
        hour TEXT NOT NULL,
        principal TEXT NOT NULL,
        key TEXT NOT NULL DEFAULT '',
        route TEXT NOT NULL,
        provider TEXT NOT NULL DEFAULT '',
        requests INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        denied INTEGER NOT NULL,
        latency_ms_sum REAL NOT NULL,
        results INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        cost REAL NOT NULL,
        cache_hits INTEGER NOT NULL DEFAULT 0,
        saved_tokens INTEGER NOT NULL DEFAULT 0,
        answers INTEGER NOT NULL DEFAULT 0,
        abstentions INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (hour, principal, key, route, provider)
    );
    INSERT INTO usage_hourly_by_provider (hour, principal, key, route, requests, errors,
        denied, latency_ms_sum, results, tokens_in, tokens_out, cost, cache_hits, saved_tokens)
    SELECT hour, principal, key, route, requests, errors, denied, latency_ms_sum, results,
        tokens_in, tokens_out, cost, cache_hits, saved_tokens FROM usage_hourly;
    DROP TABLE usage_hourly;
    ALTER TABLE usage_hourly_by_provider RENAME TO usage_hourly;
    CREATE TABLE usage_latency_hourly (
        hour TEXT NOT NULL,
        principal TEXT NOT NULL,
        key TEXT NOT NULL DEFAULT '',
        route TEXT NOT NULL,
        provider TEXT NOT NULL DEFAULT '',
        bucket INTEGER NOT NULL,
        requests INTEGER NOT NULL,
        PRIMARY KEY (hour, principal, key, route, provider, bucket)
    );
    CREATE TABLE usage_daily (
        dimension TEXT NOT NULL,
        day TEXT NOT NULL,
        name TEXT NOT NULL,
        requests INTEGER NOT NULL,
        errors INTEGER NOT NULL,
        denied INTEGER NOT NULL,
        latency_ms_sum REAL NOT NULL,
        results INTEGER NOT NULL,
        tokens_in INTEGER NOT NULL,
        tokens_out INTEGER NOT NULL,
        cost REAL NOT NULL,
        cache_hits INTEGER NOT NULL,
        saved_tokens INTEGER NOT NULL,
        answers INTEGER NOT NULL,
        abstentions INTEGER NOT NULL,
        PRIMARY KEY (dimension, day, name)
    );
    CREATE TABLE usage_daily_latency (
        dimension TEXT NOT NULL,
        day TEXT NOT NULL,
        name TEXT NOT NULL,
        bucket INTEGER NOT NULL,
        requests INTEGER NOT NULL,
        PRIMARY KEY (dimension, day, name, bucket)
    );
    {rollup.migration_sql()}
    """),
))

_HOURLY_KEY = "hour, principal, key, route, provider"

_GROUP_SQL = {"principal": "principal", "key": "coalesce(key, '')", "route": "route",
              "day": "substr(t, 1, 10)", "provider": "coalesce(provider, '')",
              "hour": "substr(t, 1, 13)", "all": "''"}


class SqliteMeteringStore(SqliteStore):
    """``MeteringStore`` over the tables above, in ``database``."""

    schema = SCHEMA

    # Usage -------------------------------------------------------------------------------------
    def add_usage(self, rows: list[Usage]) -> None:
        columns = ", ".join((*_USAGE, "latency_bucket"))
        with self.database.transaction():
            self._conn().executemany(
                f"INSERT INTO usage ({columns}) VALUES ({', '.join('?' * (len(_USAGE) + 1))})",
                [(*astuple(r), bucket_of(r.latency_ms)) for r in rows])
            self._add_daily(rows)

    def _add_daily(self, rows: list[Usage]) -> None:
        """Count these requests in their days' rows (``rollup.py``), in the caller's
        transaction."""
        sums, latency = rollup.daily(rows)
        conn = self._conn()
        updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in rollup.SUMS)
        conn.executemany(
            f"INSERT INTO usage_daily (day, dimension, name, {', '.join(rollup.SUMS)}) "
            f"VALUES ({', '.join('?' * (3 + len(rollup.SUMS)))}) "
            f"ON CONFLICT(dimension, day, name) DO UPDATE SET {updates}", sums)
        conn.executemany(
            "INSERT INTO usage_daily_latency (day, dimension, name, bucket, requests) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(dimension, day, name, bucket) DO UPDATE SET "
            "requests = requests + excluded.requests", latency)

    def _refill_daily(self, days: set[str]) -> None:
        """Write these days' rows again from the raw and hourly rows (after a copy's import
        replaced hours), in the caller's transaction."""
        conn = self._conn()
        for day in sorted(days):
            conn.execute("DELETE FROM usage_daily WHERE day = ?", [day])
            conn.execute("DELETE FROM usage_daily_latency WHERE day = ?", [day])
            for dimension in rollup.DIMENSIONS:
                for sql in rollup.fill_sql(dimension, "WHERE substr(at, 1, 10) = ?",
                                           "WHERE substr(hour, 1, 10) = ?"):
                    conn.execute(sql, [day, day])

    def usage_by_day(self, first_day: str, end_day: str, dimension: str,
                     per_day: bool) -> list[dict]:
        conn = self._conn()
        group = "day, name" if per_day else "name"
        window = [dimension, first_day, end_day]
        rows = conn.execute(
            f"SELECT {group}, {', '.join(f'sum({c}) AS {c}' for c in rollup.SUMS)} "
            "FROM usage_daily WHERE dimension = ? AND day >= ? AND day < ? "
            f"GROUP BY {group} ORDER BY requests DESC, {group}", window).fetchall()
        latency: dict[tuple, dict[int, int]] = {}
        for r in conn.execute(
                f"SELECT {group}, bucket, sum(requests) AS requests FROM usage_daily_latency "
                f"WHERE dimension = ? AND day >= ? AND day < ? GROUP BY {group}, bucket",
                window):
            latency.setdefault(tuple(r)[:-2], {})[r["bucket"]] = r["requests"]
        width = 2 if per_day else 1
        return [{**dict(r), "latency_counts": latency.get(tuple(r)[:width], {})}
                for r in rows]

    def compact_usage(self, before: str, drop_before: str) -> int:
        with self.database.transaction():
            conn = self._conn()
            conn.execute(
                f"INSERT INTO usage_hourly ({_HOURLY_KEY}, requests, errors, denied,"
                " latency_ms_sum, results, tokens_in, tokens_out, cost, cache_hits, "
                "saved_tokens, answers, abstentions) "
                "SELECT substr(at, 1, 13), principal, coalesce(key, ''), route, "
                "coalesce(provider, ''), count(*), "
                "sum(status >= 400), sum(status IN (401, 403, 429)), sum(latency_ms), "
                "sum(results), sum(tokens_in), sum(tokens_out), sum(cost), sum(cache_hits), "
                "sum(saved_tokens), sum(answers), sum(abstentions) FROM usage "
                "WHERE at < ? GROUP BY 1, 2, 3, 4, 5 "
                f"ON CONFLICT({_HOURLY_KEY}) DO UPDATE SET "
                "requests = requests + excluded.requests, errors = errors + excluded.errors, "
                "denied = denied + excluded.denied, "
                "latency_ms_sum = latency_ms_sum + excluded.latency_ms_sum, "
                "results = results + excluded.results, "
                "tokens_in = tokens_in + excluded.tokens_in, "
                "tokens_out = tokens_out + excluded.tokens_out, cost = cost + excluded.cost, "
                "cache_hits = cache_hits + excluded.cache_hits, "
                "saved_tokens = saved_tokens + excluded.saved_tokens, "
                "answers = answers + excluded.answers, "
                "abstentions = abstentions + excluded.abstentions",
                [before])
            conn.execute(
                f"INSERT INTO usage_latency_hourly ({_HOURLY_KEY}, bucket, requests) "
                "SELECT substr(at, 1, 13), principal, coalesce(key, ''), route, "
                "coalesce(provider, ''), latency_bucket, count(*) FROM usage WHERE at < ? "
                "GROUP BY 1, 2, 3, 4, 5, 6 "
                f"ON CONFLICT({_HOURLY_KEY}, bucket) DO UPDATE SET "
                "requests = requests + excluded.requests", [before])
            folded = conn.execute("DELETE FROM usage WHERE at < ?", [before]).rowcount
            conn.execute("DELETE FROM usage_hourly WHERE hour < ?", [drop_before[:13]])
            conn.execute("DELETE FROM usage_latency_hourly WHERE hour < ?", [drop_before[:13]])
            # Whole days only: the day retention cuts into is kept whole here.
            conn.execute("DELETE FROM usage_daily WHERE day < ?", [drop_before[:10]])
            conn.execute("DELETE FROM usage_daily_latency WHERE day < ?", [drop_before[:10]])
        return folded

    def usage_report(self, since: str, until: str, group_by: str) -> list[dict]:
        grp = _GROUP_SQL[group_by]
        sql = f"""
            WITH rows AS (
                SELECT at AS t, principal, key, route, provider, 1 AS requests,
                       status >= 400 AS errors, status IN (401, 403, 429) AS denied,
                       latency_ms AS latency_ms_sum, results, tokens_in, tokens_out, cost,
                       cache_hits, saved_tokens, answers, abstentions
                FROM usage WHERE at >= ? AND at < ?
                UNION ALL
                SELECT hour || ':00:00+00:00', principal, nullif(key, ''), route,
                       nullif(provider, ''), requests, errors, denied, latency_ms_sum, results,
                       tokens_in, tokens_out, cost, cache_hits, saved_tokens, answers,
                       abstentions
                FROM usage_hourly WHERE hour >= ? AND hour < ?
            )
            SELECT {grp} AS grp, sum(requests) AS requests,
                   sum(errors) AS errors, sum(denied) AS denied,
                   round(sum(latency_ms_sum) / sum(requests), 1) AS mean_latency_ms,
                   sum(results) AS results, sum(tokens_in) AS tokens_in,
                   sum(tokens_out) AS tokens_out, round(sum(cost), 6) AS cost,
                   sum(cache_hits) AS cache_hits, sum(saved_tokens) AS saved_tokens,
                   sum(answers) AS answers, sum(abstentions) AS abstentions,
                   sum(latency_ms_sum) AS latency_ms_sum, sum(cost) AS cost_sum
            FROM rows GROUP BY grp ORDER BY requests DESC, grp"""
        window = [since, until, since[:13], until[:13]]
        conn = self._conn()
        rows = conn.execute(sql, window).fetchall()
        latency: dict[str, dict[int, int]] = {}
        for r in conn.execute(f"""
            WITH rows AS (
                SELECT at AS t, principal, key, route, provider, latency_bucket AS bucket,
                       1 AS requests
                FROM usage WHERE at >= ? AND at < ?
                UNION ALL
                SELECT hour || ':00:00+00:00', principal, nullif(key, ''), route,
                       nullif(provider, ''), bucket, requests
                FROM usage_latency_hourly WHERE hour >= ? AND hour < ?
            )
            SELECT {grp} AS grp, bucket, sum(requests) AS requests FROM rows
            GROUP BY grp, bucket""", window):
            latency.setdefault(r["grp"], {})[r["bucket"]] = r["requests"]
        return [{group_by: r["grp"] or None, **{k: r[k] for k in r.keys() if k != "grp"},
                 "latency_counts": latency.get(r["grp"], {})} for r in rows]

    # The audit log -----------------------------------------------------------------------------
    def append_audit(self, entry: AuditEntry) -> None:
        self._conn().execute(
            "INSERT INTO audit (at, actor, key, action, target, outcome, detail, client, "
            "request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [entry.at, entry.actor, entry.key, entry.action, entry.target, entry.outcome,
             json.dumps(entry.detail or {}, sort_keys=True, default=str), entry.client,
             entry.request_id])

    def read_audit(self, since: str | None = None, limit: int = 100,
                   action: str | None = None, after_id: int | None = None, *,
                   actor: str | None = None, outcome: str | None = None) -> list[dict]:
        sql = "SELECT * FROM audit WHERE 1 = 1"
        args: list[Any] = []
        if since:
            sql += " AND at >= ?"
            args.append(since)
        for column, value in (("action", action), ("actor", actor), ("outcome", outcome)):
            if value:
                sql += f" AND {column} = ?"
                args.append(value)
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
        columns = ", ".join(_USAGE)  # the bucket is the latency's: computed again on import
        for row in self._conn().execute(f"SELECT id, {columns} FROM usage ORDER BY id"):
            yield row[0], Usage(*row[1:])

    def export_hourly_usage(self) -> list[HourlyUsage]:
        columns = ", ".join(_HOURLY)
        conn = self._conn()
        latency: dict[tuple, dict[int, int]] = {}
        for r in conn.execute(f"SELECT {_HOURLY_KEY}, bucket, requests "
                              "FROM usage_latency_hourly"):
            latency.setdefault(tuple(r)[:5], {})[r["bucket"]] = r["requests"]
        return [HourlyUsage(**{**dict(r), "key": r["key"] or None,
                               "provider": r["provider"] or None,
                               "latency_counts": latency.get(
                                   (r["hour"], r["principal"], r["key"], r["route"],
                                    r["provider"]), {})})
                for r in conn.execute(f"SELECT {columns} FROM usage_hourly "
                                      f"ORDER BY {_HOURLY_KEY}")]

    def export_audit(self) -> Iterator[tuple[int, AuditEntry]]:
        for r in self._conn().execute("SELECT * FROM audit ORDER BY id"):
            yield r["id"], AuditEntry(
                at=r["at"], actor=r["actor"], action=r["action"], outcome=r["outcome"],
                key=r["key"], target=r["target"], detail=json.loads(r["detail"]),
                client=r["client"], request_id=r["request_id"])

    def import_usage(self, rows: list[tuple[int, Usage]]) -> int:
        columns = ", ".join(("id", *_USAGE, "latency_bucket"))
        with self.database.transaction():
            new = [usage for row_id, usage in rows if self._conn().execute(
                f"INSERT INTO usage ({columns}) VALUES ({', '.join('?' * (len(_USAGE) + 2))}) "
                "ON CONFLICT(id) DO NOTHING",
                (row_id, *astuple(usage), bucket_of(usage.latency_ms))).rowcount]
            self._add_daily(new)
        return len(new)

    def import_hourly_usage(self, rows: list[HourlyUsage]) -> None:
        updates = ", ".join(f"{c} = excluded.{c}" for c in _HOURLY[5:])
        with self.database.transaction():
            conn = self._conn()
            # The table keeps no key and no provider as '' (part of its primary key), as
            # compact_usage does.
            keyed = [(row, (row.hour, row.principal, row.key or "", row.route,
                            row.provider or "")) for row in rows]
            conn.executemany(
                f"INSERT INTO usage_hourly ({', '.join(_HOURLY)}) "
                f"VALUES ({', '.join('?' * len(_HOURLY))}) "
                f"ON CONFLICT({_HOURLY_KEY}) DO UPDATE SET {updates}",
                [(*key, *(getattr(row, c) for c in _HOURLY[5:])) for row, key in keyed])
            conn.executemany(
                f"DELETE FROM usage_latency_hourly WHERE ({_HOURLY_KEY}) = (?, ?, ?, ?, ?)",
                [key for _, key in keyed])
            conn.executemany(
                f"INSERT INTO usage_latency_hourly ({_HOURLY_KEY}, bucket, requests) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*key, bucket, n) for row, key in keyed
                 for bucket, n in row.latency_counts.items()])
            self._refill_daily({row.hour[:10] for row in rows})

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
# ``HourlyUsage``'s fields (which add_usage's ``astuple`` relies on too); an hour's latency
# counts are rows of ``usage_latency_hourly``. The key's columns come first.
_USAGE = tuple(f.name for f in fields(Usage))
_HOURLY_FIRST = tuple(_HOURLY_KEY.split(", "))
_HOURLY = (*_HOURLY_FIRST, *(f.name for f in fields(HourlyUsage)
                             if f.name not in _HOURLY_FIRST and f.name != "latency_counts"))
