"""The shared database: PostgreSQL, which every replica of the service keeps its state in.

With ``CITEWISE_DATABASE_URL=postgresql://...`` the stores keep their tables here instead of in
the data folder's SQLite file (``citewise.sqlite``), so any number of ``citewise serve``
replicas and ingest workers share one catalog, one set of keys, one rate allowance per
principal, one answer cache and one job queue. Replication, failover and backups are
PostgreSQL's (a managed service, or the operator's own): nothing here copies data between
machines.

What every store's PostgreSQL implementation shares lives here, as ``citewise.sqlite`` does for
SQLite: a pool of connections (psycopg 3 and psycopg_pool), transactions that a store's method
opens and the methods it calls join, the migrations of each store applied under one advisory
lock (replicas that start together on an empty database run each migration once), and one way
of saying that the database cannot be reached, wherever that is first noticed: as the 503
problem document ``backend_unavailable``, after which the pool replaces its broken connections
by itself, so a replica recovers without a restart when the database is back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.abc import Query
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from citewise.errors import BackendError, ConfigError
from citewise.store_schema import StoreSchema

# The key of the advisory lock that migrations run under: any fixed 64-bit number, the same in
# every citewise, distinct from the run lock's (``ingest/pg_runlock.py``).
MIGRATION_LOCK = 0x63697465_00000001
UPGRADE_HINT = "upgrade citewise, or point CITEWISE_DATABASE_URL at another database"
Row = dict[str, Any]


def display_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and urlsplit(url or "").scheme in ("postgresql", "postgres")


class PostgresDatabase:
    """A pool of connections to one PostgreSQL database, shared by the stores of a process.

    ``namespace``: a PostgreSQL schema (which must exist) that the pool's connections put
    first on their ``search_path``, so that the stores built on this pool make and use their
    tables there: what ``citewise reindex`` builds a generation's catalog in, beside the live
    tables (``index/postgres_staging.py``). None: the URL's own search path."""

    def __init__(self, url: str, *, pool_size: int = 10, connect_timeout: float = 5.0,
                 namespace: str | None = None) -> None:
        if not is_postgres_url(url):
            raise ConfigError(f"CITEWISE_DATABASE_URL {display_url(url)!r} is not a "
                              "PostgreSQL URL", hint="write it as postgresql://user:password"
                              "@host:5432/database (libpq's URI form; ?sslmode=require etc. "
                              "are passed through)")
        self.url = url
        self.display = display_url(url)
        self.connect_timeout = connect_timeout
        self.namespace = namespace
        self._local = threading.local()  # the connection of this thread's open transaction
        options = {"options": _with_search_path(url, namespace)} if namespace else {}
        self.pool = ConnectionPool(
            url, min_size=1, max_size=pool_size, open=False, timeout=connect_timeout,
            # Says to the type checker what ``row_factory`` below makes: rows as dicts.
            connection_class=psycopg.Connection[Row],
            # A connection broken while idle (the database restarted) is replaced before a
            # store gets it, so the first request after an outage does not fail for it.
            check=ConnectionPool.check_connection,
            kwargs={"autocommit": True, "row_factory": dict_row,
                    "connect_timeout": max(1, int(connect_timeout)),
                    "application_name": "citewise", **options})
        try:
            self.pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as e:
            self.pool.close()
            raise self.unreachable(e) from e
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
            conn.execute("CREATE TABLE IF NOT EXISTS schema_versions ("
                         "store TEXT PRIMARY KEY, version INTEGER NOT NULL)")

    # Connections and transactions ------------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Row]]:
        """A connection for a few statements: this thread's transaction's when one is open
        (so a store's method joins its caller's transaction), else one from the pool, in
        autocommit mode."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        with self._said(), self.pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Row]]:
        """``with db.transaction() as conn:`` groups statements atomically; nested, it joins
        the outer one (as ``SqliteDatabase.transaction`` does)."""
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        with self._said(), self.pool.connection() as conn, conn.transaction():
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    def rows(self, sql: Query, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        with self.connection() as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def row(self, sql: Query, params: Sequence[Any] | dict[str, Any] = ()) -> Row | None:
        with self.connection() as conn:
            return conn.execute(sql, params).fetchone()  # type: ignore[arg-type]

    def execute(self, sql: Query, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        with self.connection() as conn:
            return conn.execute(sql, params).rowcount  # type: ignore[arg-type]

    @contextmanager
    def _said(self) -> Iterator[None]:
        """A database that cannot be reached, said as the 503 every door knows."""
        try:
            yield
        except PoolTimeout as e:
            raise self.unreachable(e) from e
        except psycopg.OperationalError as e:
            raise self.unreachable(e) from e

    def unreachable(self, e: BaseException) -> BackendError:
        return BackendError(
            f"the database {self.display} cannot be reached: {str(e).strip() or type(e).__name__}",
            hint="check that PostgreSQL is running and CITEWISE_DATABASE_URL points at it; "
                 "citewise reconnects by itself once it answers again")

    def ping(self) -> None:
        """Raise ``BackendError`` unless the database answers now (for ``/healthz``)."""
        self.row("SELECT 1")

    # Migrations ------------------------------------------------------------------------------
    def migrate(self, schema: StoreSchema) -> None:
        """Bring ``schema``'s tables to its latest version. Under a transaction-scoped advisory
        lock: replicas starting together queue here, and each migration runs once."""
        recorded = self.row("SELECT version FROM schema_versions WHERE store = %s",
                            [schema.store])
        if recorded is not None and recorded["version"] == schema.latest:
            return
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
            row = conn.execute("SELECT version FROM schema_versions WHERE store = %s",
                               [schema.store]).fetchone()
            current = row["version"] if row is not None else 0
            if current > schema.latest:
                raise ConfigError(
                    f"the {schema.store} tables of the database {self.display} have schema "
                    f"version {current}, newer than this citewise ({schema.latest})",
                    hint=UPGRADE_HINT)
            for migration in schema.migrations[current:]:
                conn.execute(migration.sql)  # a script, no params: PostgreSQL runs it whole
            conn.execute("INSERT INTO schema_versions (store, version) VALUES (%s, %s) "
                         "ON CONFLICT (store) DO UPDATE SET version = excluded.version",
                         [schema.store, schema.latest])

    def store_versions(self) -> dict[str, int]:
        """The schema version of each store's tables in this database."""
        return {r["store"]: r["version"] for r in
                self.rows("SELECT store, version FROM schema_versions ORDER BY store")}

    def close(self) -> None:
        self.pool.close()


def _with_search_path(url: str, namespace: str) -> str:
    """The URL's ``options`` (kept: an operator's statement_timeout, say) with ``namespace``
    first on the search path (a name of letters, digits and underscores: no quoting)."""
    if not namespace.replace("_", "").isalnum():
        raise ConfigError(f"{namespace!r} is not a schema name citewise makes",
                          hint="letters, digits and underscores only")
    given = str(conninfo_to_dict(url).get("options") or "")
    return f"{given} -c search_path={namespace}".strip()


class PostgresStore:
    """What every store's PostgreSQL implementation shares: its tables migrated to ``schema``'s
    latest version when it is built, and the process's pool. Closing a store leaves the pool to
    its owner (``Stores.close``): the other stores still use it."""

    schema: ClassVar[StoreSchema]

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database
        database.migrate(self.schema)

    def close(self) -> None:
        pass
