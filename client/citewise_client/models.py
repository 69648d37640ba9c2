"""The bodies this client sends and reads, typed.

Request bodies carry every field the client may send; the server checks them (a ``top_k`` of
500 comes back as ``InvalidRequest`` naming the field, rather than failing here).

Response bodies (``Reply``) declare the fields this client and its users read, with their
types; whatever else the server sends is kept as it came, so a reply dumped again
(``model_dump()``) is the server's JSON: same keys, same order, nothing added. That is what the
relays need (``citewise ask --json``, an MCP tool's result). ``tests/client/test_openapi.py``
checks every declared field against the route's response schema in the OpenAPI document.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Mode = Literal["hybrid", "dense", "sparse"]


# Requests ---------------------------------------------------------------------------------------


class Request(BaseModel):
    """A request body or query: unknown fields are a bug of the caller, refused here."""

    model_config = ConfigDict(extra="forbid")

    def sent(self) -> dict[str, Any]:
        """As JSON: fields left at None are left out (the server's default is the same)."""
        return self.model_dump(mode="json", exclude_none=True)


class Filters(Request):
    """Narrow a search or an answer; each list matches any of its values, and different
    filters combine."""

    sources: list[str] = Field(default_factory=list)
    path_prefix: str | None = None
    tags: list[str] = Field(default_factory=list)
    services: list[str] = Field(default_factory=list)


class SearchRequest(Request):
    query: str
    top_k: int = 10
    mode: Mode = "hybrid"
    filters: Filters = Field(default_factory=Filters)


class AnswerRequest(Request):
    question: str
    filters: Filters = Field(default_factory=Filters)
    conversation_id: str | None = None


class FeedbackRequest(Request):
    helpful: bool
    comment: str | None = None
    wrong_citation: int | None = None
    right_document: str | None = None


class DocumentQuery(Request):
    include_content: bool = False


class IngestRequest(Request):
    """One declared source, every declared source (``all``), or a folder on the server's disk
    (``path``, with ``name`` and ``readers``)."""

    source: str | None = None
    all: bool = False
    path: str | None = None
    name: str | None = None
    readers: list[str] | None = None
    force: bool = False


class VerifyRequest(Request):
    repair: bool = False
    force: bool = False


class UsageQuery(Request):
    since: str | None = None
    until: str | None = None
    group_by: str = "principal"  # principal, key, route or day


# Replies ----------------------------------------------------------------------------------------


class Reply(BaseModel):
    """A response body: the declared fields typed, every other field kept as sent."""

    model_config = ConfigDict(extra="allow")

    _sent: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_keys(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        reply = handler(data)
        if isinstance(data, dict):
            reply._sent = tuple(data)
        return reply

    @model_serializer(mode="wrap")
    def _as_sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Declared fields come first in pydantic's dump and defaults are added: put the keys
        # back in the server's order, and leave out what it did not send.
        dumped: dict[str, Any] = handler(self)
        if not self._sent:
            return dumped
        return {key: dumped[key] for key in self._sent if key in dumped}


class SearchHit(Reply):
    """One passage the server found, with everything needed to cite it."""

    chunk_id: str
    document_id: str
    source: str
    title: str
    heading: str
    text: str
    score: float = 0.0
    path: str | None = None
    url: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = None
    service: str | None = None
    tags: list[str] = Field(default_factory=list)

    @property
    def citation(self) -> str:
        """Where the passage is, ready to print: ``runbooks/redis-cache-failover.md:33-40
        (Diagnosis)`` for a file (source, path, lines, heading); ``<url> (Page title >
        Heading)`` for a page that has no path, such as a Confluence page."""
        if self.path:
            where = f"{self.source}/{self.path}"
            if self.start_line is not None:
                end = self.end_line if self.end_line is not None else self.start_line
                where += f":{self.start_line}" + (f"-{end}" if end != self.start_line else "")
            label = self.heading
        else:
            where = self.url or self.title
            names = [self.title] if where != self.title else []
            if self.heading and self.heading != self.title:
                names.append(self.heading.removeprefix(f"{self.title} > "))
            label = " > ".join(names)
        return f"{where} ({label})" if label else where


class SearchResponse(Reply):
    query: str
    results: list[SearchHit]
    took_ms: float


class Citation(Reply):
    """A passage an answer rests on; ``[n]`` in the answer points at it."""

    n: int
    document_id: str
    source: str
    title: str
    heading: str
    path: str | None = None
    url: str | None = None
    start_line: int | None = None
    end_line: int | None = None


class CodeSnippet(Reply):
    language: str | None = None
    text: str


class Step(Reply):
    text: str
    code: list[CodeSnippet] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class AnswerBlock(Reply):
    """The answer as a front end renders it: a paragraph, steps, code or a fact."""

    type: Literal["paragraph", "steps", "code", "fact"]
    text: str | None = None
    language: str | None = None
    steps: list[Step] | None = None
    ordered: bool = True
    start: int = 1
    label: str | None = None
    value: str | None = None
    citations: list[int] = Field(default_factory=list)


class Answer(Reply):
    """A cited answer, and the conversation it is a turn of."""

    answer: str
    blocks: list[AnswerBlock] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    abstained: bool = False
    reason: str | None = None
    conversation_id: str
    answer_id: str


class Feedback(Reply):
    answer_id: str
    helpful: bool


class Chunk(Reply):
    heading: str
    text: str


class Document(Reply):
    """A document the caller may read; the server leaves out what it does not know."""

    id: str
    source: str
    title: str
    chunks: list[Chunk] = Field(default_factory=list)
    content: str | None = None


class Source(Reply):
    name: str
    type: str
    declared: bool
    documents: int
    chunks: int
    last_success_at: str | None = None


class SourceList(Reply):
    sources: list[Source]


class DocumentFailure(Reply):
    external_id: str
    error: str


class IngestReport(Reply):
    """One source's run within an ingest job."""

    run_id: int
    source: str
    status: str
    summary: str
    errors: list[DocumentFailure] = Field(default_factory=list)
    run_errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class IngestJob(Reply):
    """An ingest job: ``queued`` or ``running`` until it is ``done`` or ``failed``."""

    id: str
    status: str
    current: str | None = None
    counts: dict[str, Any] = Field(default_factory=dict)
    reports: list[IngestReport] = Field(default_factory=list)
    message: str | None = None

    @property
    def finished(self) -> bool:
        return self.status not in ("queued", "running")


class Verification(Reply):
    """The index and the blob store checked against the catalog (and repaired)."""

    ok: bool
    problems: list[str]


class UsageReport(Reply):
    since: str
    group_by: str
    rows: list[dict[str, Any]]


class Health(Reply):
    status: str
