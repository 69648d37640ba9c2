"""The ingest run lock of a deployment on PostgreSQL: an advisory lock of the shared database.

Replicas and workers on several machines share no disk, so ``flock`` cannot keep their runs
apart; the database they all use can. ``pg_try_advisory_lock`` is taken on a connection of its
own, opened for the run and held until it ends (never one of the pool's, which go back to the
pool after each statement and would carry the lock to whoever takes them next). A session-level
advisory lock belongs to its session: when the holder exits, is killed with -9, or its machine
vanishes, PostgreSQL ends the session and the lock with it, so no lock is ever left stale.
(Through a connection pooler, point ``CITEWISE_DATABASE_URL`` at PostgreSQL itself or at a
session-mode pool: a transaction-mode pooler hands sessions around and breaks session locks.)

Who holds it is kept in ``run_lock_holders``, one row per lock written by the holder when it
takes the lock. A row is believed only while the session that wrote it holds the lock (it names
the session's backend pid, checked against ``pg_locks``): a holder killed with -9 leaves its row,
and that row then says nothing. The row's ``token`` is what an ingest job records, so that any
replica can tell whether the job's worker is still alive (``pg_jobs.py``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from citewise.errors import CitewiseError, RunLockedError, RunLockLostError
from citewise.ingest.runlock import holder_note, holder_text
from citewise.postgres import PostgresDatabase
from citewise.store_schema import Migration, StoreSchema

log = logging.getLogger("citewise.ingest")

# The advisory lock's key: any fixed 64-bit number, the same in every citewise, distinct from
# the migrations' (``citewise.postgres.MIGRATION_LOCK``). Advisory locks are per database, so
# two installations in two databases of one server never meet.
RUN_LOCK = 0x63697465_00000002

SCHEMA = StoreSchema("run_lock", (
    Migration("""
    CREATE TABLE run_lock_holders (
        lock_key BIGINT PRIMARY KEY,
        token TEXT NOT NULL,
        backend_pid INTEGER NOT NULL,
        what TEXT NOT NULL,
        pid INTEGER NOT NULL,
        host TEXT NOT NULL,
        since TEXT NOT NULL
    );
    """),
))

# Whether the session ``h.backend_pid`` holds the lock ``h.lock_key`` now. pg_locks shows a
# bigint key as its two 32-bit halves (classid, objid) with objsubid 1, per database.
HOLDS = """
    EXISTS (SELECT 1 FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
              AND l.pid = h.backend_pid
              AND l.classid = (h.lock_key >> 32)::oid
              AND l.objid = (h.lock_key & 4294967295)::oid
              AND l.database = (SELECT oid FROM pg_database
                                WHERE datname = current_database()))
"""

# A holder whose machine vanishes (power, network) has no process left to close its socket:
# PostgreSQL ends the session, and frees the lock, once TCP keepalives go unanswered. The
# operating system's default waits two hours before the first probe; this session asks for
# about a minute. (Settings of the session, so that they pass through poolers and managed
# services that refuse start-up options; on a Unix socket they do nothing, and need not.)
KEEPALIVES = ("SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; "
              "SET tcp_keepalives_count = 3")


class PostgresRunLock:
    """``RunLock`` as a session-level advisory lock of ``database``. ``token`` is the note of
    the run holding it through this object (None when it holds nothing)."""

    def __init__(self, database: PostgresDatabase, key: int = RUN_LOCK) -> None:
        self.database = database
        self.key = key
        self.token: str | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._guard = threading.Lock()
        database.migrate(SCHEMA)

    def acquire(self, what: str) -> None:
        conn = self._connect()
        try:
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()
            if not got or not got[0]:
                raise RunLockedError(
                    "another run holds the ingest lock of this installation (in the database "
                    f"{self.database.display}): {holder_text(self.holder())}; this one did "
                    "nothing",
                    hint="it is released when that run ends, or when its process dies; try "
                         "again then (a cron can simply run at its next time)")
            token = uuid.uuid4().hex
            note = holder_note(what)
            conn.execute(
                "INSERT INTO run_lock_holders (lock_key, token, backend_pid, what, pid, host, "
                "since) VALUES (%s, %s, pg_backend_pid(), %s, %s, %s, %s) "
                "ON CONFLICT (lock_key) DO UPDATE SET token = excluded.token, "
                "backend_pid = excluded.backend_pid, what = excluded.what, "
                "pid = excluded.pid, host = excluded.host, since = excluded.since",
                [self.key, token, note["what"], note["pid"], note["host"], note["since"]])
        except BaseException as e:
            conn.close()  # a lock taken on it goes with the session
            if isinstance(e, psycopg.OperationalError):
                raise self.database.unreachable(e) from e
            if isinstance(e, psycopg.Error):
                raise CitewiseError(f"cannot take the ingest run lock in the database "
                                    f"{self.database.display}: {e}") from e
            raise
        with self._guard:
            self._conn, self.token = conn, token

    def release(self) -> None:
        with self._guard:
            conn, token = self._conn, self.token
            self._conn = self.token = None
        if conn is None:
            return
        try:
            conn.execute("DELETE FROM run_lock_holders WHERE lock_key = %s AND token = %s",
                         [self.key, token])
            conn.execute("SELECT pg_advisory_unlock(%s)", [self.key])
        except psycopg.Error as e:
            # The session is gone already (the database restarted), and the lock with it.
            log.warning("releasing the ingest run lock: %s (the lock went with its session)",
                        str(e).strip())
        finally:
            conn.close()

    def check(self) -> None:
        """A session-level lock lasts as long as its session: when the database restarts or
        the connection drops, the lock is gone although this process still runs, and the pool
        reconnects its other connections as if nothing happened. A statement on the lock's own
        connection (about 0.1 ms on loopback) tells whether the session, and so the lock, is
        alive; the run stops if not, so that it never writes beside the next holder."""
        with self._guard:
            conn = self._conn
            if conn is None:
                return
            try:
                conn.execute("SELECT 1")
                return
            except psycopg.Error as e:
                error = str(e).strip() or type(e).__name__
        raise RunLockLostError(
            f"the ingest run lock in the database {self.database.display} was lost with its "
            f"session ({error}): the database restarted or the connection dropped, and another "
            "run may hold the lock now; this run stopped so that two runs never write at once",
            hint="what it wrote is kept; the next run (the schedule's, or `citewise ingest` "
                 "again) picks up where it stopped")

    def holder(self) -> dict[str, Any] | None:
        row = self.database.row(
            f"SELECT what, pid, host, since FROM run_lock_holders h "
            f"WHERE h.lock_key = %s AND {HOLDS}", [self.key])
        return dict(row) if row is not None else None

    def is_held(self) -> bool:
        """Whether any session holds the lock now (with a note or, briefly, before writing
        it)."""
        row = self.database.row(
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objsubid = 1 AND classid = (%(key)s >> 32)::oid "
            "AND objid = (%(key)s & 4294967295)::oid AND database = (SELECT oid FROM "
            "pg_database WHERE datname = current_database())", {"key": self.key})
        return bool(row and row["n"])

    @contextmanager
    def held(self, what: str) -> Iterator[PostgresRunLock]:
        self.acquire(what)
        try:
            yield self
        finally:
            self.release()

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self.database.url, autocommit=True,
                                   connect_timeout=max(1, int(self.database.connect_timeout)),
                                   application_name="citewise run lock")
        except psycopg.OperationalError as e:
            raise self.database.unreachable(e) from e
        try:
            conn.execute(KEEPALIVES)
        except psycopg.Error as e:
            conn.close()
            raise self.database.unreachable(e) from e
        return conn
