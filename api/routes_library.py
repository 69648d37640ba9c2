"""What is indexed: documents (permission-checked) and sources."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from citewise.api.auth import identity
from citewise.errors import NotFoundError
from citewise.types import Identity

router = APIRouter(prefix="/v1", tags=["library"])


@router.get("/documents/{document_id}", summary="One document with its chunks")
def get_document(
    document_id: str,
    request: Request,
    who: Annotated[Identity, Depends(identity)],
    include_content: bool = False,
) -> dict:
    """Metadata and chunks of a document the caller may read (404 otherwise, so that the
    existence of a restricted document is not revealed)."""
    services = request.app.state.services
    doc = services.catalog.get_document(document_id)
    if doc is None or not set(doc.readers) & set(who.principals()):
        raise NotFoundError(f"no document {document_id!r} that you can read")
    body = {
        "id": doc.id,
        "source": doc.source,
        "external_id": doc.external_id,
        "title": doc.title,
        "path": doc.path,
        "url": doc.url,
        "media_type": doc.media_type,
        "readers": doc.readers,
        "tags": doc.tags,
        "service": doc.service,
        "metadata": doc.metadata,
        "content_hash": doc.content_hash,
        "size_bytes": doc.size_bytes,
        "updated_at": doc.updated_at,
        "indexed_at": doc.indexed_at,
        "chunks": [
            {k: c[k] for k in ("id", "ordinal", "heading", "anchor", "text", "start_line",
                               "end_line")}
            for c in services.catalog.chunks_of(doc.id)
        ],
    }
    if include_content:
        body["content"] = services.blobs.get(doc.blob_key).decode("utf-8", errors="replace")
    return body


@router.get("/sources", summary="Sources and what they hold")
def list_sources(request: Request, who: Annotated[Identity, Depends(identity)]) -> dict:
    """Declared and indexed sources; counts include only documents the caller may read."""
    services = request.app.state.services
    declared = {s.name: s for s in services.settings.sources}
    rows = {row["name"]: row for row in services.catalog.list_sources(who.principals())}
    out = []
    for name in sorted(set(declared) | set(rows)):
        row = rows.get(name, {})
        last = services.catalog.list_runs(name, limit=1)
        out.append(
            {
                "name": name,
                "type": row.get("type") or declared[name].type,
                "declared": name in declared,
                "documents": row.get("documents", 0),
                "chunks": row.get("chunks", 0),
                "last_success_at": row.get("last_success_at"),
                "last_run": last[0] if last else None,
            }
        )
    return {"sources": out}
