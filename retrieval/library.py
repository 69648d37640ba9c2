"""What is indexed, as a caller may see it: one document, and the sources with their counts.

The HTTP routes and the CLI both call this service, so a permission rule or a count is decided
in one place. A document the caller may not read is "not found", never "forbidden": whether a
restricted document exists is itself something not everyone should learn. Source counts cover
only what the caller may read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from citewise.errors import NotFoundError, StoredCopyMissingError
from citewise.index.blobs import BlobStore
from citewise.index.catalog import DocumentCatalog
from citewise.index.source_store import SourceStore, sources_with_counts
from citewise.types import Identity


class ChunkView(BaseModel):
    id: str
    ordinal: int
    heading: str
    anchor: str | None = None
    text: str
    start_line: int | None = None
    end_line: int | None = None


class DocumentView(BaseModel):
    id: str
    source: str
    external_id: str = Field(description="The document's id in its source (path, page id).")
    title: str
    path: str | None = None
    url: str | None = None
    media_type: str
    readers: list[str] = Field(description="Principals that may read it.")
    tags: list[str] = Field(default_factory=list)
    service: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    content_hash: str
    size_bytes: int
    updated_at: str | None = None
    indexed_at: str
    chunks: list[ChunkView]
    content: str | None = Field(
        default=None, description="The stored text, with include_content=true."
    )
    injection_chunks: list[int] = Field(
        default_factory=list, description="The chunks (ordinals) whose text is aimed at a "
        "model rather than a reader, which answers leave out or fence per the injection "
        "guardrail; only when there are some.")


class SourceView(BaseModel):
    name: str
    type: str
    declared: bool = Field(description="Declared in the config file (else only indexed).")
    documents: int = Field(description="Documents you can read.")
    chunks: int = Field(description="Their chunks.")
    last_success_at: str | None = None
    last_run: dict[str, Any] | None = None
    tags: list[str] = Field(default_factory=list,
                            description="Tags of the documents you can read, most used first.")
    services: list[str] = Field(default_factory=list, description="The `service` of the "
                                "runbooks you can read, most used first.")


@dataclass(frozen=True)
class DeclaredSource:
    name: str
    type: str


class LibraryService:
    def __init__(self, catalog: DocumentCatalog, sources: SourceStore, blobs: BlobStore | None,
                 declared: list[DeclaredSource] | None = None) -> None:
        # ``blobs`` may be None for a caller that only lists sources (the CLI, next to a server).
        self.catalog = catalog
        self.source_store = sources
        self.blobs = blobs
        self.declared = list(declared or [])

    def document(self, document_id: str, who: Identity, *,
                 include_content: bool = False) -> DocumentView:
        """The document with its chunks, if ``who`` may read it (``NotFoundError`` otherwise)."""
        doc = self.catalog.get_document(document_id)
        if doc is None or not set(doc.readers) & set(who.principals()):
            raise NotFoundError(f"no document {document_id!r} that you can read")
        view = DocumentView(
            id=doc.id, source=doc.source, external_id=doc.external_id, title=doc.title,
            path=doc.path, url=doc.url, media_type=doc.media_type, readers=doc.readers,
            tags=doc.tags, service=doc.service, metadata=doc.metadata,
            content_hash=doc.content_hash, size_bytes=doc.size_bytes, updated_at=doc.updated_at,
            indexed_at=doc.indexed_at,
            chunks=[ChunkView(**{k: getattr(c, k) for k in ChunkView.model_fields})
                    for c in self.catalog.chunk_rows(doc.id)],
        )
        if doc.injection_chunks:  # set only then: the route leaves unset fields out
            view.injection_chunks = list(doc.injection_chunks)
        if include_content:
            assert self.blobs is not None, "a library without blobs lists sources only"
            try:
                data = self.blobs.get(doc.blob_key)
            except KeyError:
                raise StoredCopyMissingError(
                    f"the stored copy of document {document_id!r} ({doc.source}/"
                    f"{doc.path or doc.external_id}) is missing from the blob store",
                    hint=f"ingest its source again with --force (citewise ingest --source "
                         f"{doc.source} --force) to store it anew; its chunks and search are "
                         "not affected",
                ) from None
            view.content = data.decode("utf-8", errors="replace")
        return view

    def sources(self, who: Identity | None, *, every_name: bool = False) -> list[SourceView]:
        """Declared and indexed sources. With ``who``, counts include only documents they may
        read, and a source holding none they may read is left out (its name alone says what
        the organisation keeps, e.g. ``security-incidents``) unless ``every_name`` (an admin);
        ``None`` is the operator's view on their own machine (the CLI): everything."""
        principals = who.principals() if who is not None else None
        rows = {row["name"]: row for row in
                sources_with_counts(self.source_store, self.catalog, principals)}
        declared = {s.name: s for s in self.declared}
        facets = self.catalog.list_facets(principals)
        out = []
        for name in sorted(set(declared) | set(rows)):
            row = rows.get(name, {})
            if who is not None and not every_name and not row.get("documents"):
                continue
            last = self.source_store.list_runs(name, limit=1)
            out.append(SourceView(
                name=name, type=row.get("type") or declared[name].type,
                declared=name in declared, documents=row.get("documents", 0),
                chunks=row.get("chunks", 0), last_success_at=row.get("last_success_at"),
                last_run=last[0] if last else None,
                **facets.get(name, {}),
            ))
        return out
