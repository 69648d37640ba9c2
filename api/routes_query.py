"""Search and answers: the endpoints people and the Slack bot call."""

from __future__ import annotations

import threading
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from citewise.api.answering import Asker, Question
from citewise.api.auth import identity
from citewise.api.openapi import problems
from citewise.api.schemas import (
    AnswerRequest,
    AnswerResponse,
    Filters,
    SearchRequest,
    SearchResponse,
)
from citewise.api.sse import (
    error_problem,
    event_response,
    event_schema,
    relay,
    sse_bytes,
)
from citewise.retrieval.answering.stream import EVENTS
from citewise.types import Identity, SearchFilters

router = APIRouter(prefix="/v1", tags=["query"])


def _filters(f: Filters) -> SearchFilters:
    return SearchFilters(
        sources=f.sources, path_prefix=f.path_prefix, tags=f.tags, services=f.services
    )


def _search(request: Request, who: Identity, body: SearchRequest) -> Response:
    started = time.perf_counter()
    results = request.app.state.services.search.search(
        body.query, who, top_k=body.top_k, filters=_filters(body.filters), mode=body.mode
    )
    request.state.results = len(results)  # for usage
    found = SearchResponse(
        query=body.query,
        results=results,
        took_ms=round((time.perf_counter() - started) * 1000, 2),
    )
    # Serialized here, in the endpoint's thread, by pydantic's own JSON writer. Returned as the
    # model, FastAPI would validate it again against ``response_model`` (a second thread-pool
    # hop on a plain-function route) and then encode it: a search's busiest path paid for a
    # check of an object this line has just built. The OpenAPI schema still comes from
    # ``response_model``, and tests/api/test_openapi_fuzz.py checks every body against it.
    return Response(found.model_dump_json(), media_type="application/json")


@router.post("/search", response_model=SearchResponse, summary="Hybrid search")
def search_post(
    body: SearchRequest, request: Request, who: Annotated[Identity, Depends(identity)]
) -> Response:
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
) -> Response:
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


# What a question may be refused with besides the front door's refusals (the OpenAI door's
# too).
ANSWER_PROBLEMS = problems({
    403: "The caller lacks the answer scope, or a guardrail policy refused the question or "
         "its answer.",
    404: "No such conversation (or one that is not the caller's, or has expired).",
    409: "The conversation holds as many turns as one may (CITEWISE_CONVERSATION_MAX_TURNS)."})


def wants_events(request: Request, stream: bool) -> bool:
    return stream or "text/event-stream" in request.headers.get("accept", "")


def uses_cache(request: Request) -> bool:
    """``Cache-Control: no-cache`` (or ``no-store``) asks for a fresh answer."""
    value = request.headers.get("cache-control", "").lower()
    return "no-cache" not in value and "no-store" not in value


@router.post("/answer", response_model=AnswerResponse, summary="Cited answer",
             responses={200: STREAM_DOC, **ANSWER_PROBLEMS})
def answer(body: AnswerRequest, request: Request):
    """An answer whose every sentence carries `[n]` markers resolving to `citations`.

    Extractive unless model providers are configured; if they all fail, the extractive answer
    comes back with `reason`. When the evidence is weak, `abstained` is true and the answer
    says nothing was found rather than guessing. Every answer is a turn of a conversation
    (`conversation_id`: pass it back to ask a follow-up) and has an `answer_id` for feedback.
    A question close to one asked before by a caller who may read exactly the same is served
    from the cache (`X-Citewise-Cache: hit`); `Cache-Control: no-cache` asks for a fresh one.
    """
    started = time.perf_counter()
    answering = request.app.state.answering
    use_cache = uses_cache(request)
    question = Question(body.question, "/v1/answer", _filters(body.filters),
                        body.conversation_id, use_cache)
    if wants_events(request, body.stream):
        gone = threading.Event()  # the client went away: stop, and keep no turn
        events = answering.stream(Asker.of(request), question, gone)

        def encode(event) -> bytes:
            if event.event == "done":
                event.data["answer"]["took_ms"] = round((time.perf_counter() - started) * 1000,
                                                        2)
            return sse_bytes(event.event, event.data)

        return event_response(relay(
            events, encode, on_error=lambda e: sse_bytes("error", error_problem(e)),
            cancelled=gone, keepalive=request.app.state.services.settings.server.sse_keepalive))
    answered = answering.answer(Asker.of(request), question)
    reply = AnswerResponse(**dict(answered.answer), **answered.ids(),
                          took_ms=round((time.perf_counter() - started) * 1000, 2))
    # Serialized here rather than validated again by FastAPI (see ``_search``).
    sent = Response(reply.model_dump_json(), media_type="application/json")
    if request.app.state.services.answers.cache is not None:
        sent.headers["X-Citewise-Cache"] = "hit" if answered.answer.cached else (
            "miss" if use_cache else "bypass")
    return sent
