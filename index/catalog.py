"""The SQLite catalog (through sqlite-utils): sources, documents, chunks and ingest runs.

The catalog is the source of truth for what is indexed. The vector index holds copies of chunk
text and metadata for fast filtering, but which *version* of a document is live is decided here:
retrieval drops hits whose version is not the catalog's current one, which is what makes the
swap from old to new chunks atomic for readers (see ``ingest.pipeline``).

The schema is versioned with ``PRAGMA user_version`` and migrated forward on open.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from citewise.errors import (
    BackendError,
    CatalogDamagedError,
    CitewiseError,
    ConfigError,
    catalog_damage,
    write_failure,
)
from citewise.index.outline import Outline
from citewise.private_files import private_file
from citewise.types import Chunk

CHUNK_NAMESPACE = uuid.UUID("5b0c1f3e-8a0e-4d8e-9a51-3c7f0f2e9d11")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _names(columns: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def _marks(columns: list[str]) -> str:
    return ", ".join("?" * len(columns))


def document_id(source: str, external_id: str) -> str:
    """Stable id of a document: the same source and external id always give the same id."""
    return hashlib.sha256(f"{source}\0{external_id}".encode()).hexdigest()[:20]


def chunk_point_id(doc_id: str, version: str, ordinal: int) -> str:
    """Deterministic point id: re-ingesting the same version overwrites, never duplicates."""
    return str(uuid.uuid5(CHUNK_NAMESPACE, f"{doc_id}:{version}:{ordinal}"))


# Each migration moves the schema from version i to i+1. Never edit one that has shipped;
# append a new one.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE sources (
        name TEXT PRIMARY KEY,
        type TEXT NOT NULL,
        config TEXT NOT NULL DEFAULT '{}',
        state TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE documents (
        id TEXT PRIMARY KEY,
        source TEXT NOT NULL REFERENCES sources(name),
        external_id TEXT NOT NULL,
        path TEXT,
        url TEXT,
        title TEXT NOT NULL,
        media_type TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        version TEXT NOT NULL,
        index_signature TEXT NOT NULL,
        readers TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        service TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        blob_key TEXT NOT NULL,
        chunk_count INTEGER NOT NULL DEFAULT 0,
        size_bytes INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT,
        indexed_at TEXT NOT NULL,
        UNIQUE (source, external_id)
    );
    CREATE INDEX documents_blob_key ON documents(blob_key);
    CREATE TABLE chunks (
        id TEXT PRIMARY KEY,
        document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL,
        heading TEXT NOT NULL,
        anchor TEXT,
        text TEXT NOT NULL,
        start_line INTEGER,
        end_line INTEGER,
        token_count INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX chunks_document ON chunks(document_id, ordinal);
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
    """,
    # 2: code chunks name their symbol; documents keep their per-chunk link template.
    """
    ALTER TABLE chunks ADD COLUMN symbol TEXT;
    ALTER TABLE documents ADD COLUMN link_template TEXT;
    """,
    # 3: the write-ahead record of document swaps (crash recovery), and each source's healthy
    # size for the mass-deletion brake.
    """
    CREATE TABLE pending_writes (
        document_id TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        kind TEXT NOT NULL,
        phase TEXT NOT NULL,
        new_version TEXT,
        new_points INTEGER NOT NULL DEFAULT 0,
        old_version TEXT,
        old_points INTEGER NOT NULL DEFAULT 0,
        blob_key TEXT,
        old_blob_key TEXT,
        started_at TEXT NOT NULL
    );
    CREATE INDEX pending_writes_source ON pending_writes(source);
    ALTER TABLE sources ADD COLUMN healthy_documents INTEGER;
    """,
    # 4: the outline of each prose document's live version (sections and blocks, for answers).
    """
    CREATE TABLE outlines (
        document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
        outline TEXT NOT NULL
    );
    """,
    # 5: the front door (api/identity, api/metering): API keys (only a hash of the secret),
    # token buckets that survive a restart, usage per request then per hour, and the audit log,
    # which triggers keep append-only.
    """
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        scopes TEXT NOT NULL,
        principal TEXT,
        assert_identity INTEGER NOT NULL DEFAULT 0,
        limits TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL,
        created_by TEXT,
        expires_at TEXT,
        revoked_at TEXT,
        last_used_at TEXT
    );
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
    """,
    # 6: facts about the index as a whole (the embedding model its vectors come from)
    """
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
    # 7: conversations (api/conversations.py): their turns, every answer given (for feedback),
    # and the feedback.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        turns INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX conversations_owner ON conversations(owner, updated_at);
    CREATE TABLE answers (
        id TEXT PRIMARY KEY,
        conversation_id TEXT,
        turn INTEGER,
        owner TEXT NOT NULL,
        question TEXT NOT NULL,
        standalone TEXT NOT NULL,
        answer TEXT NOT NULL,
        documents TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX answers_conversation ON answers(conversation_id, turn);
    CREATE TABLE feedback (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        answer_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        helpful INTEGER NOT NULL,
        comment TEXT,
        wrong_citation INTEGER,
        created_at TEXT NOT NULL
    );
    CREATE INDEX feedback_at ON feedback(created_at);
    """,
    # 8: usage counts answers served from the semantic cache and the model tokens they saved.
    """
    ALTER TABLE usage ADD COLUMN cache_hits INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage ADD COLUMN saved_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage_hourly ADD COLUMN cache_hits INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE usage_hourly ADD COLUMN saved_tokens INTEGER NOT NULL DEFAULT 0;
    """,
    # 9: how many lines of a document's stored bytes precede the text that was chunked (front
    # matter), so that `citewise reindex` can chunk it again from the blob alone.
    """
    ALTER TABLE documents ADD COLUMN body_line_offset INTEGER;
    """,
    # 10: which process runs an ingest run, so that a run whose process died before recording
    # its end (kill -9, a second Ctrl-C during its last writes) is seen as interrupted at once.
    """
    ALTER TABLE ingest_runs ADD COLUMN host TEXT;
    ALTER TABLE ingest_runs ADD COLUMN pid INTEGER;
    """,
    # 11: a key the operator made one of a person's doors shares that person's conversations
    # (api/conversations.py: otherwise a key's conversations are its own).
    """
    ALTER TABLE api_keys ADD COLUMN shares_conversations INTEGER NOT NULL DEFAULT 0;
    """,
    # 12: the chunks ingest found aimed at a model get a column of their own; they were kept in
    # the connector's metadata (and so in every point's payload), and are moved out of it.
    """
    ALTER TABLE documents ADD COLUMN injection_chunks TEXT NOT NULL DEFAULT '[]';
    UPDATE documents SET injection_chunks = json_extract(metadata, '$.injection_chunks'),
        metadata = json_remove(metadata, '$.injection_chunks')
        WHERE json_type(metadata, '$.injection_chunks') = 'array';
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


@dataclass
class DocumentRecord:
    """A row of ``documents`` with its JSON columns decoded."""

    id: str
    source: str
    external_id: str
    title: str
    media_type: str
    content_hash: str
    version: str
    index_signature: str
    readers: list[str]
    blob_key: str
    indexed_at: str
    path: str | None = None
    url: str | None = None
    tags: list[str] = field(default_factory=list)
    service: str | None = None
    metadata: dict = field(default_factory=dict)
    chunk_count: int = 0
    size_bytes: int = 0
    updated_at: str | None = None
    link_template: str | None = None
    body_line_offset: int | None = None  # None: written before it was recorded
    # The ordinals of the chunks whose text is aimed at a model rather than a reader
    # (``index/injection.py``), found at ingest: the record of what the injection guardrail
    # acts on (answers score their passages themselves). Not the connector's ``metadata``.
    injection_chunks: list[int] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: dict) -> DocumentRecord:
        row = dict(row)
        for key in _JSON_COLUMNS:
            row[key] = json.loads(row[key]) if row.get(key) else ({} if key == "metadata" else [])
        return cls(**row)

    def to_row(self) -> dict:
        row = asdict(self)
        for key in _JSON_COLUMNS:
            row[key] = json.dumps(row[key], sort_keys=True, default=str)
        return row


# The columns of ``documents`` that hold JSON.
_JSON_COLUMNS = ("readers", "tags", "metadata", "injection_chunks")


@dataclass
class PendingWrite:
    """A document swap in progress: what the catalog promises to finish or undo after a crash.

    ``kind`` is ``write`` (a new version replaces ``old_version``, if any) or ``delete``.
    ``phase`` is ``started`` (the catalog still shows the old state) or ``committed`` (the
    catalog shows the new state; what is left is cleaning the index and the blob store).
    """

    document_id: str
    source: str
    kind: str
    phase: str = "started"
    new_version: str | None = None
    new_points: int = 0
    old_version: str | None = None
    old_points: int = 0
    blob_key: str | None = None
    old_blob_key: str | None = None
    started_at: str = ""

    def stale_point_ids(self) -> list[str]:
        """Points that must not be served while this swap is open: the new version's until the
        catalog commits it, the old version's after."""
        if self.kind != "write":
            return []
        if self.phase == "started" and self.new_version:
            return [chunk_point_id(self.document_id, self.new_version, i)
                    for i in range(self.new_points)]
        if self.phase == "committed" and self.old_version and self.old_version != self.new_version:
            return [chunk_point_id(self.document_id, self.old_version, i)
                    for i in range(self.old_points)]
        return []


@dataclass
class RunCounts:
    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0


# Room kept on the catalog's disk for the last word of an ingest run. A run stopped by a full
# disk still has to record how it ended (failed, its counts, why), and every SQLite write needs
# new pages in the write-ahead log; on a disk with no room at all, that last write failed too
# and the run was listed as `interrupted`, without its message. So a small file is kept beside
# the catalog, deleted to make that room, and made again by the next run that has room for it.
FINAL_WORD_BYTES = 64 * 1024


class Catalog:
    """Thread-safe access to the catalog database: one SQLite connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Key hashes, the audit log, restricted chunk texts: 0600 before SQLite opens it
        # (its -wal and -shm files take the database file's mode).
        private_file(self.path)
        self._local = threading.local()
        try:
            self.migrate()
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

    # Connections ---------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
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

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, for the stores that keep their own tables in the catalog
        database (API keys, usage, audit: ``api/identity``, ``api/metering``) so that one file
        holds, backs up and restores all of the service's state."""
        return self._conn()

    @property
    def db(self) -> sqlite_utils.Database:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite_utils.Database(self._conn())
            self._local.db = db
        return db

    def _upsert(self, table: str, row: dict, pk: str) -> None:
        """Insert ``row`` or update the columns it names: sqlite-utils' ``upsert`` without the
        schema lookups it makes on every call (180 µs against 30 µs per pending-write row,
        measured on an idle machine), for the writes made once per document of a run. The
        tables' columns are fixed by the migrations above."""
        columns = list(row)
        updates = ", ".join(f'"{c}" = excluded."{c}"' for c in columns if c != pk)
        self._conn().execute(
            f'INSERT INTO "{table}" ({_names(columns)}) VALUES ({_marks(columns)}) '
            f'ON CONFLICT("{pk}") DO UPDATE SET {updates}', [row[c] for c in columns])

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            self._local.db = None

    def transaction(self):
        """``with catalog.transaction():`` groups writes atomically (BEGIN IMMEDIATE)."""
        return _Transaction(self._conn())

    # Schema --------------------------------------------------------------------------------
    def schema_version(self) -> int:
        return self._conn().execute("PRAGMA user_version").fetchone()[0]

    def migrate(self) -> None:
        conn = self._conn()
        current = self.schema_version()
        if current > SCHEMA_VERSION:
            raise ConfigError(
                f"catalog {self.path} has schema version {current}, newer than this citewise "
                f"({SCHEMA_VERSION})",
                hint="upgrade citewise, or point CITEWISE_DATA_DIR at another folder",
            )
        for version in range(current, SCHEMA_VERSION):
            with self.transaction():
                for statement in _statements(MIGRATIONS[version]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1}")

    # Sources -------------------------------------------------------------------------------
    def ensure_source(self, name: str, type: str, config: dict[str, Any]) -> None:
        existing = self.get_source(name)
        if existing is None:
            self.db["sources"].insert(
                {
                    "name": name,
                    "type": type,
                    "config": json.dumps(config, sort_keys=True, default=str),
                    "state": "{}",
                    "created_at": now(),
                    "updated_at": now(),
                }
            )
        else:
            self.db["sources"].update(
                name,
                {
                    "type": type,
                    "config": json.dumps(config, sort_keys=True, default=str),
                    "updated_at": now(),
                },
            )

    def get_source(self, name: str) -> dict | None:
        rows = list(self.db["sources"].rows_where("name = ?", [name]))
        if not rows:
            return None
        row = dict(rows[0])
        row["config"] = json.loads(row["config"])
        row["state"] = json.loads(row["state"])
        return row

    def list_sources(self, principals: list[str] | None = None) -> list[dict]:
        """Sources with their document and chunk counts.

        With ``principals``, only documents readable by one of them are counted: how many
        restricted documents a source holds is itself something not everyone should learn.
        """
        readable = "1"
        args: list[str] = []
        if principals is not None:
            marks = ",".join("?" * len(principals)) or "NULL"
            readable = f"EXISTS (SELECT 1 FROM json_each(d.readers) WHERE value IN ({marks}))"
            args = list(principals)
        sql = f"""
            SELECT s.name, s.type, s.created_at, s.updated_at,
                   COUNT(d.id) AS documents, COALESCE(SUM(d.chunk_count), 0) AS chunks,
                   (SELECT MAX(finished_at) FROM ingest_runs r
                     WHERE r.source = s.name AND r.status = 'succeeded') AS last_success_at,
                   (SELECT MAX(finished_at) FROM ingest_runs r
                     WHERE r.source = s.name AND r.status IN ('succeeded', 'partial'))
                     AS last_completed_at
            FROM sources s LEFT JOIN documents d ON d.source = s.name AND {readable}
            GROUP BY s.name ORDER BY s.name
        """
        return [dict(r) for r in self._conn().execute(sql, args)]

    def list_facets(self, principals: list[str] | None = None,
                    limit: int = 50) -> dict[str, dict[str, list[str]]]:
        """Per source, the tags and runbook services of the documents ``principals`` may read,
        most common first (at most ``limit`` of each): what a search page offers as filters.
        Like the counts, only readable documents contribute, so a restricted document's tags
        do not reveal it."""
        readable, args = "1", []
        if principals is not None:
            marks = ",".join("?" * len(principals)) or "NULL"
            readable = f"EXISTS (SELECT 1 FROM json_each(d.readers) WHERE value IN ({marks}))"
            args = list(principals)
        sql = f"""
            SELECT d.source, 'tags' AS kind, t.value AS value, COUNT(*) AS n
              FROM documents d, json_each(d.tags) t WHERE {readable} GROUP BY 1, 3
            UNION ALL
            SELECT d.source, 'services', d.service, COUNT(*)
              FROM documents d WHERE d.service IS NOT NULL AND d.service != '' AND {readable}
              GROUP BY 1, 3
            ORDER BY 1, 2, 4 DESC, 3
        """
        out: dict[str, dict[str, list[str]]] = {}
        for source, kind, value, _ in self._conn().execute(sql, args + args):
            values = out.setdefault(source, {"tags": [], "services": []})[kind]
            if len(values) < limit:
                values.append(value)
        return out

    def healthy_documents(self, name: str) -> int | None:
        row = self._conn().execute(
            "SELECT healthy_documents FROM sources WHERE name = ?", [name]).fetchone()
        return row[0] if row else None

    def set_healthy_documents(self, name: str, count: int) -> None:
        self._conn().execute("UPDATE sources SET healthy_documents = ? WHERE name = ?",
                             [count, name])

    def set_source_state(self, name: str, state: dict) -> None:
        self.db["sources"].update(name, {"state": json.dumps(state, default=str)})

    # Documents -----------------------------------------------------------------------------
    def get_document(self, doc_id: str) -> DocumentRecord | None:
        rows = list(self.db["documents"].rows_where("id = ?", [doc_id]))
        return DocumentRecord.from_row(rows[0]) if rows else None

    def documents_of_source(self, source: str) -> dict[str, DocumentRecord]:
        """The source's documents keyed by external id."""
        return {
            row["external_id"]: DocumentRecord.from_row(row)
            for row in self.db["documents"].rows_where("source = ?", [source])
        }

    def meta(self, key: str) -> str | None:
        row = self.connection().execute("SELECT value FROM meta WHERE key = ?",
                                        (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self.connection().execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def count_documents(self, source: str | None = None, *, with_content: bool = False) -> int:
        """Documents (of one source); ``with_content`` leaves out those with no chunks."""
        where, args = [], []
        if source is not None:
            where.append("source = ?")
            args.append(source)
        if with_content:
            where.append("chunk_count > 0")
        if not where:
            return self.db["documents"].count
        return self.db["documents"].count_where(" AND ".join(where), args)

    def _where_in(self, sql: str, ids: Iterable[str]) -> Iterator[sqlite3.Row]:
        """Rows of ``sql`` (with ``{marks}`` for the placeholders) for these ids, asked 500 at
        a time: SQLite caps the number of parameters of one statement."""
        unique = list(set(ids))
        for i in range(0, len(unique), 500):
            part = unique[i : i + 500]
            yield from self._conn().execute(sql.format(marks=",".join("?" * len(part))), part)

    def current_versions(self, doc_ids: Iterable[str]) -> dict[str, str]:
        return {row["id"]: row["version"] for row in self._where_in(
            "SELECT id, version FROM documents WHERE id IN ({marks})", doc_ids)}

    def save_document(self, record: DocumentRecord, chunks: list[Chunk], ids: list[str],
                      outline: Outline | None = None) -> None:
        """Make ``record`` (its chunks and outline) the live version of the document, atomically."""
        with self.transaction():
            conn = self._conn()
            conn.execute("DELETE FROM chunks WHERE document_id = ?", [record.id])
            conn.execute("DELETE FROM outlines WHERE document_id = ?", [record.id])
            self._upsert("documents", record.to_row(), pk="id")
            if outline is not None:
                conn.execute("INSERT INTO outlines (document_id, outline) VALUES (?, ?)",
                             [record.id, outline.to_json()])
            rows = [{"id": pid, "document_id": record.id, "token_count": c.token_count,
                     **c.location()} for c, pid in zip(chunks, ids, strict=True)]
            if rows:
                columns = list(rows[0])
                conn.executemany(
                    f"INSERT INTO chunks ({_names(columns)}) VALUES ({_marks(columns)})",
                    [[row[c] for c in columns] for row in rows])

    def update_document_fields(self, doc_id: str, **fields: Any) -> None:
        for key in _JSON_COLUMNS:
            if key in fields:
                fields[key] = json.dumps(fields[key], sort_keys=True, default=str)
        self.db["documents"].update(doc_id, fields)

    def outlines(self, doc_ids: Iterable[str]) -> dict[str, Outline]:
        """The outlines of these documents' live versions (prose documents have one)."""
        return {doc_id: Outline.from_json(text) for doc_id, text in self._where_in(
            "SELECT document_id, outline FROM outlines WHERE document_id IN ({marks})", doc_ids)}

    def delete_document(self, doc_id: str) -> None:
        with self.transaction():
            self._conn().execute("DELETE FROM outlines WHERE document_id = ?", [doc_id])
            self._conn().execute("DELETE FROM chunks WHERE document_id = ?", [doc_id])
            self._conn().execute("DELETE FROM documents WHERE id = ?", [doc_id])

    def signature_counts(self) -> list[tuple[str, str, int]]:
        """``(media type, index signature, documents)``: what the documents were indexed with."""
        return [(r[0], r[1], r[2]) for r in self._conn().execute(
            "SELECT media_type, index_signature, COUNT(*) FROM documents GROUP BY 1, 2")]

    def switch_generation(self, staged: Path, meta: dict[str, str]) -> None:
        """Make the documents, chunks and outlines of the catalog ``staged`` (built beside this
        one by ``citewise reindex``) the live ones, and write ``meta`` (the pointer to the new
        vector index), in one transaction: every reader sees the old rows and pointer or the
        new ones. The two catalogs must hold the same documents (the caller holds the run
        lock while it builds, so none can change)."""
        conn = self._conn()
        conn.execute("ATTACH DATABASE ? AS staged", [str(staged)])
        try:
            with self.transaction():
                ours = dict(conn.execute("SELECT id, content_hash FROM main.documents"))
                theirs = dict(conn.execute("SELECT id, content_hash FROM staged.documents"))
                if ours != theirs:
                    raise BackendError(
                        f"the rebuilt catalog {staged} holds other documents than the live one "
                        f"({len(theirs)} and {len(ours)}); nothing was switched",
                        hint="run `citewise reindex` again")
                for table in ("outlines", "chunks"):
                    conn.execute(f"DELETE FROM main.{table}")
                columns = [r[1] for r in conn.execute("PRAGMA main.table_info(documents)")]
                names = ", ".join(columns)
                updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "id")
                conn.execute(f"INSERT INTO main.documents ({names}) SELECT {names} "
                             f"FROM staged.documents WHERE true "
                             f"ON CONFLICT(id) DO UPDATE SET {updates}")
                for table in ("chunks", "outlines"):
                    names = ", ".join(r[1] for r in conn.execute(
                        f"PRAGMA main.table_info({table})"))
                    conn.execute(f"INSERT INTO main.{table} ({names}) "
                                 f"SELECT {names} FROM staged.{table}")
                for key, value in meta.items():
                    conn.execute("INSERT INTO main.meta (key, value) VALUES (?, ?) ON CONFLICT"
                                 "(key) DO UPDATE SET value = excluded.value", (key, value))
        finally:
            conn.execute("DETACH DATABASE staged")

    def delete_meta(self, *keys: str) -> None:
        for key in keys:
            self.connection().execute("DELETE FROM meta WHERE key = ?", (key,))

    # Pending swaps (crash recovery) -------------------------------------------------------
    def begin_pending(self, pending: PendingWrite) -> None:
        row = asdict(pending)
        row["started_at"] = row["started_at"] or now()
        self._upsert("pending_writes", row, pk="document_id")

    def commit_write(self, pending: PendingWrite, record: DocumentRecord, chunks: list[Chunk],
                     ids: list[str], outline: Outline | None = None) -> None:
        """Make ``record`` live and mark the swap committed, in one transaction."""
        with self.transaction():
            self.save_document(record, chunks, ids, outline)
            self._conn().execute(
                "UPDATE pending_writes SET phase = 'committed' WHERE document_id = ?",
                [pending.document_id],
            )
            self._count_commit()
        pending.phase = "committed"

    def commit_delete(self, pending: PendingWrite) -> None:
        """Remove the document's row and chunks and mark the swap committed, in one
        transaction."""
        with self.transaction():
            self.delete_document(pending.document_id)
            self._conn().execute(
                "UPDATE pending_writes SET phase = 'committed' WHERE document_id = ?",
                [pending.document_id],
            )
            self._count_commit()
        pending.phase = "committed"

    def _count_commit(self) -> None:
        self._conn().execute(
            "INSERT INTO meta (key, value) VALUES ('swaps_committed', '1') ON CONFLICT(key) "
            "DO UPDATE SET value = CAST(value AS INTEGER) + 1")

    def swaps_committed(self) -> str:
        """A mark that changes whenever a document's version is switched or removed: a search
        that sees it change while it ran may have missed that document (``SearchService``)."""
        row = self._conn().execute(
            "SELECT value FROM meta WHERE key = 'swaps_committed'").fetchone()
        return str(row[0]) if row else "0"

    def end_pending(self, document_id: str) -> None:
        self._conn().execute("DELETE FROM pending_writes WHERE document_id = ?", [document_id])

    def pending_writes(self, source: str | None = None) -> list[PendingWrite]:
        where, args = ("source = ?", [source]) if source else (None, [])
        return [PendingWrite(**row) for row in self.db["pending_writes"].rows_where(where, args)]

    def stale_point_ids(self) -> list[str]:
        """Points no search may return now: those of every open swap (see ``PendingWrite``)."""
        return [pid for p in self.pending_writes() for pid in p.stale_point_ids()]

    # Consistency -----------------------------------------------------------------------------
    def sample_chunk_ids(self, n: int) -> list[str]:
        return [r[0] for r in self._conn().execute(
            "SELECT id FROM chunks ORDER BY RANDOM() LIMIT ?", [n])]

    def live_points(self) -> dict[str, tuple[str, set[str]]]:
        """Every document's live version and its chunk (point) ids."""
        out: dict[str, tuple[str, set[str]]] = {}
        for doc_id, version in self._conn().execute("SELECT id, version FROM documents"):
            out[doc_id] = (version, set())
        for chunk_id, doc_id in self._conn().execute("SELECT id, document_id FROM chunks"):
            if doc_id in out:
                out[doc_id][1].add(chunk_id)
        return out

    def titles_hidden_from(self, principals: list[str]) -> list[str]:
        """Titles of the documents none of ``principals`` may read."""
        marks = ",".join("?" * len(principals)) or "NULL"
        sql = ("SELECT DISTINCT title FROM documents d WHERE NOT EXISTS "
               f"(SELECT 1 FROM json_each(d.readers) WHERE value IN ({marks}))")
        return [r[0] for r in self._conn().execute(sql, list(principals))]

    def readable_documents(self, doc_ids: Iterable[str], principals: list[str]) -> set[str]:
        """Which of ``doc_ids`` exist and one of ``principals`` may read, as of now (a stored
        answer is shown only if every document it cites passes this)."""
        wanted = sorted(set(doc_ids))
        if not wanted:
            return set()
        principals = list(principals) or ["\0"]
        marks = ",".join("?" * len(principals))
        out: set[str] = set()
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            sql = (f"SELECT id FROM documents d WHERE id IN ({','.join('?' * len(part))}) "
                   "AND EXISTS (SELECT 1 FROM json_each(d.readers) WHERE value IN "
                   f"({marks}))")
            out.update(r[0] for r in self._conn().execute(sql, [*part, *principals]))
        return out

    def path_mentions(self, word: str, principals: list[str]) -> bool:
        """Whether the path of a document one of ``principals`` may read contains ``word``
        (case-insensitive): an alert whose runbook is named after it but never says it."""
        marks = ",".join("?" * len(principals)) or "NULL"
        sql = ("SELECT 1 FROM documents d WHERE instr(lower(d.path), ?) > 0 AND EXISTS "
               f"(SELECT 1 FROM json_each(d.readers) WHERE value IN ({marks})) LIMIT 1")
        return self._conn().execute(sql, [word.lower(), *principals]).fetchone() is not None

    def blob_owners(self) -> dict[str, str]:
        """Each blob key in use, with one document that uses it."""
        return {r[0]: r[1] for r in self._conn().execute(
            "SELECT blob_key, MIN(id) FROM documents GROUP BY blob_key")}

    def documents_with_blob(self, blob_key: str) -> list[DocumentRecord]:
        return [DocumentRecord.from_row(row)
                for row in self.db["documents"].rows_where("blob_key = ?", [blob_key])]

    def documents_with_signature(self, index_signature: str) -> set[str]:
        """Ids of the documents indexed under ``index_signature`` (a repair's marks)."""
        return {r[0] for r in self._conn().execute(
            "SELECT id FROM documents WHERE index_signature = ?", [index_signature])}

    def blob_in_use(self, blob_key: str) -> bool:
        return self.db["documents"].count_where("blob_key = ?", [blob_key]) > 0

    def chunks_of(self, doc_id: str) -> list[dict]:
        return [
            dict(r)
            for r in self.db["chunks"].rows_where(
                "document_id = ?", [doc_id], order_by="ordinal"
            )
        ]

    def chunks(self, doc_id: str) -> list[Chunk]:
        """The live version's chunks, as they were written."""
        return [
            Chunk(document_id=doc_id, ordinal=r["ordinal"], text=r["text"], heading=r["heading"],
                  anchor=r.get("anchor"), start_line=r.get("start_line"),
                  end_line=r.get("end_line"), token_count=r.get("token_count") or 0,
                  symbol=r.get("symbol"))
            for r in self.chunks_of(doc_id)
        ]

    def count_chunks(self) -> int:
        return self.db["chunks"].count

    # Runs ----------------------------------------------------------------------------------
    def start_run(self, source: str, trigger: str) -> int:
        # A run still marked running for this source died with its process (crash, kill):
        # say so instead of leaving it running forever.
        self._conn().execute(
            "UPDATE ingest_runs SET status = 'interrupted', finished_at = ? "
            "WHERE source = ? AND status = 'running'",
            [now(), source],
        )
        return self.db["ingest_runs"].insert(
            {"source": source, "trigger": trigger, "status": "running", "started_at": now(),
             "host": socket.gethostname(), "pid": os.getpid()}
        ).last_pk

    def settle_dead_runs(self) -> int:
        """Mark ``interrupted`` the runs still ``running`` whose process, on this machine, is
        gone: killed, or stopped by a second Ctrl-C while it wrote its last batches. Otherwise
        such a row would say ``running`` (to ``/v1/ingest/runs``, to the alerts on the last
        run's status) until the source's next run. How many were settled."""
        host = socket.gethostname()
        try:
            rows = self._conn().execute(
                "SELECT id, pid FROM ingest_runs WHERE status = 'running' AND host = ? "
                "AND pid IS NOT NULL", [host]).fetchall()
            dead = [(run_id, pid) for run_id, pid in rows if not _process_alive(pid)]
            for run_id, pid in dead:
                self._conn().execute(
                    "UPDATE ingest_runs SET status = 'interrupted', finished_at = ?, "
                    "message = COALESCE(message, ?) WHERE id = ? AND status = 'running'",
                    [now(), f"its process (pid {pid}) ended before recording the end of the "
                            "run; what it wrote is kept and the next run resumes", run_id])
            return len(dead)
        except sqlite3.Error:  # a read-only or busy catalog: listed as they are
            return 0

    def _final_word_path(self) -> Path:
        # On the disk of the catalog itself, wherever a link puts it.
        real = Path(os.path.realpath(self.path))
        return real.with_name(real.name + ".reserve")

    def keep_room_for_final_word(self) -> None:
        """Make sure the room for a run's last write is kept (``FINAL_WORD_BYTES``)."""
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
        """Give the kept room back to the disk; False when there was none."""
        try:
            self._final_word_path().unlink()
            return True
        except FileNotFoundError:
            return False

    def update_run(self, run_id: int, counts: RunCounts) -> None:
        self.db["ingest_runs"].update(run_id, asdict(counts))

    def finish_run(
        self, run_id: int, counts: RunCounts, status: str, message: str | None = None
    ) -> None:
        self.db["ingest_runs"].update(
            run_id, {**asdict(counts), "status": status, "finished_at": now(), "message": message}
        )

    def record_error(self, run_id: int, source: str, external_id: str | None, error: str) -> None:
        self.db["ingest_errors"].insert(
            {
                "run_id": run_id,
                "source": source,
                "external_id": external_id,
                "error": error,
                "at": now(),
            }
        )

    def get_run(self, run_id: int) -> dict | None:
        self.settle_dead_runs()
        rows = list(self.db["ingest_runs"].rows_where("id = ?", [run_id]))
        if not rows:
            return None
        run = dict(rows[0])
        run["errors"] = [
            {"external_id": e["external_id"], "error": e["error"]}
            for e in self.db["ingest_errors"].rows_where("run_id = ?", [run_id], order_by="id")
        ]
        return run

    def list_runs(self, source: str | None = None, limit: int = 20) -> list[dict]:
        self.settle_dead_runs()
        where, args = ("source = ?", [source]) if source else (None, [])
        return [
            dict(r)
            for r in self.db["ingest_runs"].rows_where(
                where, args, order_by="id desc", limit=limit
            )
        ]


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one of another account's too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _statements(script: str) -> list[str]:
    """The script's statements; a trigger's body (``BEGIN ...; END``) stays whole."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending.strip().rstrip(";"))
            pending = ""
    return out


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT/ROLLBACK on an autocommit connection; nests as a no-op."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.outer = False

    def __enter__(self):
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
            self.outer = True
        return self.conn

    def __exit__(self, exc_type, exc, tb):
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
    """Every statement of the catalog (sqlite-utils' too) goes through ``execute``: a full
    disk is turned here into the error that stops an ingest run and says what to do."""

    path: Path

    def execute(self, *args):
        try:
            return super().execute(*args)
        except sqlite3.Error as e:
            failure = self.failure(e)
            if failure is None:
                raise
            raise failure from e

    def executemany(self, *args):
        try:
            return super().executemany(*args)
        except sqlite3.Error as e:
            failure = self.failure(e)
            if failure is None:
                raise
            raise failure from e

    def cursor(self, factory=None):
        # ``execute`` makes its cursor here: rows read later (a scan of every chunk) meet a
        # damaged page too, and must say so the same way.
        return super().cursor(factory or _Cursor)

    def failure(self, e: sqlite3.Error) -> CitewiseError | None:
        """A damaged file is said the same way wherever it is first noticed (opening, a query
        of verify or serve, a row read), never as a traceback; a full disk stops a run."""
        return catalog_damage(e, self.path) or write_failure(e, "the catalog", self.path)


class _Cursor(sqlite3.Cursor):
    def _read(self, read):
        try:
            return read()
        except sqlite3.Error as e:
            failure = self.connection.failure(e)
            if failure is None:
                raise
            raise failure from e

    def __next__(self):
        return self._read(super().__next__)

    def fetchone(self):
        return self._read(super().fetchone)

    def fetchall(self):
        return list(self)
