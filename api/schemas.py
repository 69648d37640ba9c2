"""Request and response bodies of the HTTP API, with examples for the OpenAPI docs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from citewise.retrieval.answering import Answer
from citewise.retrieval.search import SearchResult


# Request bodies are strict: "5" is not a number and "yes" is not a boolean. A client that sends
# them has a bug worth hearing about, and loose coercion hides which field it was.
class Filters(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    sources: list[str] = Field(default_factory=list, description="Source names (any of).")
    path_prefix: str | None = Field(
        default=None, description="Folder inside file sources, e.g. 'alerts/etcd'."
    )
    tags: list[str] = Field(default_factory=list, description="Document tags (any of).")
    services: list[str] = Field(
        default_factory=list, description="The `service` of runbooks (any of)."
    )


class SearchRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "query": "postgres replica is lagging behind the primary",
                    "top_k": 5,
                    "filters": {"sources": ["runbooks"]},
                }
            ]
        },
    )

    query: str = Field(min_length=1, max_length=2000, description="What to look for.")
    top_k: int = Field(default=10, ge=1, le=100, description="How many chunks to return.")
    filters: Filters = Field(default_factory=Filters)
    mode: Literal["hybrid", "dense", "sparse"] = Field(
        default="hybrid", description="hybrid (default), dense only or BM25 only."
    )


class SearchResponse(BaseModel):
    query: str
    results: list[SearchResult]
    took_ms: float


class AnswerRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"question": "How do I fail over the Redis cache?"}]
        },
    )

    question: str = Field(min_length=1, max_length=2000)
    filters: Filters = Field(default_factory=Filters)
    conversation_id: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{32}$",
        description="Continue this conversation (a follow-up such as \"and how do I roll it "
        "back?\" is understood from its earlier turns); leave out to start one.")
    stream: bool = Field(default=False, description="Answer with server-sent events "
                         "(citations, delta, block, done, error); so does "
                         "`Accept: text/event-stream`.")


class AnswerResponse(Answer):
    took_ms: float
    conversation_id: str = Field(description="The conversation this answer is a turn of.")
    answer_id: str = Field(description="For feedback: POST /v1/answers/{answer_id}/feedback.")
    question: str = Field(description="The question as searched: a follow-up rewritten to "
                          "stand alone, else as asked.")
    rewritten_by: str = Field(description="asked (it stood alone), rule or model.")


class IngestRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"source": "runbooks"}, {"all": True}]},
    )

    source: str | None = Field(default=None, max_length=63,
                               description="A source declared in the config.")
    all: bool = Field(default=False, description="Every declared source (the nightly cron).")
    path: str | None = Field(
        default=None, max_length=4096,
        description="A folder on the server's disk: only under CITEWISE_INGEST_ALLOWED_PATHS, "
        "or from the operator's own `citewise ingest PATH` on the server's machine.",
    )
    name: str | None = Field(default=None, max_length=63, description="Source name for `path`.")
    readers: list[str] | None = Field(
        default=None, max_length=100,
        description="Who may read the documents of `path` that name no readers themselves "
        "(default: the server's CITEWISE_DEFAULT_READERS).",
    )
    force: bool = Field(
        default=False,
        description="Re-process unchanged documents and allow deleting over half of a source.",
    )

    @field_validator("path")
    @classmethod
    def _no_nul(cls, v: str | None) -> str | None:
        if v is not None and "\0" in v:
            raise ValueError("the path contains a NUL byte")
        return v


class ResponseBody(BaseModel):
    """A response body the route builds from a service's dict or record. Every key the
    service returns must be a field: the response model would silently drop one that is not,
    so an unknown key fails the response (a 500 in tests) instead."""

    model_config = ConfigDict(extra="forbid")
