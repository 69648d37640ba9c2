"""Request and response bodies of the HTTP API, with examples for the OpenAPI docs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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


class SearchHit(BaseModel):
    chunk_id: str
    document_id: str
    source: str = Field(description="The source's name.")
    path: str | None = Field(description="Path relative to the source root (file sources).")
    url: str | None = Field(description="Link to the document (and heading), when known.")
    title: str
    heading: str = Field(description="Heading path inside the document.")
    anchor: str | None
    text: str
    score: float
    start_line: int | None
    end_line: int | None
    service: str | None
    tags: list[str] | None
    symbol: str | None = Field(default=None, description="Code chunks: the function or class.")
    metadata: dict | None = Field(
        default=None, description="What the source knows: repository, language, last commit..."
    )


class SearchResponse(BaseModel):
    query: str
    results: list[SearchHit]
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


class CitationOut(BaseModel):
    n: int = Field(description="The number used as [n] in the answer.")
    document_id: str
    title: str
    heading: str
    quote: str = Field(description="The passage text the answer quotes.")
    source: str
    path: str | None
    url: str | None
    start_line: int | None
    end_line: int | None
    symbol: str | None = None
    score: float


class AnswerResponse(BaseModel):
    answer: str
    citations: list[CitationOut]
    abstained: bool = Field(description="True when the evidence was too weak to answer.")
    mode: str = Field(description="extractive or llm")
    evidence: float = Field(description="Similarity of the best passage to the question.")
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
