"""The sources and their ingest runs (``index/source_store.py``) in the embedded SQLite database.

Its tables: ``sources``, ``ingest_runs`` and ``ingest_errors``. Besides the file it keeps a small
reserve file on the same disk (``FINAL_WORD_BYTES``) for the last write of a run that a full
disk stopped.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from citewise.index.catalog import now
from citewise.index.source_store import RUN_FIELDS, RunCounts, SourceRecord, process_alive
from citewise.sqlite import SqliteStore, marks, names
from citewise.sqlite_schema import Migration, StoreSchema

# ``shipped_as``: the catalog's PRAGMA user_version that first held the change, before the
# stores split (``citewise.sqlite_schema``).
SCHEMA = StoreSchema("sources", (
    Migration("""
    CREATE TABLE sources (
        name TEXT PRIMARY KEY,
        type TEXT NOT NULL,
        config TEXT NOT NULL DEFAULT '{}',
        state TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE ingest_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,
        trigger TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        seen INTEGER NOT NULL DEFAULT 0,
        added INTEGER NOT NULL DEFAULT 0,
        updated INTEGER NOT NULL DEFAULT 0,
        unchanged INTEGER NOT NULL DEFAULT 0,
        deleted INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        chunks_written INTEGER NOT NULL DEFAULT 0,
        chunks_embedded INTEGER NOT NULL DEFAULT 0,
        message TEXT
    );
    CREATE INDEX ingest_runs_source ON ingest_runs(source, id);
    CREATE TABLE ingest_errors (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES ingest_runs(id),
        source TEXT NOT NULL,
        external_id TEXT,
        error TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE INDEX ingest_errors_run ON ingest_errors(run_id);
    """, shipped_as=1),
    # Each source's healthy size for the mass-deletion brake.
    Migration("""
    ALTER TABLE sources ADD COLUMN healthy_documents INTEGER;
    """, shipped_as=3),
    # Which process runs an ingest run, so that a run whose process died before recording
    # its end (kill -9, a second Ctrl-C during its last writes) is seen as interrupted at once.
    Migration("""
    ALTER TABLE ingest_runs ADD COLUMN host TEXT;
    ALTER TABLE ingest_runs ADD COLUMN pid INTEGER;
    """, shipped_as=10),
))

# Room kept on the database's disk for the last word of an ingest run. A run stopped by a full
# disk still has to record how it ended (failed, its counts, why), and every SQLite write needs
# new pages in the write-ahead log; on a disk with no room at all, that last write failed too
# and the run was listed as `interrupted`, without its message. So a small file is kept beside
# the database, deleted to make that room, and made again by the next run that has room for it.
FINAL_WORD_BYTES = 64 * 1024


class SqliteSourceStore(SqliteStore):
    """``SourceStore`` over the tables above, in ``database``."""

    schema = SCHEMA

    # Sources -----------------------------------------------------------------------------------
    def ensure_source(self, name: str, type: str, config: dict[str, Any]) -> None:
        at = now()
        self._conn().execute(
            "INSERT INTO sources (name, type, config, state, created_at, updated_at) "
            "VALUES (?, ?, ?, '{}', ?, ?) ON CONFLICT(name) DO UPDATE SET type = excluded.type, "
            "config = excluded.config, updated_at = excluded.updated_at",
            [name, type, json.dumps(config, sort_keys=True, default=str), at, at])

    def get_source(self, name: str) -> SourceRecord | None:
        row = self._conn().execute("SELECT * FROM sources WHERE name = ?", [name]).fetchone()
        return _source(row) if row is not None else None

    def list_sources(self) -> list[SourceRecord]:
        return [_source(r) for r in self._conn().execute("SELECT * FROM sources ORDER BY name")]

    def set_source_state(self, name: str, state: dict[str, Any]) -> None:
        self._conn().execute("UPDATE sources SET state = ? WHERE name = ?",
                             [json.dumps(state, default=str), name])

    def healthy_documents(self, name: str) -> int | None:
        row = self._conn().execute(
            "SELECT healthy_documents FROM sources WHERE name = ?", [name]).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def set_healthy_documents(self, name: str, count: int) -> None:
        self._conn().execute("UPDATE sources SET healthy_documents = ? WHERE name = ?",
                             [count, name])

    # Runs --------------------------------------------------------------------------------------
    def start_run(self, source: str, trigger: str) -> int:
        with self.database.transaction():
            conn = self._conn()
            # A run still marked running for this source died with its process (crash, kill):
            # say so instead of leaving it running forever.
            conn.execute("UPDATE ingest_runs SET status = 'interrupted', finished_at = ? "
                         "WHERE source = ? AND status = 'running'", [now(), source])
            run_id = conn.execute(
                "INSERT INTO ingest_runs (source, trigger, status, started_at, host, pid) "
                "VALUES (?, ?, 'running', ?, ?, ?)",
                [source, trigger, now(), socket.gethostname(), os.getpid()]).lastrowid
        assert run_id is not None
        return run_id

    def update_run(self, run_id: int, counts: RunCounts) -> None:
        self._update_run(run_id, asdict(counts))

    def finish_run(self, run_id: int, counts: RunCounts, status: str,
                   message: str | None = None) -> None:
        self._update_run(run_id, {**asdict(counts), "status": status, "finished_at": now(),
                                  "message": message})

    def _update_run(self, run_id: int, fields: dict[str, Any]) -> None:
        columns = list(fields)
        self._conn().execute(
            f"UPDATE ingest_runs SET {', '.join(f'{c} = ?' for c in columns)} WHERE id = ?",
            [*(fields[c] for c in columns), run_id])

    def record_error(self, run_id: int, source: str, external_id: str | None,
                     error: str) -> None:
        self._conn().execute(
            "INSERT INTO ingest_errors (run_id, source, external_id, error, at) "
            "VALUES (?, ?, ?, ?, ?)", [run_id, source, external_id, error, now()])

    def get_run(self, run_id: int) -> dict[str, Any] | None:
        self.settle_dead_runs()
        row = self._conn().execute("SELECT * FROM ingest_runs WHERE id = ?", [run_id]).fetchone()
        if row is None:
            return None
        run = dict(row)
        run["errors"] = [{"external_id": e["external_id"], "error": e["error"]}
                         for e in self._conn().execute(
                             "SELECT external_id, error FROM ingest_errors WHERE run_id = ? "
                             "ORDER BY id", [run_id])]
        return run

    def list_runs(self, source: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        self.settle_dead_runs()
        where, args = ("WHERE source = ?", [source]) if source else ("", [])
        return [dict(r) for r in self._conn().execute(
            f"SELECT * FROM ingest_runs {where} ORDER BY id DESC LIMIT ?", [*args, limit])]

    def last_finished(self) -> dict[str, tuple[str | None, str | None]]:
        return {r[0]: (r[1], r[2]) for r in self._conn().execute(
            "SELECT source, MAX(CASE WHEN status = 'succeeded' THEN finished_at END), "
            "MAX(CASE WHEN status IN ('succeeded', 'partial') THEN finished_at END) "
            "FROM ingest_runs GROUP BY source")}

    def settle_dead_runs(self) -> int:
        host = socket.gethostname()
        try:
            rows = self._conn().execute(
                "SELECT id, pid FROM ingest_runs WHERE status = 'running' AND host = ? "
                "AND pid IS NOT NULL", [host]).fetchall()
            dead = [(run_id, pid) for run_id, pid in rows if not process_alive(pid)]
            for run_id, pid in dead:
                self._conn().execute(
                    "UPDATE ingest_runs SET status = 'interrupted', finished_at = ?, "
                    "message = COALESCE(message, ?) WHERE id = ? AND status = 'running'",
                    [now(), f"its process (pid {pid}) ended before recording the end of the "
                            "run; what it wrote is kept and the next run resumes", run_id])
            return len(dead)
        except sqlite3.Error:  # a read-only or busy database: listed as they are
            return 0

    # A copy of the whole store ------------------------------------------------------------------
    def import_source(self, record: SourceRecord) -> None:
        self.database.upsert("sources", {
            "name": record.name, "type": record.type,
            "config": json.dumps(record.config, sort_keys=True, default=str),
            "state": json.dumps(record.state, default=str), "created_at": record.created_at,
            "updated_at": record.updated_at, "healthy_documents": record.healthy_documents},
            pk="name")

    def export_runs(self) -> Iterator[dict[str, Any]]:
        self.settle_dead_runs()
        for row in self._conn().execute("SELECT * FROM ingest_runs ORDER BY id").fetchall():
            run = dict(row)
            run["errors"] = [dict(e) for e in self._conn().execute(
                "SELECT external_id, error, at FROM ingest_errors WHERE run_id = ? ORDER BY id",
                [run["id"]])]
            yield run

    def import_runs(self, runs: list[dict[str, Any]]) -> int:
        new = 0
        with self.database.transaction():
            conn = self._conn()
            columns = list(RUN_FIELDS)
            for run in runs:
                added = conn.execute(
                    f"INSERT INTO ingest_runs ({names(columns)}) VALUES ({marks(columns)}) "
                    "ON CONFLICT(id) DO NOTHING", [run[c] for c in columns]).rowcount
                if not added:
                    continue
                new += 1
                conn.executemany(
                    "INSERT INTO ingest_errors (run_id, source, external_id, error, at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [(run["id"], run["source"], e["external_id"], e["error"], e["at"])
                     for e in run.get("errors", [])])
        return new

    def _final_word_path(self) -> Path:
        # On the disk of the database itself, wherever a link puts it.
        real = Path(os.path.realpath(self.database.path))
        return real.with_name(real.name + ".reserve")

    def keep_room_for_final_word(self) -> None:
        path = self._final_word_path()
        try:
            if path.stat().st_size >= FINAL_WORD_BYTES:
                return
        except FileNotFoundError:
            pass
        try:
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                # Random bytes: a compressing filesystem would keep zeros in no room at all.
                f.write(os.urandom(FINAL_WORD_BYTES))
                f.flush()
                os.fsync(f.fileno())
        except OSError:  # a disk already too full for it: the run goes on without
            path.unlink(missing_ok=True)

    def free_room_for_final_word(self) -> bool:
        try:
            self._final_word_path().unlink()
            return True
        except FileNotFoundError:
            return False


def _source(row: sqlite3.Row) -> SourceRecord:
    return SourceRecord(name=row["name"], type=row["type"], config=json.loads(row["config"]),
                        state=json.loads(row["state"]), created_at=row["created_at"],
                        updated_at=row["updated_at"], healthy_documents=row["healthy_documents"])
