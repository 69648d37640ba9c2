"""Search and answers: the endpoints people and the Slack bot call."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from citewise.api.auth import identity
from citewise.api.schemas import (
    AnswerRequest,
    AnswerResponse,
    Filters,
    SearchRequest,
    SearchResponse,
)
from citewise.types import Identity, SearchFilters

router = APIRouter(prefix="/v1", tags=["query"])


def _filters(f: Filters) -> SearchFilters:
    return SearchFilters(
        sources=f.sources, path_prefix=f.path_prefix, tags=f.tags, services=f.services
    )


def _search(request: Request, who: Identity, body: SearchRequest) -> SearchResponse:
    started = time.perf_counter()
    results = request.app.state.services.search.search(
        body.query, who, top_k=body.top_k, filters=_filters(body.filters), mode=body.mode
    )
    request.state.results = len(results)  # for usage
    return SearchResponse(
        query=body.query,
        results=results,
        took_ms=round((time.perf_counter() - started) * 1000, 2),
    )


@router.post("/search", response_model=SearchResponse, summary="Hybrid search")
def search_post(
    body: SearchRequest, request: Request, who: Annotated[Identity, Depends(identity)]
) -> SearchResponse:
    """Dense + BM25 search fused in the index, restricted to what the caller may read."""
    return _search(request, who, body)


@router.get("/search", response_model=SearchResponse, summary="Hybrid search (query string)")
def search_get(
    request: Request,
    who: Annotated[Identity, Depends(identity)],
    q: Annotated[str, Query(min_length=1, max_length=2000, description="The query.")],
    top_k: Annotated[int, Query(ge=1, le=100)] = 10,
    source: Annotated[list[str] | None, Query(description="Source name; repeatable.")] = None,
    path_prefix: Annotated[str | None, Query()] = None,
    tag: Annotated[list[str] | None, Query(description="Tag; repeatable.")] = None,
    service: Annotated[list[str] | None, Query(description="Service; repeatable.")] = None,
) -> SearchResponse:
    """The same search for browsers and curl: `/v1/search?q=disk+full&source=runbooks`."""
    body = SearchRequest(
        query=q,
        top_k=top_k,
        filters=Filters(
            sources=source or [], path_prefix=path_prefix, tags=tag or [], services=service or []
        ),
    )
    return _search(request, who, body)


@router.post("/answer", response_model=AnswerResponse, summary="Cited answer")
def answer(
    body: AnswerRequest, request: Request, who: Annotated[Identity, Depends(identity)]
) -> AnswerResponse:
    """An answer whose every sentence carries `[n]` markers resolving to `citations`.

    Extractive unless an LLM endpoint is configured. When the evidence is weak, `abstained`
    is true and the answer says nothing was found rather than guessing.
    """
    started = time.perf_counter()
    result = request.app.state.services.answers.answer(body.question, who, _filters(body.filters))
    request.state.results = len(result.citations)  # for usage
    return AnswerResponse(
        **dict(result), took_ms=round((time.perf_counter() - started) * 1000, 2)
    )
