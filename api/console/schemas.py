"""The operator console's response bodies (``GET /v1/admin/...``): the contract the admin page
reads, one model per shape. Fields may be added; none is renamed or removed, since the page is
built against these names. Times are ISO 8601 UTC strings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from citewise.api.schemas import ResponseBody

FeedbackStatus = Literal["open", "added", "dismissed"]
Window = Literal["24h", "7d", "30d"]


# Sources -----------------------------------------------------------------------------------------
class RunSummary(ResponseBody):
    """One ingest run, as the sources view and its history show it."""

    run_id: int
    status: str = Field(description="running, succeeded, partial (some documents failed), "
                        "failed or interrupted.")
    trigger: str = Field(description="api, schedule, cli...")
    started_at: str
    finished_at: str | None
    duration_s: float | None = Field(description="null while it runs.")
    documents: int = Field(description="Documents the run saw.")
    added: int
    updated: int
    deleted: int
    failed: int


class FailedDocument(ResponseBody):
    uri: str = Field(description="The document's id in its source (a path, a page id); "
                     "empty for a problem of the run beyond one document.")
    error: str
    hint: str = Field(description="What to do about it.")


class SourceStatus(ResponseBody):
    name: str
    kind: str = Field(description="The connector: folder, git, confluence...")
    declared: bool = Field(description="Declared in the config file (else only indexed).")
    documents: int
    chunks: int
    readers: list[str] = Field(description="Who may read its documents when a document does "
                               "not say so itself (the source's `readers`, else the "
                               "settings' `default_readers`); [] when not declared.")
    schedule: str | None = Field(description="When `citewise serve` ingests it (a cron "
                                 "expression); null: not scheduled.")
    last_success_at: str | None
    last_run: RunSummary | None
    failed_documents: list[FailedDocument] = Field(
        description="The documents its last run could not ingest, with the error and a hint.")
    history: list[RunSummary] = Field(description="Its last runs, oldest first (at most 30).")


class SourceStatusList(ResponseBody):
    sources: list[SourceStatus]


# Usage -------------------------------------------------------------------------------------------
class UsageFigures(ResponseBody):
    """What usage counts for a span of time or a group: the figures ``citewise usage`` gives,
    and p50/p95 latency from fixed buckets (``api/metering/latency.py``: each value is the
    upper bound of its bucket, at most 20% above the true one)."""

    requests: int
    errors: int = Field(description="Answered with a status of 400 or more.")
    denied: int = Field(description="Refused with 401, 403 or 429.")
    answers: int = Field(description="Questions answered (the answer routes).")
    abstentions: int = Field(description="Questions the service declined to answer.")
    cache_hits: int
    p50_ms: float | None = Field(description="null when no request in the span.")
    p95_ms: float | None
    tokens_in: int
    tokens_out: int
    cost: float


class UsagePoint(UsageFigures):
    at: str = Field(description="The bucket's start (an hour, or a day at 00:00 UTC).")


class UsageRow(ResponseBody):
    name: str = Field(description="The provider, route, key or principal; `(none)` for "
                      "requests without one (no key, no model).")
    requests: int
    errors: int
    denied: int
    p50_ms: float | None
    p95_ms: float | None
    tokens_in: int
    tokens_out: int
    cost: float
    cache_hits: int
    answers: int
    abstentions: int


class UsageTops(ResponseBody):
    provider: list[UsageRow]
    route: list[UsageRow]
    key: list[UsageRow]
    principal: list[UsageRow]


class UsageDashboard(ResponseBody):
    window: Window
    bucket: Literal["hour", "day"]
    since: str
    until: str
    series: list[UsagePoint] = Field(description="One point per bucket, zeros included: 24 "
                                     "hours, or 7 or 30 days.")
    totals: UsageFigures
    top: UsageTops = Field(description="The 20 with the most requests, per grouping.")


# Models ------------------------------------------------------------------------------------------
class ProviderStats(ResponseBody):
    name: str
    kind: str = Field(description="The provider's protocol: openai (any OpenAI-compatible "
                      "endpoint).")
    model: str
    breaker: Literal["closed", "open", "half_open"]
    requests: int = Field(description="Calls made to it by this replica since it started.")
    errors: int
    error_rate: float = Field(description="errors / requests; 0 with no requests.")
    ttft_p50_ms: float | None = Field(description="Time to first token of its streams, median "
                                      "of the last 1,000; null before its first stream.")
    failovers: int = Field(description="Calls that failed here and moved on to the next "
                           "provider (or gave up).")
    tokens_in: int
    tokens_out: int
    cost: float


class ModelsView(ResponseBody):
    providers: list[ProviderStats]
    replica: str = Field(description="The process these figures are from (host:pid): each "
                         "replica keeps its own, from its start.")


# Feedback ----------------------------------------------------------------------------------------
class CitationRef(ResponseBody):
    title: str
    uri: str = Field(description="A link to the document, or its path in its source.")
    locator: str | None = Field(description="Where in it: lines or a heading.")


class FeedbackItem(ResponseBody):
    id: int
    at: str
    principal: str
    helpful: bool
    question: str
    answer: str
    citations: list[CitationRef]
    comment: str | None
    right_document: str | None
    status: FeedbackStatus
    answer_id: str


class FeedbackDay(ResponseBody):
    day: str = Field(description="YYYY-MM-DD (UTC).")
    helpful: int
    not_helpful: int


class FeedbackTriage(ResponseBody):
    items: list[FeedbackItem]
    counts: list[FeedbackDay] = Field(description="The last 30 days, zeros included.")


class GoldenAdded(ResponseBody):
    id: int
    status: Literal["added"]
    entry: dict[str, Any] = Field(description="The golden-set entry, as `citewise eval --qa` "
                                  "reads it.")
    path: str = Field(description="The file it was appended to: <data dir>/golden/"
                      "feedback.jsonl.")


class Dismissed(ResponseBody):
    id: int
    status: Literal["dismissed"]
