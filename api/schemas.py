"""Request and response bodies of the HTTP API, with examples for the OpenAPI docs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from citewise.retrieval.answer import Answer
from citewise.retrieval.search import SearchResult


class Filters(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
        json_schema_extra={
            "examples": [{"question": "How do I fail over the Redis cache?"}]
        },
    )

    question: str = Field(min_length=1, max_length=2000)
    filters: Filters = Field(default_factory=Filters)


class AnswerResponse(Answer):
    took_ms: float


class IngestRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"source": "runbooks"}, {"all": True}]},
    )

    source: str | None = Field(default=None, description="A source declared in the config.")
    all: bool = Field(default=False, description="Every declared source (the nightly cron).")
    path: str | None = Field(
        default=None, description="A folder on the server's disk (loopback callers only)."
    )
    name: str | None = Field(default=None, description="Source name for `path`.")
    force: bool = Field(
        default=False,
        description="Re-process unchanged documents and allow deleting over half of a source.",
    )
