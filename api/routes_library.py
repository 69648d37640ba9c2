"""What is indexed: documents (permission-checked) and sources."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from citewise.api.auth import identity, is_admin
from citewise.api.openapi import problems
from citewise.api.schemas import ResponseBody
from citewise.retrieval.library import DocumentView, SourceView
from citewise.types import Identity

router = APIRouter(prefix="/v1", tags=["library"])


class SourceList(ResponseBody):
    sources: list[SourceView]


@router.get(
    "/documents/{document_id}",
    summary="One document with its chunks",
    response_model=DocumentView,
    response_model_exclude_unset=True,
    responses=problems({
        404: "No document of that id that the caller may read (a restricted one is not "
             "found either).",
        500: "With include_content=true: the document's stored copy is missing from the blob "
             "store (ingest its source again with --force)."}),
)
def get_document(
    document_id: str,
    request: Request,
    who: Annotated[Identity, Depends(identity)],
    include_content: bool = False,
) -> DocumentView:
    """Metadata and chunks of a document the caller may read (404 otherwise, so that the
    existence of a restricted document is not revealed)."""
    document = request.app.state.services.library.document(
        document_id, who, include_content=include_content
    )
    request.state.results = 1
    return document


@router.get("/sources", response_model=SourceList, summary="Sources and what they hold")
def list_sources(
    request: Request, who: Annotated[Identity, Depends(identity)]
) -> SourceList:
    """Sources holding documents the caller may read, with counts of only those. Admins also
    see the others (declared, not yet ingested, or holding nothing they may read), and the
    last run's figures (which count every document, readable or not)."""
    sources = request.app.state.services.library.sources(who, every_name=is_admin(request))
    request.state.results = len(sources)
    if not is_admin(request):
        for source in sources:
            source.last_run = None
    return SourceList(sources=sources)
