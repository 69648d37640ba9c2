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
from citewise.api.sse import error_problem, event_response, event_schema, relay, sse_bytes
from citewise.retrieval.answering.stream import EVENTS
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


STREAM_DOC = {
    "description": "The answer as JSON; with `stream: true` or `Accept: text/event-stream`, "
    "server-sent events: `citations`, then `delta` and `block`, then `done` (the whole answer, "
    "authoritative) or `error` (a problem body with the text `received`); `: ping` comments "
    "keep quiet streams open.",
    "content": {"text/event-stream": {"schema": event_schema(list(EVENTS)), "example": (
        'event: citations\ndata: {"citations":[{"n":1,"title":"Redis cache failover",...}]}\n\n'
        'event: delta\ndata: {"text":"Promote the replica [1]"}\n\n'
        'event: done\ndata: {"answer":{"answer":"Promote the replica [1]","mode":"llm",...}}'
        '\n\n')}},
}


def _meter(request: Request, answer: dict) -> None:
    """What usage records for this request: the passages cited, the model's tokens and cost."""
    request.state.results = len(answer.get("citations") or [])
    usage = answer.get("usage") or {}
    request.state.tokens_in = usage.get("tokens_in", 0)
    request.state.tokens_out = usage.get("tokens_out", 0)
    request.state.cost = usage.get("cost", 0.0)


def wants_events(request: Request, stream: bool) -> bool:
    return stream or "text/event-stream" in request.headers.get("accept", "")


@router.post("/answer", response_model=AnswerResponse, summary="Cited answer",
             responses={200: STREAM_DOC})
def answer(
    body: AnswerRequest, request: Request, who: Annotated[Identity, Depends(identity)]
):
    """An answer whose every sentence carries `[n]` markers resolving to `citations`.

    Extractive unless model providers are configured; if they all fail, the extractive answer
    comes back with `reason`. When the evidence is weak, `abstained` is true and the answer
    says nothing was found rather than guessing.
    """
    started = time.perf_counter()
    services = request.app.state.services
    if wants_events(request, body.stream):
        def encode(event) -> bytes:
            if event.event == "done":
                _meter(request, event.data["answer"])
                event.data["answer"]["took_ms"] = round((time.perf_counter() - started) * 1000,
                                                        2)
            return sse_bytes(event.event, event.data)

        events = services.answers.stream(body.question, who, _filters(body.filters))
        return event_response(relay(
            events, encode, keepalive=services.settings.sse_keepalive,
            on_error=lambda e: sse_bytes("error", error_problem(e))))
    result = services.answers.answer(body.question, who, _filters(body.filters))
    _meter(request, result.model_dump())
    return AnswerResponse(
        **dict(result), took_ms=round((time.perf_counter() - started) * 1000, 2)
    )
