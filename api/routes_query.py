"""Search and answers: the endpoints people and the Slack bot call."""

from __future__ import annotations

import threading
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from citewise.api.auth import caller, identity
from citewise.api.conversations import Viewer, history_of, previous_of
from citewise.api.guardrails import Guarded
from citewise.api.openapi import problem_response
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
    until,
)
from citewise.errors import GuardrailBlocked
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.followup import standalone
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


def meter(request: Request, answer: dict) -> None:
    """What usage records for this request: the passages cited, the model's tokens and cost,
    or for an answer from the cache, the tokens it saved (its usage is the original call's)."""
    request.state.results = len(answer.get("citations") or [])
    usage = answer.get("usage") or {}
    tokens = (usage.get("tokens_in", 0), usage.get("tokens_out", 0), usage.get("cost", 0.0))
    if answer.get("cached"):
        request.state.cache_hits = 1
        request.state.saved_tokens = tokens[0] + tokens[1]
        tokens = (0, 0, 0.0)
    request.state.tokens_in, request.state.tokens_out, request.state.cost = tokens


def wants_events(request: Request, stream: bool) -> bool:
    return stream or "text/event-stream" in request.headers.get("accept", "")


def uses_cache(request: Request) -> bool:
    """``Cache-Control: no-cache`` (or ``no-store``) asks for a fresh answer."""
    value = request.headers.get("cache-control", "").lower()
    return "no-cache" not in value and "no-store" not in value


@router.post("/answer", response_model=AnswerResponse, summary="Cited answer",
             responses={200: STREAM_DOC, 404: problem_response(
                 "No such conversation (or one that is not the caller's, or has expired)."),
                 403: problem_response("The caller lacks the answer scope, or a guardrail "
                                       "policy refused the question or its answer.")})
def answer(
    body: AnswerRequest, request: Request, response: Response,
    who: Annotated[Identity, Depends(identity)],
):
    """An answer whose every sentence carries `[n]` markers resolving to `citations`.

    Extractive unless model providers are configured; if they all fail, the extractive answer
    comes back with `reason`. When the evidence is weak, `abstained` is true and the answer
    says nothing was found rather than guessing. Every answer is a turn of a conversation
    (`conversation_id`: pass it back to ask a follow-up) and has an `answer_id` for feedback.
    A question close to one asked before by a caller who may read exactly the same is served
    from the cache (`X-Citewise-Cache: hit`); `Cache-Control: no-cache` asks for a fresh one.
    """
    started = time.perf_counter()
    services = request.app.state.services
    conversations = services.conversations
    owner = Viewer.of(caller(request))
    use_cache = uses_cache(request)
    guard = Guarded(services.guardrails, "/v1/answer")
    if body.conversation_id:
        conversations.check(body.conversation_id, owner)
    try:
        guard.question(body.question)
    except GuardrailBlocked:
        report(request, guard)
        raise
    conversation_id = body.conversation_id or conversations.start(owner, body.question)

    def ask(turns) -> tuple[str, str, list[dict]]:
        history = history_of(turns)
        question, how = standalone(body.question, previous_of(turns),
                                   gateway=services.gateway, history=history)
        if question != body.question:
            guard.question(question)
        return question, how, history

    def ids(answer: Answer, question: str, how: str) -> dict:
        answer_id = conversations.record(owner, body.question, question, answer,
                                         conversation_id)
        return {"conversation_id": conversation_id, "answer_id": answer_id,
                "question": question, "rewritten_by": how}

    if wants_events(request, body.stream):
        gone = threading.Event()  # the client went away: stop, and keep no turn

        def events():
            with conversations.turn(conversation_id, owner) as turns:
                question, how, history = ask(turns)
                for event in guard.events(until(gone, services.answers.stream(
                        question, who, _filters(body.filters), history=history,
                        use_cache=use_cache, injection=guard.injection))):
                    if gone.is_set():
                        return
                    if event.event == "done":
                        done = Answer.model_validate(event.data["answer"])
                        event.data["answer"].update(ids(done, question, how))
                    yield event

        def encode(event) -> bytes:
            if event.event == "done":
                meter(request, event.data["answer"])
                event.data["answer"]["took_ms"] = round((time.perf_counter() - started) * 1000,
                                                        2)
            if event.event in ("done", "error"):
                report(request, guard)
            return sse_bytes(event.event, event.data)

        def on_error(e: BaseException) -> bytes:
            report(request, guard)
            return sse_bytes("error", error_problem(e))

        return event_response(relay(events(), encode, on_error=on_error, cancelled=gone,
                                    keepalive=services.settings.sse_keepalive))
    try:
        with conversations.turn(conversation_id, owner) as turns:
            question, how, history = ask(turns)
            result = guard.answer(services.answers.answer(
                question, who, _filters(body.filters), history=history, use_cache=use_cache,
                injection=guard.injection))
            extra = ids(result, question, how)
    finally:
        report(request, guard)
    meter(request, result.model_dump())
    if services.answers.cache is not None:
        response.headers["X-Citewise-Cache"] = "hit" if result.cached else (
            "miss" if use_cache else "bypass")
    return AnswerResponse(
        **dict(result), **extra, took_ms=round((time.perf_counter() - started) * 1000, 2)
    )


def report(request: Request, guard: Guarded) -> None:
    """The request's guardrail decisions to the audit log and metrics (each once)."""
    if guard.decisions:
        guard.report(request.app.state.door.audit, caller(request).principal,
                     getattr(request.state, "request_id", None))
