"""citewise as an OpenAI-compatible model: ``/v1/chat/completions`` and ``/v1/models``.

Every chat front end, IDE assistant and agent framework speaks this protocol, so pointing one at
citewise (base URL ``https://citewise.example/v1``, model ``citewise``, an API key) gives it
cited answers without a plugin. The model answers the last user message from the knowledge
base the caller may read; earlier messages are the conversation's context. Citations come
twice: as Markdown reference links under the text (``[1]`` in the text becomes a link in any
Markdown renderer) and as a ``citations`` field, which the protocol leaves room for.

Written from the API reference (platform.openai.com/docs/api-reference/chat/create, /streaming
and /models): ``chat.completion`` and ``chat.completion.chunk`` objects, the first chunk
carrying ``role``, the last ``finish_reason``, a ``choices: []`` chunk with ``usage`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from citewise.api.answering import Asker, Carried, Question
from citewise.api.auth import identity
from citewise.api.openapi import problems
from citewise.api.routes_query import ANSWER_PROBLEMS, uses_cache
from citewise.api.sse import (
    error_problem,
    event_response,
    event_schema,
    relay,
    sse_bytes,
)
from citewise.errors import InvalidRequestError, NotFoundError
from citewise.retrieval.answering import Answer, Citation
from citewise.retrieval.answering.followup import Previous
from citewise.types import Identity

router = APIRouter(prefix="/v1", tags=["openai"])

MODEL_ID = "citewise"
CREATED = 1764547200  # 2025-12-01, when citewise first answered as a model
HISTORY_TURNS = 10
# The title of [1] in one of our own answers: `[1]: <url> "Title > Heading, lines 3-9"`.
_FIRST_REFERENCE = re.compile(r'^\[1\]: \S+ "([^">]+?)(?: > [^"]*)?(?:, lines [^"]*)?"$', re.M)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = Field(
        default=None, description="Text, or content parts of which the text parts are read.")

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            return "\n".join(str(p.get("text", "")) for p in self.content
                             if p.get("type") == "text")
        return ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """The protocol's request. Sampling fields (temperature, top_p, max_tokens, stop, seed,
    user...) are accepted and ignored: the answer comes from the knowledge base."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{
        "model": "citewise", "messages": [
            {"role": "user", "content": "How do I fail over the Redis cache?"}]}]})

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=200)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1, description="Only one choice is generated.")


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ChatUsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: ChatUsageOut
    citations: list[Citation] = Field(description="What the [n] markers point at.")
    citewise: dict = Field(description="The answer's mode, kind, evidence, abstention, reason "
                           "and provider as /v1/answer reports them, and its conversation_id, "
                           "answer_id (for feedback), the question as searched and cached.")


def _card() -> ModelCard:
    return ModelCard(id=MODEL_ID, created=CREATED, owned_by="citewise")


@router.get("/models", response_model=ModelList, summary="Models (OpenAI protocol)")
def list_models(who: Annotated[Identity, Depends(identity)]) -> ModelList:
    """The one model served: `citewise`, which answers from the knowledge base."""
    return ModelList(data=[_card()])


@router.get("/models/{model_id}", response_model=ModelCard, summary="One model (OpenAI "
            "protocol)", responses=problems({404: "Not a model served here (the one model "
                                                  "is `citewise`)."}))
def get_model(model_id: str, who: Annotated[Identity, Depends(identity)]) -> ModelCard:
    if model_id != MODEL_ID:
        raise NotFoundError(f"model '{model_id}' is not served here",
                            hint=f"the model is '{MODEL_ID}'")
    return _card()


def _conversation(body: ChatCompletionRequest, use_cache: bool) -> Question:
    """The question to answer and the turns before it. The message history is the
    conversation's state in this protocol; it is also kept as a conversation of the caller's,
    named by the caller and the first question (``Carried.named``), for listing and
    feedback."""
    if body.model != MODEL_ID:
        raise NotFoundError(f"model '{body.model}' is not served here",
                            hint=f"ask for model '{MODEL_ID}'")
    turns = [m for m in body.messages if m.role in ("user", "assistant")]
    if not turns or turns[-1].role != "user" or not turns[-1].text().strip():
        raise InvalidRequestError("the last message must be the user's question, with text",
                                  hint="end messages with {\"role\": \"user\", \"content\": ...}")
    question = turns[-1].text().strip()[-2000:]
    history = [{"role": m.role, "content": m.text()} for m in turns[:-1]][-HISTORY_TURNS:]
    earlier = [t["content"] for t in history if t["role"] == "user"]
    previous = None
    if earlier:
        replies = [t["content"] for t in history if t["role"] == "assistant"]
        title = _FIRST_REFERENCE.search(replies[-1]) if replies else None
        previous = Previous(earlier[-1].strip()[-2000:], title.group(1) if title else None)
    first = next(m.text() for m in turns if m.role == "user")
    return Question(question, "/v1/chat/completions", use_cache=use_cache,
                    carried=Carried(first, history, previous))


def references(citations: list[Citation], base_url: str) -> str:
    """Markdown reference definitions that turn each [n] of the text into a link."""
    lines = []
    for c in citations:
        url = c.url or f"{base_url}v1/documents/{c.document_id}" + (
            f"#L{c.start_line}-L{c.end_line}" if c.start_line else "")
        label = c.title + (f" > {c.heading}" if c.heading else "")
        if c.start_line:
            label += f", lines {c.start_line}-{c.end_line}"
        lines.append(f"[{c.n}]: {url} \"{label.replace(chr(34), chr(39))}\"")
    return "\n".join(lines)


def _content(answer: Answer, base_url: str) -> str:
    refs = references(answer.citations, base_url) if not answer.abstained else ""
    return answer.answer + (f"\n\n{refs}" if refs else "")


def _summary(answer: Answer) -> dict:
    return {"mode": answer.mode, "kind": answer.kind, "abstained": answer.abstained,
            "evidence": round(answer.evidence, 4), "reason": answer.reason,
            "provider": answer.provider}


def _kept(answer: Answer, ids: dict) -> dict:
    """The ``citewise`` field: the answer's summary and the conversation turn it was kept as."""
    return {**_summary(answer), "conversation_id": ids["conversation_id"],
            "answer_id": ids["answer_id"], "question": ids["question"],
            "rewritten_by": ids["rewritten_by"], "cached": answer.cached}


def _usage(answer: Answer) -> ChatUsageOut:
    u = answer.usage
    tin, tout = (u.tokens_in, u.tokens_out) if u else (0, 0)
    return ChatUsageOut(prompt_tokens=tin, completion_tokens=tout, total_tokens=tin + tout)


STREAM_DOC = {"description": "With `stream: true`: `chat.completion.chunk` events, then "
              "`data: [DONE]`.", "content": {"text/event-stream": {"schema": event_schema(None)}}}


@router.post("/chat/completions", response_model=ChatCompletion,
             summary="Chat completion (OpenAI protocol)",
             responses={200: STREAM_DOC, **ANSWER_PROBLEMS,
                        **problems({404: "Not a model served here (ask for `citewise`)."})})
def chat_completions(body: ChatCompletionRequest, request: Request):
    """Answers the last user message from the knowledge base, with citations as numbered
    Markdown links and as a `citations` field. Streams when `stream` is true."""
    asker = Asker.of(request)
    question = _conversation(body, uses_cache(request))
    answering = request.app.state.answering
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    base_url = str(request.base_url)

    if not body.stream:
        answered = answering.answer(asker, question)
        answer = answered.answer
        return ChatCompletion(
            id=completion_id, created=created, model=MODEL_ID,
            choices=[Choice(index=0, message=AssistantMessage(content=_content(answer,
                                                                                 base_url)),
                            finish_reason="stop")],
            usage=_usage(answer), citations=answer.citations,
            citewise=_kept(answer, answered.ids()))

    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    streamed: list[str] = []

    def chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
        return sse_bytes(None, {"id": completion_id, "object": "chat.completion.chunk",
                                "created": created, "model": MODEL_ID,
                                "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish}], **extra})

    def encode(event) -> bytes | None:
        if event.event == "citations":
            return chunk({"role": "assistant", "content": ""})
        if event.event == "delta":
            streamed.append(event.data["text"])
            return chunk({"content": event.data["text"]})
        if event.event == "done":
            answer = Answer.model_validate(event.data["answer"])
            sent = "".join(streamed).strip()
            tail = ""
            if answer.answer.strip() != sent:  # a fallback replaced what was streamed
                tail = answer.answer if not sent else f"\n\n---\n\n{answer.answer}"
            refs = references(answer.citations, base_url) if not answer.abstained else ""
            if refs:
                tail += f"\n\n{refs}"
            out = chunk({"content": tail}) if tail else b""
            out += chunk({}, "stop", citations=[c.model_dump() for c in answer.citations],
                         citewise=_kept(answer, event.data["answer"]))
            if include_usage:
                out += sse_bytes(None, {"id": completion_id, "object": "chat.completion.chunk",
                                        "created": created, "model": MODEL_ID, "choices": [],
                                        "usage": _usage(answer).model_dump()})
            return out + sse_bytes(None, "[DONE]")
        if event.event == "error":
            return _error_chunk(event.data) + sse_bytes(None, "[DONE]")
        return None  # block events have no place in this protocol

    def on_error(e: BaseException) -> bytes:
        return _error_chunk(error_problem(e)) + sse_bytes(None, "[DONE]")

    gone = threading.Event()  # the client went away: stop, and keep no turn
    return event_response(relay(answering.stream(asker, question, gone), encode,
                                on_error=on_error, cancelled=gone,
                                keepalive=request.app.state.services.settings.server.sse_keepalive))


def _error_chunk(problem: dict) -> bytes:
    """An error in the stream, as OpenAI sends one (the client raises it as an APIError)."""
    return sse_bytes(None, {"error": {"message": problem.get("detail", "error"),
                                      "type": problem.get("type", "error"),
                                      "code": problem.get("status"),
                                      "received": problem.get("received")}})
