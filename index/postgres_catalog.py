"""The document catalog (``index/catalog.py``) in PostgreSQL (``CITEWISE_DATABASE_URL``).

The tables of ``sqlite_catalog.py`` (``documents``, ``chunks``, ``outlines``, ``pending_writes``,
``meta``) in PostgreSQL's own terms: a document's readers and tags are ``text[]`` (a caller may
read a document when ``readers && <their principals>``, with a GIN index), its metadata
``jsonb``, the chunks aimed at a model ``integer[]``. Ids and tags are ``COLLATE "C"``: byte
order, as SQLite and Python compare, whatever collation the database was made with.

The generation switch copies the staged catalog's rows from the schema ``citewise reindex``
built them in (``postgres_staging.py``) in one transaction: readers see the old rows and
pointer or the new ones (PostgreSQL's snapshots), never a mixture.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from citewise.errors import BackendError
from citewise.index.catalog import (
    SWAPS_COMMITTED,
    ChunkRow,
    DocumentCatalog,
    DocumentRecord,
    PendingWrite,
    now,
)
from citewise.index.outline import Outline
from citewise.postgres import PostgresStore, Row
from citewise.store_schema import Migration, StoreSchema
from citewise.types import Chunk

SCHEMA = StoreSchema("documents", (
    Migration("""
    CREATE TABLE documents (
        id TEXT COLLATE "C" PRIMARY KEY,
        source TEXT COLLATE "C" NOT NULL REFERENCES sources (name),
        external_id TEXT NOT NULL,
        path TEXT,
        url TEXT,
        title TEXT NOT NULL,
        media_type TEXT COLLATE "C" NOT NULL,
        content_hash TEXT NOT NULL,
        version TEXT NOT NULL,
        index_signature TEXT COLLATE "C" NOT NULL,
        readers TEXT[] NOT NULL,
        tags TEXT[] COLLATE "C" NOT NULL DEFAULT '{}',
        service TEXT COLLATE "C",
        metadata JSONB NOT NULL DEFAULT '{}',
        blob_key TEXT COLLATE "C" NOT NULL,
        chunk_count INTEGER NOT NULL DEFAULT 0,
        size_bytes BIGINT NOT NULL DEFAULT 0,
        updated_at TEXT,
        indexed_at TEXT NOT NULL,
        link_template TEXT,
        body_line_offset INTEGER,
        injection_chunks INTEGER[] NOT NULL DEFAULT '{}',
        UNIQUE (source, external_id)
    );
    CREATE INDEX documents_blob_key ON documents (blob_key);
    CREATE INDEX documents_readers ON documents USING gin (readers);
    CREATE TABLE chunks (
        id TEXT PRIMARY KEY,
        document_id TEXT COLLATE "C" NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL,
        heading TEXT NOT NULL,
        anchor TEXT,
        text TEXT NOT NULL,
        start_line INTEGER,
        end_line INTEGER,
        token_count INTEGER NOT NULL DEFAULT 0,
        symbol TEXT,
        continues_symbol BOOLEAN
    );
    CREATE INDEX chunks_document ON chunks (document_id, ordinal);
    CREATE TABLE outlines (
        document_id TEXT COLLATE "C" PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
        outline TEXT NOT NULL
    );
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
    CREATE INDEX pending_writes_source ON pending_writes (source);
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """),
))

# The columns of each table, named once: what a document is (``DocumentRecord``), what a
# chunk is (``Chunk.location()`` and its point id), both here and at the generation switch.
DOCUMENT_COLUMNS = tuple(f.name for f in fields(DocumentRecord))
CHUNK_COLUMNS = ("id", "document_id", "token_count", "ordinal", "heading", "anchor", "text",
                 "start_line", "end_line", "symbol", "continues_symbol")
OUTLINE_COLUMNS = ("document_id", "outline")
PENDING_COLUMNS = tuple(f.name for f in fields(PendingWrite))


def _names(columns: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in columns)


def _marks(columns: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Placeholder() for _ in columns)


def _updates(columns: Iterable[str], key: str) -> sql.Composed:
    return sql.SQL(", ").join(sql.SQL("{0} = excluded.{0}").format(sql.Identifier(c))
                              for c in columns if c != key)


def _value(column: str, value: Any) -> Any:
    """A document field as its column takes it (lists go as arrays by themselves; what JSON
    cannot say in the metadata, a datetime, is said as text, as the SQLite catalog does)."""
    return Jsonb(value, dumps=_dumps) if column == "metadata" else value


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _readable(principals: list[str] | None) -> tuple[str, list[Any]]:
    """The SQL condition on ``documents d`` for ``principals`` (None: every document)."""
    if principals is None:
        return "TRUE", []
    return "d.readers && %s::text[]", [list(principals)]


def _record(row: Row) -> DocumentRecord:
    return DocumentRecord(**row)


class PostgresDocumentCatalog(PostgresStore):
    """``DocumentCatalog`` over the tables above, in ``database``."""

    schema = SCHEMA

    # Documents -------------------------------------------------------------------------------
    def get_document(self, doc_id: str) -> DocumentRecord | None:
        row = self.database.row("SELECT * FROM documents WHERE id = %s", [doc_id])
        return _record(row) if row is not None else None

    def documents_of_source(self, source: str) -> dict[str, DocumentRecord]:
        return {row["external_id"]: _record(row) for row in self.database.rows(
            "SELECT * FROM documents WHERE source = %s", [source])}

    def content_hashes(self) -> dict[str, str]:
        return {r["id"]: r["content_hash"] for r in self.database.rows(
            "SELECT id, content_hash FROM documents")}

    def count_documents(self, source: str | None = None, *, with_content: bool = False) -> int:
        where, args = ["TRUE"], []
        if source is not None:
            where.append("source = %s")
            args.append(source)
        if with_content:
            where.append("chunk_count > 0")
        row = self.database.row(
            f"SELECT COUNT(*) AS n FROM documents WHERE {' AND '.join(where)}", args)
        return int(row["n"]) if row else 0

    def current_versions(self, doc_ids: Iterable[str]) -> dict[str, str]:
        return {r["id"]: r["version"] for r in self.database.rows(
            "SELECT id, version FROM documents WHERE id = ANY(%s::text[])", [list(set(doc_ids))])}

    def save_document(self, record: DocumentRecord, chunks: list[Chunk], ids: list[str],
                      outline: Outline | None = None) -> None:
        row = asdict(record)
        with self.database.transaction() as conn:
            conn.execute("DELETE FROM chunks WHERE document_id = %s", [record.id])
            conn.execute("DELETE FROM outlines WHERE document_id = %s", [record.id])
            conn.execute(sql.SQL(
                "INSERT INTO documents ({}) VALUES ({}) ON CONFLICT (id) DO UPDATE SET {}").format(
                _names(DOCUMENT_COLUMNS), _marks(DOCUMENT_COLUMNS),
                _updates(DOCUMENT_COLUMNS, "id")),
                [_value(c, row[c]) for c in DOCUMENT_COLUMNS])
            if outline is not None:
                conn.execute("INSERT INTO outlines (document_id, outline) VALUES (%s, %s)",
                             [record.id, outline.to_json()])
            rows = [{"id": pid, "document_id": record.id, "token_count": c.token_count,
                     **c.location()} for c, pid in zip(chunks, ids, strict=True)]
            if rows:
                # One round trip for all of them (psycopg pipelines executemany).
                conn.cursor().executemany(
                    sql.SQL("INSERT INTO chunks ({}) VALUES ({})").format(
                        _names(CHUNK_COLUMNS), _marks(CHUNK_COLUMNS)),
                    [[r[c] for c in CHUNK_COLUMNS] for r in rows])

    def update_document_fields(self, doc_id: str, **changed: Any) -> None:
        unknown = set(changed) - set(DOCUMENT_COLUMNS)
        if unknown:
            raise ValueError(f"documents have no fields {sorted(unknown)}")
        if not changed:
            return
        columns = list(changed)
        self.database.execute(
            sql.SQL("UPDATE documents SET {} WHERE id = %s").format(sql.SQL(", ").join(
                sql.SQL("{} = %s").format(sql.Identifier(c)) for c in columns)),
            [*(_value(c, changed[c]) for c in columns), doc_id])

    def delete_document(self, doc_id: str) -> None:
        # The chunks and outline go with it (ON DELETE CASCADE), in the same statement.
        self.database.execute("DELETE FROM documents WHERE id = %s", [doc_id])

    def outlines(self, doc_ids: Iterable[str]) -> dict[str, Outline]:
        return {r["document_id"]: Outline.from_json(r["outline"]) for r in self.database.rows(
            "SELECT document_id, outline FROM outlines WHERE document_id = ANY(%s::text[])",
            [list(set(doc_ids))])}

    def signature_counts(self) -> list[tuple[str, str, int]]:
        return [(r["media_type"], r["index_signature"], int(r["n"])) for r in self.database.rows(
            "SELECT media_type, index_signature, COUNT(*) AS n FROM documents "
            "GROUP BY 1, 2 ORDER BY 1, 2")]

    def documents_with_signature(self, index_signature: str) -> set[str]:
        return {r["id"] for r in self.database.rows(
            "SELECT id FROM documents WHERE index_signature = %s", [index_signature])}

    def blob_owners(self) -> dict[str, str]:
        return {r["blob_key"]: r["owner"] for r in self.database.rows(
            "SELECT blob_key, MIN(id) AS owner FROM documents GROUP BY blob_key")}

    def documents_with_blob(self, blob_key: str) -> list[DocumentRecord]:
        return [_record(r) for r in self.database.rows(
            "SELECT * FROM documents WHERE blob_key = %s", [blob_key])]

    def blob_in_use(self, blob_key: str) -> bool:
        return self.database.row("SELECT 1 FROM documents WHERE blob_key = %s LIMIT 1",
                                 [blob_key]) is not None

    # Chunks ------------------------------------------------------------------------------------
    def chunk_rows(self, doc_id: str) -> list[ChunkRow]:
        return [ChunkRow(id=r["id"], ordinal=r["ordinal"], heading=r["heading"], text=r["text"],
                         anchor=r["anchor"], start_line=r["start_line"], end_line=r["end_line"],
                         token_count=r["token_count"] or 0, symbol=r["symbol"],
                         continues_symbol=r["continues_symbol"])
                for r in self.database.rows(
                    "SELECT * FROM chunks WHERE document_id = %s ORDER BY ordinal", [doc_id])]

    def chunks(self, doc_id: str) -> list[Chunk]:
        return [Chunk(document_id=doc_id, ordinal=r.ordinal, text=r.text, heading=r.heading,
                      anchor=r.anchor, start_line=r.start_line, end_line=r.end_line,
                      token_count=r.token_count, symbol=r.symbol,
                      continues_symbol=r.continues_symbol)
                for r in self.chunk_rows(doc_id)]

    def count_chunks(self) -> int:
        row = self.database.row("SELECT COUNT(*) AS n FROM chunks")
        return int(row["n"]) if row else 0

    def sample_chunk_ids(self, n: int) -> list[str]:
        return [r["id"] for r in self.database.rows(
            "SELECT id FROM chunks ORDER BY random() LIMIT %s", [n])]

    def live_points(self) -> dict[str, tuple[str, set[str]]]:
        out: dict[str, tuple[str, set[str]]] = {}
        for r in self.database.rows("SELECT id, version FROM documents"):
            out[r["id"]] = (r["version"], set())
        for r in self.database.rows("SELECT id, document_id FROM chunks"):
            if r["document_id"] in out:
                out[r["document_id"]][1].add(r["id"])
        return out

    # What a caller may read ---------------------------------------------------------------------
    def readable_documents(self, doc_ids: Iterable[str], principals: list[str]) -> set[str]:
        wanted = list(set(doc_ids))
        if not wanted:
            return set()
        readable, args = _readable(list(principals))
        return {r["id"] for r in self.database.rows(
            f"SELECT id FROM documents d WHERE id = ANY(%s::text[]) AND {readable}",
            [wanted, *args])}

    def titles_hidden_from(self, principals: list[str]) -> list[str]:
        readable, args = _readable(list(principals))
        return [r["title"] for r in self.database.rows(
            f"SELECT DISTINCT title FROM documents d WHERE NOT ({readable})", args)]

    def path_mentions(self, word: str, principals: list[str]) -> bool:
        readable, args = _readable(list(principals))
        return self.database.row(
            f"SELECT 1 FROM documents d WHERE strpos(lower(d.path), %s) > 0 AND {readable} "
            "LIMIT 1", [word.lower(), *args]) is not None

    def source_counts(self, principals: list[str] | None = None) -> dict[str, tuple[int, int]]:
        readable, args = _readable(principals)
        return {r["source"]: (int(r["documents"]), int(r["chunks"])) for r in self.database.rows(
            "SELECT source, COUNT(*) AS documents, COALESCE(SUM(chunk_count), 0) AS chunks "
            f"FROM documents d WHERE {readable} GROUP BY source", args)}

    def list_facets(self, principals: list[str] | None = None,
                    limit: int = 50) -> dict[str, dict[str, list[str]]]:
        readable, args = _readable(principals)
        query = f"""
            SELECT d.source, 'tags' AS kind, t.value AS value, COUNT(*) AS n
              FROM documents d, unnest(d.tags) AS t(value) WHERE {readable} GROUP BY 1, 3
            UNION ALL
            SELECT d.source, 'services', d.service, COUNT(*)
              FROM documents d WHERE d.service IS NOT NULL AND d.service <> '' AND {readable}
              GROUP BY 1, 3
            ORDER BY 1, 2, 4 DESC, 3
        """
        out: dict[str, dict[str, list[str]]] = {}
        for r in self.database.rows(query, args + args):
            values = out.setdefault(r["source"], {"tags": [], "services": []})[r["kind"]]
            if len(values) < limit:
                values.append(r["value"])
        return out

    # Open swaps --------------------------------------------------------------------------------
    def begin_pending(self, pending: PendingWrite) -> None:
        row = asdict(pending) | {"started_at": pending.started_at or now()}
        self.database.execute(sql.SQL(
            "INSERT INTO pending_writes ({}) VALUES ({}) ON CONFLICT (document_id) "
            "DO UPDATE SET {}").format(_names(PENDING_COLUMNS), _marks(PENDING_COLUMNS),
                                       _updates(PENDING_COLUMNS, "document_id")),
            [row[c] for c in PENDING_COLUMNS])

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
        self.database.execute(
            "UPDATE pending_writes SET phase = 'committed' WHERE document_id = %s",
            [pending.document_id])
        if pending.takes_a_version_away:  # else nothing a search could miss
            self.database.execute(
                "INSERT INTO meta (key, value) VALUES (%s, '1') ON CONFLICT (key) "
                "DO UPDATE SET value = (meta.value::bigint + 1)::text", [SWAPS_COMMITTED])

    def swaps_committed(self) -> str:
        return self.meta(SWAPS_COMMITTED) or "0"

    def end_pending(self, document_id: str) -> None:
        self.database.execute("DELETE FROM pending_writes WHERE document_id = %s", [document_id])

    def pending_writes(self, source: str | None = None) -> list[PendingWrite]:
        where, args = ("WHERE source = %s", [source]) if source else ("", [])
        return [PendingWrite(**r) for r in self.database.rows(
            f"SELECT * FROM pending_writes {where}", args)]

    def stale_point_ids(self) -> list[str]:
        return [pid for p in self.pending_writes() for pid in p.stale_point_ids()]

    # Facts about the index, and its generations -------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.database.row("SELECT value FROM meta WHERE key = %s", [key])
        return str(row["value"]) if row else None

    def meta_many(self, *keys: str) -> dict[str, str]:
        return {r["key"]: str(r["value"]) for r in self.database.rows(
            "SELECT key, value FROM meta WHERE key = ANY(%s::text[])", [list(keys)])}

    def set_meta(self, key: str, value: str) -> None:
        self.database.execute("INSERT INTO meta (key, value) VALUES (%s, %s) "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                              [key, value])

    def delete_meta(self, *keys: str) -> None:
        self.database.execute("DELETE FROM meta WHERE key = ANY(%s::text[])", [list(keys)])

    def meta_items(self) -> dict[str, str]:
        return {r["key"]: str(r["value"]) for r in self.database.rows(
            "SELECT key, value FROM meta")}

    def switch_generation(self, staged: DocumentCatalog, meta: dict[str, str]) -> None:
        namespace = staged.database.namespace if isinstance(
            staged, PostgresDocumentCatalog) else None
        if namespace is None or namespace == self.database.namespace:
            raise BackendError(f"a generation built in {type(staged).__name__} cannot be "
                               "switched into the PostgreSQL catalog; nothing was switched",
                               hint="build it with `citewise reindex` on the same database "
                                    "(CITEWISE_DATABASE_URL) as the live catalog")
        there = sql.Identifier(namespace)
        with self.database.transaction() as conn:
            # No other writer of the live catalog while it is compared and replaced (the
            # caller holds the run lock; this keeps the switch whole whoever else writes).
            conn.execute("LOCK TABLE documents, chunks, outlines IN EXCLUSIVE MODE")
            ours = {r["id"]: r["content_hash"] for r in conn.execute(
                "SELECT id, content_hash FROM documents")}
            theirs = {r["id"]: r["content_hash"] for r in conn.execute(sql.SQL(
                "SELECT id, content_hash FROM {}.documents").format(there))}
            if ours != theirs:
                raise BackendError(
                    f"the rebuilt catalog (schema {namespace}) holds other documents than the "
                    f"live one ({len(theirs)} and {len(ours)}); nothing was switched",
                    hint="run `citewise reindex` again")
            conn.execute("DELETE FROM outlines")
            conn.execute("DELETE FROM chunks")
            conn.execute(sql.SQL(
                "INSERT INTO documents ({0}) SELECT {0} FROM {1}.documents "
                "ON CONFLICT (id) DO UPDATE SET {2}").format(
                _names(DOCUMENT_COLUMNS), there, _updates(DOCUMENT_COLUMNS, "id")))
            for table, columns in (("chunks", CHUNK_COLUMNS), ("outlines", OUTLINE_COLUMNS)):
                conn.execute(sql.SQL("INSERT INTO {0} ({1}) SELECT {1} FROM {2}.{0}").format(
                    sql.Identifier(table), _names(columns), there))
            for key, value in meta.items():
                self.set_meta(key, value)
