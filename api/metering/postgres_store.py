"""Metering (``store.py``) in PostgreSQL (``CITEWISE_DATABASE_URL``): ``usage``, ``usage_hourly``,
``audit`` and ``rate_buckets``, shared by every replica.

What differs from ``sqlite_store.py``, beyond the dialect:

* the token buckets are changed in place, request by request (``change_buckets``, used by
  ``buckets.SharedLevels``), so replicas draw on one allowance per principal;
* the audit log refuses UPDATE, DELETE and TRUNCATE by a trigger, as the SQLite triggers do
  (retention never deletes audit entries);
* compaction deletes the requests it folds in the same statement that folds them, so two
  replicas compacting at once never count a request twice.

Times are ISO text ``COLLATE "C"`` (compared byte by byte, as in SQLite).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import astuple, fields
from typing import Any

from psycopg.types.json import Jsonb

from citewise.api.metering import rollup
from citewise.api.metering.buckets import Level, Step
from citewise.api.metering.latency import bucket_case_sql, bucket_of
from citewise.api.metering.store import AuditEntry, HourlyUsage, Usage
from citewise.postgres import PostgresStore
from citewise.store_schema import Migration, StoreSchema

SCHEMA = StoreSchema("metering", (
    Migration("""
    CREATE TABLE rate_buckets (
        bucket TEXT PRIMARY KEY,
        tokens DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX rate_buckets_updated ON rate_buckets (updated_at);
    CREATE TABLE usage (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C",
        route TEXT COLLATE "C" NOT NULL,
        method TEXT NOT NULL,
        status INTEGER NOT NULL,
        latency_ms DOUBLE PRECISION NOT NULL,
        results INTEGER NOT NULL DEFAULT 0,
        tokens_in INTEGER NOT NULL DEFAULT 0,
        tokens_out INTEGER NOT NULL DEFAULT 0,
        cost DOUBLE PRECISION NOT NULL DEFAULT 0,
        request_id TEXT,
        cache_hits INTEGER NOT NULL DEFAULT 0,
        saved_tokens INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX usage_at ON usage (at);
    CREATE TABLE usage_hourly (
        hour TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL DEFAULT '',
        route TEXT COLLATE "C" NOT NULL,
        requests BIGINT NOT NULL,
        errors BIGINT NOT NULL,
        denied BIGINT NOT NULL,
        latency_ms_sum DOUBLE PRECISION NOT NULL,
        results BIGINT NOT NULL,
        tokens_in BIGINT NOT NULL,
        tokens_out BIGINT NOT NULL,
        cost DOUBLE PRECISION NOT NULL,
        cache_hits BIGINT NOT NULL DEFAULT 0,
        saved_tokens BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (hour, principal, key, route)
    );
    CREATE TABLE audit (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at TEXT COLLATE "C" NOT NULL,
        actor TEXT NOT NULL,
        key TEXT,
        action TEXT NOT NULL,
        target TEXT,
        outcome TEXT NOT NULL,
        detail JSONB NOT NULL DEFAULT '{}',
        client TEXT,
        request_id TEXT
    );
    CREATE INDEX audit_at ON audit (at);
    CREATE FUNCTION audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the audit log is append-only';
    END
    $$;
    CREATE TRIGGER audit_no_change BEFORE UPDATE OR DELETE ON audit
        FOR EACH ROW EXECUTE FUNCTION audit_is_append_only();
    CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
        FOR EACH STATEMENT EXECUTE FUNCTION audit_is_append_only();
    """),
    # The console's figures, as the SQLite store's third migration: the provider (part of an
    # hour's key), answers and abstentions, and requests per latency bucket (``latency.py``).
    Migration(f"""
    ALTER TABLE usage ADD COLUMN provider TEXT COLLATE "C";
    ALTER TABLE usage ADD COLUMN answers INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN abstentions INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN latency_bucket INTEGER NOT NULL DEFAULT 0;
    UPDATE usage SET latency_bucket = {bucket_case_sql("latency_ms")};
    ALTER TABLE usage_hourly ADD COLUMN provider TEXT COLLATE "C" NOT NULL DEFAULT '';
    ALTER TABLE usage_hourly ADD COLUMN answers BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE usage_hourly ADD COLUMN abstentions BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_pkey;
    ALTER TABLE usage_hourly ADD PRIMARY KEY (hour, principal, key, route, provider);
    CREATE TABLE usage_latency_hourly (
        hour TEXT COLLATE "C" NOT NULL,
        principal TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL DEFAULT '',
        route TEXT COLLATE "C" NOT NULL,
        provider TEXT COLLATE "C" NOT NULL DEFAULT '',
        bucket INTEGER NOT NULL,
        requests BIGINT NOT NULL,
        PRIMARY KEY (hour, principal, key, route, provider, bucket)
    );
    CREATE TABLE usage_daily (
        dimension TEXT COLLATE "C" NOT NULL,
        day TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL,
        requests BIGINT NOT NULL,
        errors BIGINT NOT NULL,
        denied BIGINT NOT NULL,
        latency_ms_sum DOUBLE PRECISION NOT NULL,
        results BIGINT NOT NULL,
        tokens_in BIGINT NOT NULL,
        tokens_out BIGINT NOT NULL,
        cost DOUBLE PRECISION NOT NULL,
        cache_hits BIGINT NOT NULL,
        saved_tokens BIGINT NOT NULL,
        answers BIGINT NOT NULL,
        abstentions BIGINT NOT NULL,
        PRIMARY KEY (dimension, day, name)
    );
    CREATE TABLE usage_daily_latency (
        dimension TEXT COLLATE "C" NOT NULL,
        day TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL,
        bucket INTEGER NOT NULL,
        requests BIGINT NOT NULL,
        PRIMARY KEY (dimension, day, name, bucket)
    );
    {rollup.migration_sql()}
    """),
))

# The first key of the transaction-scoped advisory locks on rate buckets (the second is the
# bucket's checksum): PostgreSQL keeps two-key locks apart from the one-key ones that
# migrations and the run lock take.
BUCKET_LOCKS = 0x63697465

_USAGE = ", ".join(f.name for f in fields(Usage))  # in the order of its fields (astuple)
_SUMS = ("requests", "errors", "denied", "results", "tokens_in", "tokens_out", "cache_hits",
         "saved_tokens", "answers", "abstentions")
_GROUP_SQL = {"principal": "principal", "key": "coalesce(key, '')", "route": "route",
              "day": "substr(t, 1, 10)", "provider": "coalesce(provider, '')",
              "hour": "substr(t, 1, 13)", "all": "''"}
_HOURLY_KEY = "hour, principal, key, route, provider"


class PostgresMeteringStore(PostgresStore):
    """``MeteringStore`` over the tables above, in ``database``; its buckets are shared."""

    schema = SCHEMA

    # Usage -------------------------------------------------------------------------------------
    def add_usage(self, rows: list[Usage]) -> None:
        with self.database.transaction() as conn:
            conn.cursor().executemany(
                f"INSERT INTO usage ({_USAGE}, latency_bucket) "
                f"VALUES ({', '.join(['%s'] * (len(fields(Usage)) + 1))})",
                [(*astuple(r), bucket_of(r.latency_ms)) for r in rows])
            self._add_daily(conn, rows)

    def _add_daily(self, conn: Any, rows: list[Usage]) -> None:
        """Count these requests in their days' rows (``rollup.py``), in ``conn``'s
        transaction. Sorted, so that replicas adding to the same rows lock them in one order."""
        sums, latency = rollup.daily(rows)
        updates = ", ".join(f"{c} = d.{c} + excluded.{c}" for c in rollup.SUMS)
        cursor = conn.cursor()
        if sums:
            cursor.executemany(
                f"INSERT INTO usage_daily AS d (day, dimension, name, {', '.join(rollup.SUMS)}) "
                f"VALUES ({', '.join(['%s'] * (3 + len(rollup.SUMS)))}) "
                f"ON CONFLICT (dimension, day, name) DO UPDATE SET {updates}", sorted(sums))
        if latency:
            cursor.executemany(
                "INSERT INTO usage_daily_latency AS l (day, dimension, name, bucket, requests) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (dimension, day, name, bucket) "
                "DO UPDATE SET requests = l.requests + excluded.requests", sorted(latency))

    def usage_by_day(self, first_day: str, end_day: str, dimension: str,
                     per_day: bool) -> list[dict[str, Any]]:
        group = "day, name" if per_day else "name"
        window = [dimension, first_day, end_day]
        sums = ", ".join(f"sum({c})::bigint AS {c}" for c in rollup.SUMS
                         if c not in ("latency_ms_sum", "cost"))
        rows = self.database.rows(
            f"SELECT {group}, {sums}, sum(latency_ms_sum) AS latency_ms_sum, "
            "sum(cost) AS cost "
            "FROM usage_daily WHERE dimension = %s AND day >= %s AND day < %s "
            f"GROUP BY {group} ORDER BY requests DESC, {group}", window)
        latency: dict[tuple, dict[int, int]] = {}
        for r in self.database.rows(
                f"SELECT {group}, bucket, sum(requests)::bigint AS requests "
                "FROM usage_daily_latency WHERE dimension = %s AND day >= %s AND day < %s "
                f"GROUP BY {group}, bucket", window):
            key = (r["day"], r["name"]) if per_day else (r["name"],)
            latency.setdefault(key, {})[r["bucket"]] = r["requests"]
        first = ("day", "name") if per_day else ("name",)
        return [{**{k: r[k] for k in first}, **{c: r[c] for c in rollup.SUMS},
                 "latency_counts": latency.get(tuple(r[k] for k in first), {})}
                for r in rows]

    def compact_usage(self, before: str, drop_before: str) -> int:
        with self.database.transaction() as conn:
            row = conn.execute(
                f"""
                WITH folded AS (
                    DELETE FROM usage WHERE at < %s RETURNING {_USAGE}, latency_bucket
                ), hourly AS (
                    INSERT INTO usage_hourly AS h ({_HOURLY_KEY}, requests,
                        errors, denied, latency_ms_sum, results, tokens_in, tokens_out, cost,
                        cache_hits, saved_tokens, answers, abstentions)
                    SELECT substr(at, 1, 13), principal, coalesce(key, ''), route,
                           coalesce(provider, ''), count(*),
                           sum((status >= 400)::int), sum((status IN (401, 403, 429))::int),
                           sum(latency_ms), sum(results), sum(tokens_in), sum(tokens_out),
                           sum(cost), sum(cache_hits), sum(saved_tokens), sum(answers),
                           sum(abstentions)
                    FROM folded GROUP BY 1, 2, 3, 4, 5
                    ON CONFLICT ({_HOURLY_KEY}) DO UPDATE SET
                        requests = h.requests + excluded.requests,
                        errors = h.errors + excluded.errors,
                        denied = h.denied + excluded.denied,
                        latency_ms_sum = h.latency_ms_sum + excluded.latency_ms_sum,
                        results = h.results + excluded.results,
                        tokens_in = h.tokens_in + excluded.tokens_in,
                        tokens_out = h.tokens_out + excluded.tokens_out,
                        cost = h.cost + excluded.cost,
                        cache_hits = h.cache_hits + excluded.cache_hits,
                        saved_tokens = h.saved_tokens + excluded.saved_tokens,
                        answers = h.answers + excluded.answers,
                        abstentions = h.abstentions + excluded.abstentions
                    RETURNING 1
                ), latency AS (
                    INSERT INTO usage_latency_hourly AS l ({_HOURLY_KEY}, bucket, requests)
                    SELECT substr(at, 1, 13), principal, coalesce(key, ''), route,
                           coalesce(provider, ''), latency_bucket, count(*)
                    FROM folded GROUP BY 1, 2, 3, 4, 5, 6
                    ON CONFLICT ({_HOURLY_KEY}, bucket) DO UPDATE SET
                        requests = l.requests + excluded.requests
                    RETURNING 1
                )
                SELECT count(*) AS folded FROM folded""", [before]).fetchone()
            conn.execute("DELETE FROM usage_hourly WHERE hour < %s", [drop_before[:13]])
            conn.execute("DELETE FROM usage_latency_hourly WHERE hour < %s",
                         [drop_before[:13]])
            # Whole days only: the day retention cuts into is kept whole here.
            conn.execute("DELETE FROM usage_daily WHERE day < %s", [drop_before[:10]])
            conn.execute("DELETE FROM usage_daily_latency WHERE day < %s", [drop_before[:10]])
        return int(row["folded"]) if row else 0

    def usage_report(self, since: str, until: str, group_by: str) -> list[dict[str, Any]]:
        sums = ", ".join(f"sum({c})::bigint AS {c}" for c in _SUMS)
        grp = _GROUP_SQL[group_by]
        query = f"""
            WITH rows AS (
                SELECT at AS t, principal, key, route, provider, 1::bigint AS requests,
                       (status >= 400)::int::bigint AS errors,
                       (status IN (401, 403, 429))::int::bigint AS denied,
                       latency_ms AS latency_ms_sum, results::bigint, tokens_in::bigint,
                       tokens_out::bigint, cost, cache_hits::bigint, saved_tokens::bigint,
                       answers::bigint, abstentions::bigint
                FROM usage WHERE at >= %s AND at < %s
                UNION ALL
                SELECT hour || ':00:00+00:00', principal, nullif(key, ''), route,
                       nullif(provider, ''), requests, errors, denied, latency_ms_sum, results,
                       tokens_in, tokens_out, cost, cache_hits, saved_tokens, answers,
                       abstentions
                FROM usage_hourly WHERE hour >= %s AND hour < %s
            )
            SELECT {grp} AS grp, {sums},
                   round((sum(latency_ms_sum) / sum(requests))::numeric, 1)::float8
                       AS mean_latency_ms,
                   round(sum(cost)::numeric, 6)::float8 AS cost,
                   sum(latency_ms_sum) AS latency_ms_sum, sum(cost) AS cost_sum
            FROM rows GROUP BY grp ORDER BY requests DESC, grp"""
        window = [since, until, since[:13], until[:13]]
        rows = self.database.rows(query, window)
        latency: dict[str, dict[int, int]] = {}
        for r in self.database.rows(f"""
            WITH rows AS (
                SELECT at AS t, principal, key, route, provider, latency_bucket AS bucket,
                       1::bigint AS requests
                FROM usage WHERE at >= %s AND at < %s
                UNION ALL
                SELECT hour || ':00:00+00:00', principal, nullif(key, ''), route,
                       nullif(provider, ''), bucket, requests
                FROM usage_latency_hourly WHERE hour >= %s AND hour < %s
            )
            SELECT {grp} AS grp, bucket, sum(requests)::bigint AS requests FROM rows
            GROUP BY grp, bucket""", window):
            latency.setdefault(r["grp"], {})[r["bucket"]] = r["requests"]
        # The columns in the order the SQLite store gives them.
        order = ("requests", "errors", "denied", "mean_latency_ms", "results", "tokens_in",
                 "tokens_out", "cost", "cache_hits", "saved_tokens", "answers", "abstentions",
                 "latency_ms_sum", "cost_sum")
        return [{group_by: r["grp"] or None, **{k: r[k] for k in order},
                 "latency_counts": latency.get(r["grp"], {})} for r in rows]

    # The audit log -----------------------------------------------------------------------------
    def append_audit(self, entry: AuditEntry) -> None:
        self.database.execute(
            "INSERT INTO audit (at, actor, key, action, target, outcome, detail, client, "
            "request_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [entry.at, entry.actor, entry.key, entry.action, entry.target, entry.outcome,
             Jsonb(entry.detail or {}, dumps=_dumps), entry.client, entry.request_id])

    def read_audit(self, since: str | None = None, limit: int = 100,
                   action: str | None = None, after_id: int | None = None, *,
                   actor: str | None = None, outcome: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT * FROM audit WHERE TRUE"
        args: list[Any] = []
        if since:
            query += " AND at >= %s"
            args.append(since)
        for column, value in (("action", action), ("actor", actor), ("outcome", outcome)):
            if value:
                query += f" AND {column} = %s"
                args.append(value)
        if after_id is not None:
            query += " AND id > %s"
            args.append(after_id)
        query += " ORDER BY id DESC LIMIT %s"
        args.append(limit)
        return self.database.rows(query, args)

    # Token buckets -----------------------------------------------------------------------------
    def load_buckets(self) -> dict[str, Level]:
        return {r["bucket"]: (r["tokens"], r["updated_at"]) for r in self.database.rows(
            "SELECT bucket, tokens, updated_at FROM rate_buckets")}

    def save_buckets(self, levels: dict[str, Level], forget_before: float) -> None:
        with self.database.transaction() as conn:
            if levels:
                self._write_buckets(levels)
            conn.execute("DELETE FROM rate_buckets WHERE updated_at < %s", [forget_before])

    def change_buckets(self, buckets: Sequence[str], step: Step) -> None:
        """Read, change (``step``) and write these buckets as one transaction: another replica
        changing any of them waits until this one has committed, and then reads its result."""
        with self.database.transaction() as conn:
            # A row not written yet cannot be locked (FOR UPDATE), so an advisory lock per
            # bucket, taken in one order by everyone: no two replicas wait on each other in
            # opposite orders.
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s::int, k) FROM unnest(%s::int[]) AS k",
                [BUCKET_LOCKS, sorted({_checksum(b) for b in buckets})])
            # A statement of its own, after the locks: it reads what the last holder wrote.
            kept = {r["bucket"]: (r["tokens"], r["updated_at"]) for r in conn.execute(
                "SELECT bucket, tokens, updated_at FROM rate_buckets "
                "WHERE bucket = ANY(%s::text[])", [list(buckets)])}
            changed = step([kept.get(b) for b in buckets])
            if changed is not None:
                self._write_buckets(dict(zip(buckets, changed, strict=True)))

    def _write_buckets(self, levels: dict[str, Level]) -> None:
        names = sorted(levels)
        self.database.execute(
            "INSERT INTO rate_buckets (bucket, tokens, updated_at) "
            "SELECT * FROM unnest(%s::text[], %s::float8[], %s::float8[]) "
            "ON CONFLICT (bucket) DO UPDATE SET tokens = excluded.tokens, "
            "updated_at = excluded.updated_at",
            [names, [levels[b][0] for b in names], [levels[b][1] for b in names]])

    # A copy of the whole store -------------------------------------------------------------------
    def export_usage(self) -> Iterator[tuple[int, Usage]]:
        for r in self.database.rows(f"SELECT id, {_USAGE} FROM usage ORDER BY id"):
            yield r["id"], Usage(**{f.name: r[f.name] for f in fields(Usage)})

    def export_hourly_usage(self) -> list[HourlyUsage]:
        latency: dict[tuple, dict[int, int]] = {}
        for r in self.database.rows("SELECT * FROM usage_latency_hourly"):
            key = (r["hour"], r["principal"], r["key"], r["route"], r["provider"])
            latency.setdefault(key, {})[r["bucket"]] = r["requests"]
        return [HourlyUsage(**{**r, "key": r["key"] or None, "provider": r["provider"] or None,
                               "latency_counts": latency.get(
                                   (r["hour"], r["principal"], r["key"], r["route"],
                                    r["provider"]), {})})
                for r in self.database.rows(
                    f"SELECT * FROM usage_hourly ORDER BY {_HOURLY_KEY}")]

    def export_audit(self) -> Iterator[tuple[int, AuditEntry]]:
        for r in self.database.rows("SELECT * FROM audit ORDER BY id"):
            yield r["id"], AuditEntry(
                at=r["at"], actor=r["actor"], action=r["action"], outcome=r["outcome"],
                key=r["key"], target=r["target"], detail=r["detail"], client=r["client"],
                request_id=r["request_id"])

    def import_usage(self, rows: list[tuple[int, Usage]]) -> int:
        columns = ["id", *(f.name for f in fields(Usage)), "latency_bucket"]
        by_id = dict(rows)
        return self._import_with_ids("usage", columns, [
            (row_id, *astuple(usage), bucket_of(usage.latency_ms)) for row_id, usage in rows],
            then=lambda conn, new_ids: self._add_daily(conn, [by_id[i] for i in new_ids]))

    def import_hourly_usage(self, rows: list[HourlyUsage]) -> None:
        first = _HOURLY_KEY.split(", ")
        rest = [f.name for f in fields(HourlyUsage)
                if f.name not in first and f.name != "latency_counts"]
        updates = ", ".join(f"{c} = excluded.{c}" for c in rest)
        # The table keeps no key and no provider as '' (part of its primary key), as
        # compaction does.
        keyed = [(r, (r.hour, r.principal, r.key or "", r.route, r.provider or ""))
                 for r in rows]
        with self.database.transaction() as conn:
            cursor = conn.cursor()
            cursor.executemany(
                f"INSERT INTO usage_hourly ({', '.join([*first, *rest])}) "
                f"VALUES ({', '.join(['%s'] * (len(first) + len(rest)))}) "
                f"ON CONFLICT ({_HOURLY_KEY}) DO UPDATE SET {updates}",
                [(*key, *(getattr(r, c) for c in rest)) for r, key in keyed])
            cursor.executemany(
                f"DELETE FROM usage_latency_hourly WHERE ({_HOURLY_KEY}) = "
                "(%s, %s, %s, %s, %s)", [key for _, key in keyed])
            latency = [(*key, bucket, n) for r, key in keyed
                       for bucket, n in r.latency_counts.items()]
            if latency:
                cursor.executemany(
                    f"INSERT INTO usage_latency_hourly ({_HOURLY_KEY}, bucket, requests) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s)", latency)
            # The days these hours are in, written again from the raw and hourly rows.
            for day in sorted({r.hour[:10] for r in rows}):
                conn.execute("DELETE FROM usage_daily WHERE day = %s", [day])
                conn.execute("DELETE FROM usage_daily_latency WHERE day = %s", [day])
                for dimension in rollup.DIMENSIONS:
                    for sql in rollup.fill_sql(dimension, "WHERE substr(at, 1, 10) = %s",
                                               "WHERE substr(hour, 1, 10) = %s"):
                        conn.execute(sql, [day, day])

    def import_audit(self, entries: list[tuple[int, AuditEntry]]) -> int:
        columns = ["id", "at", "actor", "key", "action", "target", "outcome", "detail",
                   "client", "request_id"]
        return self._import_with_ids("audit", columns, [
            (row_id, e.at, e.actor, e.key, e.action, e.target, e.outcome,
             Jsonb(e.detail or {}, dumps=_dumps), e.client, e.request_id)
            for row_id, e in entries])

    def _import_with_ids(self, table: str, columns: list[str], rows: list[tuple[Any, ...]],
                         then: Callable[[Any, list[int]], None] | None = None) -> int:
        """Insert ``rows`` with the ids they bring (the first column), leaving an id kept
        already as it is; how many were new (``then`` is told their ids, in the same
        transaction). The ids given move the table's identity past them, so that what is
        added later comes after."""
        new: list[int] = []
        with self.database.transaction() as conn:
            for row in rows:
                added = conn.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}) OVERRIDING SYSTEM VALUE "
                    f"VALUES ({', '.join(['%s'] * len(columns))}) "
                    "ON CONFLICT (id) DO NOTHING RETURNING id", row).fetchone()
                if added is not None:
                    new.append(row[0])
            if new:
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                             f"(SELECT max(id) FROM {table}))")
                if then is not None:
                    then(conn, new)
        return len(new)


def _checksum(bucket: str) -> int:
    """The bucket's advisory lock key: a signed 32-bit number (two buckets may share one;
    they then take turns, which is only slower)."""
    value = zlib.crc32(bucket.encode())
    return value - (1 << 32) if value >= 1 << 31 else value


def _dumps(value: Any) -> str:
    # As the SQLite store writes a detail: what JSON cannot say (a datetime) is said as text.
    return json.dumps(value, sort_keys=True, default=str)
