"""The document catalog: which documents are indexed, in which version, with which chunks.

The catalog is the source of truth for what is indexed. The vector index holds copies of chunk
text and metadata for fast filtering, but which *version* of a document is live is decided here:
retrieval drops hits whose version is not the catalog's current one, which is what makes the
swap from old to new chunks atomic for readers (see ``ingest/swap.py``). It also keeps the
write-ahead record of those swaps (``PendingWrite``), the outlines answers are built from, and
facts about the index as a whole (``meta``: the embedding model, the live generation).

``DocumentCatalog`` is the contract; ``index/sqlite_catalog.py`` keeps it in the embedded
database. A document belongs to a source registered in the ``SourceStore``
(``index/source_store.py``) of the same database.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from citewise.index.outline import Outline
from citewise.types import Chunk

CHUNK_NAMESPACE = uuid.UUID("5b0c1f3e-8a0e-4d8e-9a51-3c7f0f2e9d11")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def document_id(source: str, external_id: str) -> str:
    """Stable id of a document: the same source and external id always give the same id."""
    return hashlib.sha256(f"{source}\0{external_id}".encode()).hexdigest()[:20]


def chunk_point_id(doc_id: str, version: str, ordinal: int) -> str:
    """Deterministic point id: re-ingesting the same version overwrites, never duplicates."""
    return str(uuid.uuid5(CHUNK_NAMESPACE, f"{doc_id}:{version}:{ordinal}"))


@dataclass
class DocumentRecord:
    """A document as the catalog keeps it, its JSON columns decoded."""

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
    metadata: dict[str, Any] = field(default_factory=dict)
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
    def from_row(cls, row: dict[str, Any]) -> DocumentRecord:
        row = dict(row)
        for key in JSON_COLUMNS:
            row[key] = json.loads(row[key]) if row.get(key) else ({} if key == "metadata" else [])
        return cls(**row)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for key in JSON_COLUMNS:
            row[key] = json.dumps(row[key], sort_keys=True, default=str)
        return row


# The fact that counts committed document swaps (``swaps_committed``), kept in ``meta`` by both
# catalogs.
SWAPS_COMMITTED = "swaps_committed"
# The columns of ``documents`` that hold JSON.
JSON_COLUMNS = ("readers", "tags", "metadata", "injection_chunks")


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

    @property
    def in_place(self) -> bool:
        """A write of the version already live: a forced run, or new readers on the same text.
        The points keep their ids (``chunk_point_id``) and are overwritten where they stand, so
        a reader sees the document all along, with its old payload or its new one. Nothing is
        hidden while it runs and no search can miss the document because of it, so its commit
        is not counted in ``swaps_committed`` (``takes_a_version_away``; in the soak of Dec 7,
        forced runs' commits made searches ask the index again 56,646 times in 85,830 searches,
        for nothing)."""
        return self.kind == "write" and self.new_version is not None \
            and self.new_version == self.old_version

    @property
    def takes_a_version_away(self) -> bool:
        """Whether committing this swap takes away a version that searches may be showing: a
        new version replacing another, or a deletion. Only such a commit can hide a document
        from a search that straddles it, so only such commits are counted in
        ``swaps_committed``. A first write adds a document a search either finds whole or not
        at all (as if it ran just before the commit); a write in place changes no point ids."""
        if self.kind == "delete":
            return True
        return self.old_version is not None and self.old_version != self.new_version

    def stale_point_ids(self) -> list[str]:
        """Points that must not be served while this swap is open: the new version's until the
        catalog commits it, the old version's after; none for a write in place."""
        if self.kind != "write" or self.in_place:
            return []
        if self.phase == "started" and self.new_version:
            return [chunk_point_id(self.document_id, self.new_version, i)
                    for i in range(self.new_points)]
        if self.phase == "committed" and self.old_version and self.old_version != self.new_version:
            return [chunk_point_id(self.document_id, self.old_version, i)
                    for i in range(self.old_points)]
        return []


@dataclass
class ChunkRow:
    """A live chunk as the catalog keeps it (``Chunk`` plus its point id)."""

    id: str
    ordinal: int
    heading: str
    text: str
    anchor: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    token_count: int = 0
    symbol: str | None = None
    continues_symbol: bool | None = None

    def chunk(self, document_id: str) -> Chunk:
        """The chunk as it was written (what ``save_document`` takes, beside this row's id)."""
        return Chunk(document_id=document_id, ordinal=self.ordinal, text=self.text,
                     heading=self.heading, anchor=self.anchor, start_line=self.start_line,
                     end_line=self.end_line, token_count=self.token_count, symbol=self.symbol,
                     continues_symbol=self.continues_symbol)


class DocumentCatalog(Protocol):
    """Documents, their live chunks and outlines, open swaps, and facts about the index.

    ``principals`` arguments are a caller's reader names (``public``, ``user:dana``,
    ``group:sre``): a document counts for them when one of its ``readers`` is among them.
    """

    # Documents -------------------------------------------------------------------------------
    def get_document(self, doc_id: str) -> DocumentRecord | None: ...

    def documents_of_source(self, source: str) -> dict[str, DocumentRecord]:
        """The source's documents keyed by external id."""
        ...

    def content_hashes(self) -> dict[str, str]:
        """Every document's id and the hash of its content (what a rebuild must reproduce)."""
        ...

    def count_documents(self, source: str | None = None, *, with_content: bool = False) -> int:
        """Documents (of one source); ``with_content`` leaves out those with no chunks."""
        ...

    def current_versions(self, doc_ids: Iterable[str]) -> dict[str, str]:
        """The live version of each of these documents that exists."""
        ...

    def save_document(self, record: DocumentRecord, chunks: list[Chunk], ids: list[str],
                      outline: Outline | None = None) -> None:
        """Make ``record`` (its chunks, with point ids ``ids``, and outline) the live version of
        the document, atomically."""
        ...

    def update_document_fields(self, doc_id: str, **fields: Any) -> None:
        """Change some of a document's fields (its readers, its index signature) in place."""
        ...

    def delete_document(self, doc_id: str) -> None:
        """The document, its chunks and outline gone, atomically."""
        ...

    def outlines(self, doc_ids: Iterable[str]) -> dict[str, Outline]:
        """The outlines of these documents' live versions (prose documents have one)."""
        ...

    def signature_counts(self) -> list[tuple[str, str, int]]:
        """``(media type, index signature, documents)``: what the documents were indexed with."""
        ...

    def documents_with_signature(self, index_signature: str) -> set[str]: ...

    def blob_owners(self) -> dict[str, str]:
        """Each blob key in use, with one document that uses it."""
        ...

    def documents_with_blob(self, blob_key: str) -> list[DocumentRecord]: ...

    def blob_in_use(self, blob_key: str) -> bool: ...

    # Chunks ------------------------------------------------------------------------------------
    def chunks(self, doc_id: str) -> list[Chunk]:
        """The live version's chunks, in order, as they were written."""
        ...

    def chunk_rows(self, doc_id: str) -> list[ChunkRow]:
        """The live version's chunks with their point ids, in order."""
        ...

    def count_chunks(self) -> int: ...

    def sample_chunk_ids(self, n: int) -> list[str]:
        """Up to ``n`` point ids of live chunks, chosen at random (a quick consistency check)."""
        ...

    def live_points(self) -> dict[str, tuple[str, set[str]]]:
        """Every document's live version and its chunk (point) ids."""
        ...

    # What a caller may read ---------------------------------------------------------------------
    def readable_documents(self, doc_ids: Iterable[str], principals: list[str]) -> set[str]:
        """Which of ``doc_ids`` exist and one of ``principals`` may read, as of now (a stored
        answer is shown only if every document it cites passes this)."""
        ...

    def titles_hidden_from(self, principals: list[str]) -> list[str]:
        """Titles of the documents none of ``principals`` may read."""
        ...

    def path_mentions(self, word: str, principals: list[str]) -> bool:
        """Whether the path of a document one of ``principals`` may read contains ``word``
        (case-insensitive): an alert whose runbook is named after it but never says it."""
        ...

    def source_counts(self, principals: list[str] | None = None) -> dict[str, tuple[int, int]]:
        """Per source, its documents and their chunks; with ``principals``, only documents one
        of them may read count (how many restricted documents a source holds is itself
        something not everyone should learn)."""
        ...

    def list_facets(self, principals: list[str] | None = None,
                    limit: int = 50) -> dict[str, dict[str, list[str]]]:
        """Per source, the tags and runbook services of the documents ``principals`` may read,
        most common first (at most ``limit`` of each): what a search page offers as filters.
        Like the counts, only readable documents contribute, so a restricted document's tags
        do not reveal it."""
        ...

    # Open swaps (crash recovery: ``ingest/swap.py``) ---------------------------------------------
    def begin_pending(self, pending: PendingWrite) -> None:
        """Record the intent as given, its phase too (or replace the document's open one)."""
        ...

    def commit_write(self, pending: PendingWrite, record: DocumentRecord, chunks: list[Chunk],
                     ids: list[str], outline: Outline | None = None) -> None:
        """Make ``record`` live and mark the swap committed, in one transaction; counts the
        commit (``swaps_committed``)."""
        ...

    def commit_delete(self, pending: PendingWrite) -> None:
        """Remove the document (row, chunks, outline) and mark the swap committed, in one
        transaction; counts the commit."""
        ...

    def end_pending(self, document_id: str) -> None: ...

    def pending_writes(self, source: str | None = None) -> list[PendingWrite]: ...

    def stale_point_ids(self) -> list[str]:
        """Points no search may return now: those of every open swap (see ``PendingWrite``)."""
        ...

    def swaps_committed(self) -> str:
        """A mark that changes whenever a document's version is switched or removed: a search
        that sees it change while it ran may have missed that document (``SearchService``).
        It is the fact ``SWAPS_COMMITTED`` (``meta_many`` reads it with others), "0" unset."""
        ...

    # Facts about the index, and its generations (``index/generations.py``) -----------------------
    def meta(self, key: str) -> str | None: ...

    def meta_many(self, *keys: str) -> dict[str, str]:
        """The facts of ``keys`` that are set, read in one statement: a search reads the swap
        count and the live generation before its index queries and again after (one round trip
        each on PostgreSQL, not two)."""
        ...

    def set_meta(self, key: str, value: str) -> None: ...

    def delete_meta(self, *keys: str) -> None: ...

    def meta_items(self) -> dict[str, str]:
        """Every fact kept with ``set_meta``, by key: what ``citewise migrate-catalog`` copies
        (a copy of the whole catalog reads the documents through ``content_hashes``,
        ``get_document``, ``chunk_rows`` and ``outlines``, and writes them with
        ``save_document``)."""
        ...

    def switch_generation(self, staged: DocumentCatalog, meta: dict[str, str]) -> None:
        """Make the documents, chunks and outlines of ``staged`` (a catalog built beside this
        one by ``citewise reindex``, of the same kind) the live ones, and write ``meta`` (the
        pointer to the new vector index), in one transaction: every reader sees the old rows
        and pointer or the new ones. Refused, with nothing switched, when the two hold other
        documents or other contents (the caller holds the run lock while it builds, so none
        can change)."""
        ...

    def close(self) -> None: ...
