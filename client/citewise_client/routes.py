"""The routes of citewise's HTTP API this client calls, each written once: method, path, the
scope a key needs, what it takes and what it answers; and the headers that name the user a key
acts for.

``CitewiseClient`` sends nothing but these, and ``tests/client/test_openapi.py`` checks each
against the server's OpenAPI document: the path and method, the scope, the success status, the
fields sent and the fields read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from citewise_client.models import (
    Answer,
    AnswerRequest,
    Document,
    DocumentQuery,
    Feedback,
    FeedbackRequest,
    Health,
    IngestJob,
    IngestRequest,
    Reply,
    Request,
    SearchRequest,
    SearchResponse,
    SourceList,
    UsageQuery,
    UsageReport,
    Verification,
    VerifyRequest,
)

R = TypeVar("R", bound=Reply)


@dataclass(frozen=True)
class Route(Generic[R]):
    method: Literal["GET", "POST"]
    path: str  # as the OpenAPI document writes it, parameters in braces
    what: str  # how messages name it: "the search request", "not a citewise search response"
    scope: str | None  # the scope the server's front door requires of a key
    reply: type[R]
    body: type[Request] | None = None  # the JSON body
    query: type[Request] | None = None  # the query parameters
    status: int = 200  # the success status the route documents

    def url_path(self, **parameters: str) -> str:
        """The path with its parameters filled in (escaped: an id is never a path)."""
        return self.path.format(**{k: quote(v, safe="") for k, v in parameters.items()})


SEARCH = Route("POST", "/v1/search", "search", "search", SearchResponse, body=SearchRequest)
ANSWER = Route("POST", "/v1/answer", "answer", "answer", Answer, body=AnswerRequest)
FEEDBACK = Route("POST", "/v1/answers/{answer_id}/feedback", "feedback", "answer", Feedback,
                 body=FeedbackRequest, status=201)
DOCUMENT = Route("GET", "/v1/documents/{document_id}", "document", "search", Document,
                 query=DocumentQuery)
SOURCES = Route("GET", "/v1/sources", "sources", "search", SourceList)
START_INGEST = Route("POST", "/v1/ingest/jobs", "ingest job", "ingest", IngestJob,
                     body=IngestRequest, status=202)
INGEST_JOB = Route("GET", "/v1/ingest/jobs/{job_id}", "ingest job", "ingest", IngestJob)
VERIFY = Route("POST", "/v1/ingest/verify", "verify", "ingest", Verification,
               body=VerifyRequest)
USAGE = Route("GET", "/v1/usage", "usage", "admin", UsageReport, query=UsageQuery)
HEALTH = Route("GET", "/healthz", "health", None, Health)

ROUTES: tuple[Route[Any], ...] = (SEARCH, ANSWER, FEEDBACK, DOCUMENT, SOURCES, START_INGEST,
                                  INGEST_JOB, VERIFY, USAGE, HEALTH)


# A key allowed to assert identity (the Slack bot's) names the person it acts for; citewise
# then filters by that person's readers as if they had asked.
USER_HEADER = "X-Citewise-User"
GROUPS_HEADER = "X-Citewise-Groups"


@dataclass(frozen=True)
class ActingFor:
    """The end user a request is made for: their id (an email) and their groups."""

    user: str | None = None
    groups: Sequence[str] = ()

    def headers(self) -> dict[str, str]:
        headers = {}
        if self.user:
            headers[USER_HEADER] = self.user
        if self.groups:
            headers[GROUPS_HEADER] = ",".join(self.groups)
        return headers
