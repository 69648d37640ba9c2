"""The embedded database: one SQLite file that every store of the installation keeps its tables in.

One file holds, backs up and restores all of the service's state (``citewise backup`` copies it
with SQLite's online backup), but each store owns its tables: the document catalog
(``index/sqlite_catalog.py``), the sources and their runs (``index/sqlite_source_store.py``),
API keys (``api/identity/sqlite_key_store.py``), metering (``api/metering/sqlite_store.py``) and
conversations (``api/sqlite_conversation_store.py``) each declare their own schema and versioned
migrations (``citewise.sqlite_schema``) and are the only code that writes SQL against their
tables. What they share lives here: a connection per thread (WAL, foreign keys), transactions
that take the write lock at once (``BEGIN IMMEDIATE``), a private file, and one way of saying
that the file is damaged or its disk full, wherever SQLite first notices.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, overload

from citewise.errors import (
    BackendError,
    CatalogDamagedError,
    CitewiseError,
    catalog_damage,
    write_failure,
)
from citewise.private_files import private_file
from citewise.sqlite_schema import StoreSchema, check_layout, migrate, store_versions

_T = TypeVar("_T")
_CursorT = TypeVar("_CursorT", bound=sqlite3.Cursor)


class SqliteDatabase:
    """Thread-safe access to one SQLite file: one connection per thread, opened on first use."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Key hashes, the audit log, restricted chunk texts: 0600 before SQLite opens it
        # (its -wal and -shm files take the database file's mode).
        private_file(self.path)
        self._local = threading.local()
        self._opening(lambda: check_layout(self))

    def _opening(self, step: Callable[[], None]) -> None:
        """Run a step of opening the file (its layout, a store's migrations), saying a file
        that is no SQLite database the way every other read of it does."""
        try:
            step()
        except CatalogDamagedError:
            self.close()
            raise
        except sqlite3.DatabaseError as e:
            self.close()
            raise BackendError(
                f"the catalog {self.path} cannot be read: {e}",
                hint="restore it from a backup (citewise backup), or move it aside and run "
                     "`citewise ingest --all --force` to rebuild it from the sources",
            ) from e

    def migrate(self, schema: StoreSchema) -> None:
        """Bring ``schema``'s tables to its latest version (each store calls this when built)."""
        self._opening(lambda: migrate(self, schema))

    def store_versions(self) -> dict[str, int]:
        """The schema version of each store's tables in this file."""
        return store_versions(self)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection. Only the stores' SQLite implementations use it, each on
        its own tables."""
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                   factory=_Connection)
            conn.path = self.path
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def transaction(self) -> Transaction:
        """``with db.transaction():`` groups writes atomically (BEGIN IMMEDIATE: the write lock
        is taken at the start, so two writers queue instead of failing at their first write)."""
        return Transaction(self.connection())

    def close(self) -> None:
        """Close this thread's connection (the next use opens another)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def where_in(self, sql: str, ids: Iterable[str]) -> Iterator[sqlite3.Row]:
        """Rows of ``sql`` (with ``{marks}`` for the placeholders) for these ids, asked 500 at
        a time: SQLite caps the number of parameters of one statement."""
        unique = list(set(ids))
        for i in range(0, len(unique), 500):
            part = unique[i : i + 500]
            yield from self.connection().execute(
                sql.format(marks=",".join("?" * len(part))), part)

    def upsert(self, table: str, row: dict[str, Any], pk: str) -> None:
        """Insert ``row`` or update the columns it names, in one statement (a store's tables'
        columns are fixed by its migrations, so nothing is looked up first)."""
        columns = list(row)
        updates = ", ".join(f'"{c}" = excluded."{c}"' for c in columns if c != pk)
        self.connection().execute(
            f'INSERT INTO "{table}" ({names(columns)}) VALUES ({marks(columns)}) '
            f'ON CONFLICT("{pk}") DO UPDATE SET {updates}', [row[c] for c in columns])


class SqliteStore:
    """What every store's SQLite implementation shares: its tables migrated to ``schema``'s
    latest version when it is built, and this thread's connection to the shared file."""

    schema: ClassVar[StoreSchema]

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database
        database.migrate(self.schema)

    def _conn(self) -> sqlite3.Connection:
        return self.database.connection()

    def close(self) -> None:
        self.database.close()


def names(columns: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def marks(columns: list[str]) -> str:
    return ", ".join("?" * len(columns))


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT/ROLLBACK on an autocommit connection; nests as a no-op."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.outer = False

    def __enter__(self) -> sqlite3.Connection:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.outer = True
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> Literal[False]:
        # SQLite may have rolled back already (a full disk does that): no second ROLLBACK,
        # whose "no transaction is active" would hide why.
        if not self.outer:
            return False
        if exc_type is not None:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            return False
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            # A COMMIT that fails (SQLITE_FULL, an I/O error) "may or may not" roll back by
            # itself: left open, the next transaction would nest inside it as a no-op and never
            # commit. Roll back what is left, and raise why the COMMIT failed.
            if self.conn.in_transaction:
                try:
                    self.conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise
        return False


class _Connection(sqlite3.Connection):
    """Every statement goes through ``execute``: a full disk is turned here into the error that
    stops an ingest run and says what to do, a damaged file into the error that says how to
    restore it."""

    path: Path

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as e:
            failure = self.failure(e)
            if failure is None:
                raise
            raise failure from e

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        try:
            return super().executemany(sql, parameters)
        except sqlite3.Error as e:
            failure = self.failure(e)
            if failure is None:
                raise
            raise failure from e

    @overload
    def cursor(self, factory: None = None) -> sqlite3.Cursor: ...

    @overload
    def cursor(self, factory: Callable[[sqlite3.Connection], _CursorT]) -> _CursorT: ...

    def cursor(self, factory: Callable[[sqlite3.Connection], sqlite3.Cursor] | None = None
               ) -> sqlite3.Cursor:
        # ``execute`` makes its cursor here: rows read later (a scan of every chunk) meet a
        # damaged page too, and must say so the same way.
        return super().cursor(factory or _Cursor)

    def failure(self, e: sqlite3.Error) -> CitewiseError | None:
        """A damaged file is said the same way wherever it is first noticed (opening, a query
        of verify or serve, a row read), never as a traceback; a full disk stops a run."""
        return catalog_damage(e, self.path) or write_failure(e, "the catalog", self.path)


class _Cursor(sqlite3.Cursor):
    def _read(self, read: Callable[[], _T]) -> _T:
        try:
            return read()
        except sqlite3.Error as e:
            connection = self.connection
            failure = connection.failure(e) if isinstance(connection, _Connection) else None
            if failure is None:
                raise
            raise failure from e

    def __next__(self) -> Any:
        return self._read(super().__next__)

    def fetchone(self) -> Any:
        return self._read(super().fetchone)

    def fetchall(self) -> list[Any]:
        return list(self)
