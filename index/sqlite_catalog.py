"""The document catalog (``index/catalog.py``) in the embedded SQLite database.

Its tables: ``documents``, ``chunks``, ``outlines``, ``pending_writes`` and ``meta``. Readers are
a JSON array per document, matched with ``json_each``; the generation switch ATTACHes the staged
catalog's file and copies its rows in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from citewise.errors import BackendError
from citewise.index.catalog import (
    JSON_COLUMNS,
    SWAPS_COMMITTED,
    ChunkRow,
    DocumentCatalog,
    DocumentRecord,
    PendingWrite,
    now,
)
from citewise.index.generations import BUILDING, LIVE
from citewise.index.outline import Outline
from citewise.sqlite import SqliteStore, marks, names
from citewise.sqlite_schema import Migration, StoreSchema, file_versions
from citewise.types import Chunk

# ``shipped_as``: the catalog's PRAGMA user_version that first held the change, before the
# stores split (``citewise.sqlite_schema``).
SCHEMA = StoreSchema("documents", (
    Migration("""
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
    """, shipped_as=1),
    # Code chunks name their symbol; documents keep their per-chunk link template.
    Migration("""
    ALTER TABLE chunks ADD COLUMN symbol TEXT;
    ALTER TABLE documents ADD COLUMN link_template TEXT;
    """, shipped_as=2),
    # The write-ahead record of document swaps (crash recovery).
    Migration("""
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
    """, shipped_as=3),
    # The outline of each prose document's live version (sections and blocks, for answers).
    Migration("""
    CREATE TABLE outlines (
        document_id TEXT PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
        outline TEXT NOT NULL
    );
    """, shipped_as=4),
    # Facts about the index as a whole (the embedding model its vectors come from).
    Migration("""
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """, shipped_as=6),
    # How many lines of a document's stored bytes precede the text that was chunked (front
    # matter), so that `citewise reindex` can chunk it again from the blob alone.
    Migration("""
    ALTER TABLE documents ADD COLUMN body_line_offset INTEGER;
    """, shipped_as=9),
    # The chunks ingest found aimed at a model get a column of their own; they were kept in
    # the connector's metadata (and so in every point's payload), and are moved out of it.
    Migration("""
    ALTER TABLE documents ADD COLUMN injection_chunks TEXT NOT NULL DEFAULT '[]';
    UPDATE documents SET injection_chunks = json_extract(metadata, '$.injection_chunks'),
        metadata = json_remove(metadata, '$.injection_chunks')
        WHERE json_type(metadata, '$.injection_chunks') = 'array';
    """, shipped_as=12),
    # Whether a code chunk continues a definition split into parts (``Chunk.continues_symbol``):
    # kept here so that points rebuilt from the catalog (verify --repair, reindex) say it too.
    # NULL for chunks written before: readers then look at the chunk's first line.
    Migration("""
    ALTER TABLE chunks ADD COLUMN continues_symbol INTEGER;
    """),
))

def _flag(value: int | None) -> bool | None:
    """A nullable SQLite boolean (0, 1 or NULL) as Python's."""
    return None if value is None else bool(value)


# A document counts for a caller when one of its readers is among the caller's principals.
_READABLE = "EXISTS (SELECT 1 FROM json_each(d.readers) WHERE value IN ({marks}))"


def _readable(principals: list[str] | None) -> tuple[str, list[str]]:
    """The SQL condition on ``documents d`` for ``principals`` (None: every document)."""
    if principals is None:
        return "1", []
    return _READABLE.format(marks=",".join("?" * len(principals)) or "NULL"), list(principals)


class SqliteDocumentCatalog(SqliteStore):
    """``DocumentCatalog`` over the tables above, in ``database``."""

    schema = SCHEMA

    # Documents -------------------------------------------------------------------------------
    def get_document(self, doc_id: str) -> DocumentRecord | None:
        row = self._conn().execute("SELECT * FROM documents WHERE id = ?", [doc_id]).fetchone()
        return DocumentRecord.from_row(dict(row)) if row is not None else None

    def documents_of_source(self, source: str) -> dict[str, DocumentRecord]:
        return {row["external_id"]: DocumentRecord.from_row(dict(row)) for row in
                self._conn().execute("SELECT * FROM documents WHERE source = ?", [source])}

    def content_hashes(self) -> dict[str, str]:
        return dict(self._conn().execute("SELECT id, content_hash FROM documents"))

    def count_documents(self, source: str | None = None, *, with_content: bool = False) -> int:
        where, args = ["1"], []
        if source is not None:
            where.append("source = ?")
            args.append(source)
        if with_content:
            where.append("chunk_count > 0")
        return int(self._conn().execute(
            f"SELECT COUNT(*) FROM documents WHERE {' AND '.join(where)}", args).fetchone()[0])

    def current_versions(self, doc_ids: Iterable[str]) -> dict[str, str]:
        return {row["id"]: row["version"] for row in self.database.where_in(
            "SELECT id, version FROM documents WHERE id IN ({marks})", doc_ids)}

    def save_document(self, record: DocumentRecord, chunks: list[Chunk], ids: list[str],
                      outline: Outline | None = None) -> None:
        with self.database.transaction():
            conn = self._conn()
            conn.execute("DELETE FROM chunks WHERE document_id = ?", [record.id])
            conn.execute("DELETE FROM outlines WHERE document_id = ?", [record.id])
            # One statement, no schema lookups: this runs once per document of every run.
            self.database.upsert("documents", record.to_row(), pk="id")
            if outline is not None:
                conn.execute("INSERT INTO outlines (document_id, outline) VALUES (?, ?)",
                             [record.id, outline.to_json()])
            rows = [{"id": pid, "document_id": record.id, "token_count": c.token_count,
                     **c.location()} for c, pid in zip(chunks, ids, strict=True)]
            if rows:
                columns = list(rows[0])
                conn.executemany(
                    f"INSERT INTO chunks ({names(columns)}) VALUES ({marks(columns)})",
                    [[row[c] for c in columns] for row in rows])

    def update_document_fields(self, doc_id: str, **fields: Any) -> None:
        for key in JSON_COLUMNS:
            if key in fields:
                fields[key] = json.dumps(fields[key], sort_keys=True, default=str)
        if not fields:
            return
        columns = list(fields)
        assignments = ", ".join(f'"{c}" = ?' for c in columns)
        self._conn().execute(f"UPDATE documents SET {assignments} WHERE id = ?",
                             [*(fields[c] for c in columns), doc_id])

    def delete_document(self, doc_id: str) -> None:
        with self.database.transaction():
            conn = self._conn()
            conn.execute("DELETE FROM outlines WHERE document_id = ?", [doc_id])
            conn.execute("DELETE FROM chunks WHERE document_id = ?", [doc_id])
            conn.execute("DELETE FROM documents WHERE id = ?", [doc_id])

    def outlines(self, doc_ids: Iterable[str]) -> dict[str, Outline]:
        return {doc_id: Outline.from_json(text) for doc_id, text in self.database.where_in(
            "SELECT document_id, outline FROM outlines WHERE document_id IN ({marks})", doc_ids)}

    def signature_counts(self) -> list[tuple[str, str, int]]:
        return [(r[0], r[1], r[2]) for r in self._conn().execute(
            "SELECT media_type, index_signature, COUNT(*) FROM documents GROUP BY 1, 2")]

    def documents_with_signature(self, index_signature: str) -> set[str]:
        return {r[0] for r in self._conn().execute(
            "SELECT id FROM documents WHERE index_signature = ?", [index_signature])}

    def blob_owners(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self._conn().execute(
            "SELECT blob_key, MIN(id) FROM documents GROUP BY blob_key")}

    def documents_with_blob(self, blob_key: str) -> list[DocumentRecord]:
        return [DocumentRecord.from_row(dict(row)) for row in self._conn().execute(
            "SELECT * FROM documents WHERE blob_key = ?", [blob_key])]

    def blob_in_use(self, blob_key: str) -> bool:
        return self._conn().execute("SELECT 1 FROM documents WHERE blob_key = ? LIMIT 1",
                                    [blob_key]).fetchone() is not None

    # Chunks ------------------------------------------------------------------------------------
    def chunk_rows(self, doc_id: str) -> list[ChunkRow]:
        return [ChunkRow(id=r["id"], ordinal=r["ordinal"], heading=r["heading"], text=r["text"],
                         anchor=r["anchor"], start_line=r["start_line"], end_line=r["end_line"],
                         token_count=r["token_count"] or 0, symbol=r["symbol"],
                         continues_symbol=_flag(r["continues_symbol"]))
                for r in self._conn().execute(
                    "SELECT * FROM chunks WHERE document_id = ? ORDER BY ordinal", [doc_id])]

    def chunks(self, doc_id: str) -> list[Chunk]:
        return [r.chunk(doc_id) for r in self.chunk_rows(doc_id)]

    def count_chunks(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    def sample_chunk_ids(self, n: int) -> list[str]:
        return [r[0] for r in self._conn().execute(
            "SELECT id FROM chunks ORDER BY RANDOM() LIMIT ?", [n])]

    def live_points(self) -> dict[str, tuple[str, set[str]]]:
        out: dict[str, tuple[str, set[str]]] = {}
        for doc_id, version in self._conn().execute("SELECT id, version FROM documents"):
            out[doc_id] = (version, set())
        for chunk_id, doc_id in self._conn().execute("SELECT id, document_id FROM chunks"):
            if doc_id in out:
                out[doc_id][1].add(chunk_id)
        return out

    # What a caller may read ---------------------------------------------------------------------
    def readable_documents(self, doc_ids: Iterable[str], principals: list[str]) -> set[str]:
        wanted = sorted(set(doc_ids))
        if not wanted:
            return set()
        readable, args = _readable(list(principals))
        out: set[str] = set()
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            sql = (f"SELECT id FROM documents d WHERE id IN ({','.join('?' * len(part))}) "
                   f"AND {readable}")
            out.update(r[0] for r in self._conn().execute(sql, [*part, *args]))
        return out

    def titles_hidden_from(self, principals: list[str]) -> list[str]:
        readable, args = _readable(list(principals))
        return [r[0] for r in self._conn().execute(
            f"SELECT DISTINCT title FROM documents d WHERE NOT {readable}", args)]

    def path_mentions(self, word: str, principals: list[str]) -> bool:
        readable, args = _readable(list(principals))
        sql = f"SELECT 1 FROM documents d WHERE instr(lower(d.path), ?) > 0 AND {readable} LIMIT 1"
        return self._conn().execute(sql, [word.lower(), *args]).fetchone() is not None

    def source_counts(self, principals: list[str] | None = None) -> dict[str, tuple[int, int]]:
        readable, args = _readable(principals)
        return {r[0]: (r[1], r[2]) for r in self._conn().execute(
            "SELECT source, COUNT(*), COALESCE(SUM(chunk_count), 0) FROM documents d "
            f"WHERE {readable} GROUP BY source", args)}

    def list_facets(self, principals: list[str] | None = None,
                    limit: int = 50) -> dict[str, dict[str, list[str]]]:
        readable, args = _readable(principals)
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

    # Open swaps --------------------------------------------------------------------------------
    def begin_pending(self, pending: PendingWrite) -> None:
        row = asdict(pending) | {"started_at": pending.started_at or now()}
        self.database.upsert("pending_writes", row, pk="document_id")

    def commit_write(self, pending: PendingWrite, record: DocumentRecord, chunks: list[Chunk],
                     ids: list[str], outline: Outline | None = None) -> None:
        with self.database.transaction():
            self.save_document(record, chunks, ids, outline)
            self._mark_committed(pending)
        pending.phase = "committed"

    def commit_delete(self, pending: PendingWrite) -> None:
        with self.database.transaction():
            self.delete_document(pending.document_id)
            self._mark_committed(pending)
        pending.phase = "committed"

    def _mark_committed(self, pending: PendingWrite) -> None:
        conn = self._conn()
        conn.execute("UPDATE pending_writes SET phase = 'committed' WHERE document_id = ?",
                     [pending.document_id])
        if pending.takes_a_version_away:  # else nothing a search could miss
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1", [SWAPS_COMMITTED])

    def swaps_committed(self) -> str:
        return self.meta(SWAPS_COMMITTED) or "0"

    def end_pending(self, document_id: str) -> None:
        self._conn().execute("DELETE FROM pending_writes WHERE document_id = ?", [document_id])

    def pending_writes(self, source: str | None = None) -> list[PendingWrite]:
        where, args = ("WHERE source = ?", [source]) if source else ("", [])
        return [PendingWrite(**dict(row)) for row in self._conn().execute(
            f"SELECT * FROM pending_writes {where}", args)]

    def stale_point_ids(self) -> list[str]:
        return [pid for p in self.pending_writes() for pid in p.stale_point_ids()]

    # Facts about the index, and its generations -------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def meta_many(self, *keys: str) -> dict[str, str]:
        marks = ",".join("?" * len(keys))
        return {k: str(v) for k, v in self._conn().execute(
            f"SELECT key, value FROM meta WHERE key IN ({marks})", keys)}

    def set_meta(self, key: str, value: str) -> None:
        self._conn().execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                             "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def delete_meta(self, *keys: str) -> None:
        for key in keys:
            self._conn().execute("DELETE FROM meta WHERE key = ?", (key,))

    def meta_items(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self._conn().execute("SELECT key, value FROM meta")}

    def switch_generation(self, staged: DocumentCatalog, meta: dict[str, str]) -> None:
        if not isinstance(staged, SqliteDocumentCatalog):
            raise BackendError(f"a generation built in {type(staged).__name__} cannot be "
                               "switched into the SQLite catalog; nothing was switched",
                               hint="build it with the same database as the live catalog")
        conn = self._conn()
        conn.execute("ATTACH DATABASE ? AS staged", [str(staged.database.path)])
        try:
            with self.database.transaction():
                ours = dict(conn.execute("SELECT id, content_hash FROM main.documents"))
                theirs = dict(conn.execute("SELECT id, content_hash FROM staged.documents"))
                if ours != theirs:
                    raise BackendError(
                        f"the rebuilt catalog {staged.database.path} holds other documents "
                        f"than the live one ({len(theirs)} and {len(ours)}); nothing was "
                        "switched", hint="run `citewise reindex` again")
                for table in ("outlines", "chunks"):
                    conn.execute(f"DELETE FROM main.{table}")
                columns = [r[1] for r in conn.execute("PRAGMA main.table_info(documents)")]
                listed = ", ".join(columns)
                updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "id")
                conn.execute(f"INSERT INTO main.documents ({listed}) SELECT {listed} "
                             f"FROM staged.documents WHERE true "
                             f"ON CONFLICT(id) DO UPDATE SET {updates}")
                for table in ("chunks", "outlines"):
                    listed = ", ".join(r[1] for r in conn.execute(
                        f"PRAGMA main.table_info({table})"))
                    conn.execute(f"INSERT INTO main.{table} ({listed}) "
                                 f"SELECT {listed} FROM staged.{table}")
                for key, value in meta.items():
                    conn.execute("INSERT INTO main.meta (key, value) VALUES (?, ?) ON CONFLICT"
                                 "(key) DO UPDATE SET value = excluded.value", (key, value))
        finally:
            conn.execute("DETACH DATABASE staged")


# A copy of the database file (``citewise backup``, ``restore``) ----------------------------------
@dataclass
class CopySummary:
    blob_keys: list[str]  # every blob the copy's documents name
    documents: int
    chunks: int
    versions: dict[str, int]  # each store's schema version


def summarise_copy(path: Path) -> CopySummary:
    """What a copy of the database file holds, read without changing it (a backup's manifest)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return CopySummary(
            blob_keys=sorted(r[0] for r in conn.execute("SELECT DISTINCT blob_key FROM documents")),
            documents=conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0],
            chunks=conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0],
            versions=file_versions(conn))
    finally:
        conn.close()


def forget_generations(path: Path) -> None:
    """Make a restored copy's index a first generation again: the live generation's name and a
    half-built one are forgotten (``index/generations.py``), before the copy is put in place."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
                conn.execute("DELETE FROM meta WHERE key IN (?, ?)", (LIVE, BUILDING))
    finally:
        conn.close()
