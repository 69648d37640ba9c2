"""``CitewiseClient``: citewise's HTTP API as typed calls.

    from citewise_client import CitewiseClient

    with CitewiseClient.from_environment() as citewise:  # $CITEWISE_URL, $CITEWISE_API_KEY
        for hit in citewise.search("redis failover", top_k=3).results:
            print(hit.score, hit.citation)

Every call is one of ``routes.ROUTES``, and every failure a ``CitewiseClientError`` of its
kind (``errors.py``). The sync calls share one pool of connections (``close()`` ends it; a later
call opens another); each ``asearch`` opens its own, since an httpx.AsyncClient belongs to the
event loop that made it and a retriever may be called from several (``asyncio.run`` per call,
notebooks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from citewise_client.environment import URL_VARIABLE, key_from_environment, url_from_environment
from citewise_client.errors import CitewiseClientError, refusal, unexpected, unreachable
from citewise_client.models import (
    Answer,
    AnswerRequest,
    Document,
    DocumentQuery,
    Feedback,
    FeedbackRequest,
    Filters,
    Health,
    IngestJob,
    IngestRequest,
    Mode,
    Request,
    SearchRequest,
    SearchResponse,
    Source,
    UsageQuery,
    UsageReport,
    Verification,
    VerifyRequest,
)
from citewise_client.routes import (
    ANSWER,
    DOCUMENT,
    FEEDBACK,
    HEALTH,
    INGEST_JOB,
    SEARCH,
    SOURCES,
    START_INGEST,
    USAGE,
    VERIFY,
    ActingFor,
    R,
    Route,
)


@dataclass(frozen=True)
class _Prepared:
    """One request, ready for the sync or the async HTTP client."""

    method: str
    path: str
    url: str  # for messages: the base URL and the path, without the query
    json: dict[str, Any] | None
    params: dict[str, Any] | None
    headers: dict[str, str]


class CitewiseClient:
    """Calls one citewise server as one API key (or none: a server in local mode).

    ``headers`` are sent with every request (a proxy's own, the operator token of the server's
    machine); ``timeout`` is in seconds, None for no limit.
    """

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 timeout: float | None = 30.0, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout
        self._transport = transport
        # Made here, not on first use: LangChain's batch calls search from several threads.
        self._http: httpx.Client | None = self._sync_client()

    @classmethod
    def from_environment(cls, base_url: str | None = None, api_key: str | None = None, *,
                         timeout: float | None = 30.0, headers: Mapping[str, str] | None = None,
                         transport: httpx.BaseTransport | None = None) -> CitewiseClient:
        """A client of ``base_url`` (else ``$CITEWISE_URL``) with ``api_key`` (else
        ``$CITEWISE_API_KEY``; an empty one sends none)."""
        url = url_from_environment(base_url)
        if url is None:
            raise CitewiseClientError(
                f"no citewise server to call: pass base_url or set ${URL_VARIABLE} "
                "(e.g. http://127.0.0.1:8000)", url="")
        return cls(url, key_from_environment(api_key), timeout=timeout, headers=headers,
                   transport=transport)

    # The API ---------------------------------------------------------------------------------

    def search(self, query: str, *, top_k: int = 10, mode: Mode = "hybrid",
               filters: Filters | None = None,
               acting_for: ActingFor | None = None) -> SearchResponse:
        """The passages that best match ``query``, best first (``POST /v1/search``)."""
        body = SearchRequest(query=query, top_k=top_k, mode=mode, filters=filters or Filters())
        return self._call(SEARCH, body=body, acting_for=acting_for)

    async def asearch(self, query: str, *, top_k: int = 10, mode: Mode = "hybrid",
                      filters: Filters | None = None,
                      acting_for: ActingFor | None = None) -> SearchResponse:
        """``search`` without blocking the event loop."""
        body = SearchRequest(query=query, top_k=top_k, mode=mode, filters=filters or Filters())
        prepared = self._prepare(SEARCH, body=body, acting_for=acting_for)
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers,
                                     timeout=self.timeout) as http:
            try:
                response = await http.request(prepared.method, prepared.path,
                                              json=prepared.json, params=prepared.params,
                                              headers=prepared.headers)
            except httpx.TransportError as e:
                raise unreachable(e, base_url=self.base_url, timeout=self.timeout,
                                  url=prepared.url) from e
        return _read(SEARCH, response, prepared.url)

    def answer(self, question: str, *, conversation_id: str | None = None,
               filters: Filters | None = None, acting_for: ActingFor | None = None) -> Answer:
        """A cited answer (``POST /v1/answer``); pass the ``conversation_id`` of an earlier
        answer to ask a follow-up."""
        body = AnswerRequest(question=question, filters=filters or Filters(),
                             conversation_id=conversation_id)
        return self._call(ANSWER, body=body, acting_for=acting_for)

    def feedback(self, answer_id: str, *, helpful: bool, comment: str | None = None,
                 wrong_citation: int | None = None, right_document: str | None = None,
                 acting_for: ActingFor | None = None) -> Feedback:
        """What the asker thought of an answer; ``wrong_citation`` is the ``[n]`` that
        points at the wrong place, ``right_document`` the document that held the answer
        (a path, ``<source>/<path>`` or a link)."""
        body = FeedbackRequest(helpful=helpful, comment=comment, wrong_citation=wrong_citation,
                               right_document=right_document)
        return self._call(FEEDBACK, body=body, path={"answer_id": answer_id},
                          acting_for=acting_for)

    def document(self, document_id: str, *, include_content: bool = False) -> Document:
        """A document the key may read, with its chunks (and its text, if asked)."""
        return self._call(DOCUMENT, query=DocumentQuery(include_content=include_content),
                          path={"document_id": document_id})

    def sources(self) -> list[Source]:
        """The sources that hold documents the key may read (admins: every source)."""
        return self._call(SOURCES).sources

    def start_ingest(self, request: IngestRequest) -> IngestJob:
        """Start an ingest job on the server (one at a time); ``ingest_job`` follows it."""
        return self._call(START_INGEST, body=request)

    def ingest_job(self, job_id: str) -> IngestJob:
        return self._call(INGEST_JOB, path={"job_id": job_id})

    def ingest(self, request: IngestRequest, *,
               on_update: Callable[[IngestJob], None] | None = None,
               poll: float = 1.0) -> IngestJob:
        """Start an ingest job and wait for it, asking every ``poll`` seconds; ``on_update``
        sees the job each time, and once more when it has finished."""
        job = self.start_ingest(request)
        while not job.finished:
            if on_update is not None:
                on_update(job)
            time.sleep(poll)
            job = self.ingest_job(job.id)
        if on_update is not None:
            on_update(job)
        return job

    def verify(self, *, repair: bool = False, force: bool = False,
               timeout: float | None = None) -> Verification:
        """Check (and repair) the server's index and blobs against its catalog. A large index
        takes minutes: no time limit unless ``timeout`` is given."""
        return self._call(VERIFY, body=VerifyRequest(repair=repair, force=force),
                          timeout=timeout)

    def usage(self, *, since: str | None = None, until: str | None = None,
              group_by: str = "principal") -> UsageReport:
        """Requests, errors, refusals, latency, tokens and cost since ``since`` (7d, 24h or
        an ISO date), grouped by principal, key, route or day."""
        return self._call(USAGE, query=UsageQuery(since=since, until=until, group_by=group_by))

    def health(self) -> Health:
        """Whether the server answers (admins also get the index's state)."""
        return self._call(HEALTH)

    # Connections -----------------------------------------------------------------------------

    def close(self) -> None:
        """Ends the kept connections of sync calls (async calls keep none)."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> CitewiseClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # One request -----------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout,
                            transport=self._transport)

    def _call(self, route: Route[R], *, body: Request | None = None,
              query: Request | None = None, path: Mapping[str, str] | None = None,
              acting_for: ActingFor | None = None,
              timeout: float | None | Literal["default"] = "default") -> R:
        prepared = self._prepare(route, body=body, query=query, path=path,
                                 acting_for=acting_for)
        waited = self.timeout if timeout == "default" else timeout
        if self._http is None:  # closed, and used again
            self._http = self._sync_client()
        try:
            response = self._http.request(prepared.method, prepared.path, json=prepared.json,
                                          params=prepared.params, headers=prepared.headers,
                                          timeout=waited)
        except httpx.TransportError as e:
            raise unreachable(e, base_url=self.base_url, timeout=waited,
                              url=prepared.url) from e
        return _read(route, response, prepared.url)

    def _prepare(self, route: Route[R], *, body: Request | None = None,
                 query: Request | None = None, path: Mapping[str, str] | None = None,
                 acting_for: ActingFor | None = None) -> _Prepared:
        # The route says what it takes: anything else is a mistake in this module, caught
        # here rather than sent (the OpenAPI check reads the route's declared bodies).
        if type(body) is not (route.body or type(None)) or \
                type(query) is not (route.query or type(None)):
            raise TypeError(f"{route.method} {route.path} takes body {route.body} and query "
                            f"{route.query}, not {type(body)} and {type(query)}")
        url_path = route.url_path(**(path or {}))
        return _Prepared(
            method=route.method, path=url_path, url=f"{self.base_url}{url_path}",
            json=body.sent() if body is not None else None,
            params=query.sent() if query is not None else None,
            headers=acting_for.headers() if acting_for is not None else {})


def _read(route: Route[R], response: httpx.Response, url: str) -> R:
    """The route's reply, or the error the response stands for."""
    if response.status_code >= 400:
        raise refusal(response, what=route.what, scope=route.scope, url=url)
    try:
        return route.reply.model_validate(response.json())
    except ValueError as e:  # not JSON, or not the route's shape (pydantic's ValidationError)
        raise unexpected(response, e, what=route.what, url=url) from e
