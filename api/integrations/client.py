"""The one HTTP call the framework retrievers make: ``POST /v1/search`` on a citewise server.

Both retrievers (``llamaindex.py``, ``langchain.py``) are thin adapters over this module, so
the request body, the key, the error messages and the citation a passage carries are written
once. It imports httpx and the standard library only: an application that uses a retriever
talks to a server over HTTP and needs none of the server's own modules (models, the index).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

URL_VARIABLE = "CITEWISE_URL"
KEY_VARIABLE = "CITEWISE_API_KEY"
Mode = Literal["hybrid", "dense", "sparse"]


class CitewiseClientError(Exception):
    """A search the server refused or never answered, with what to do about it.

    ``status`` is the HTTP status (None when no answer came: connection refused, timeout);
    ``detail`` and ``hint`` are the server's problem-details fields; ``request_id`` is the
    ``X-Request-Id`` the server's logs and audit log know the request by.
    """

    def __init__(self, message: str, *, url: str, status: int | None = None,
                 detail: str | None = None, hint: str | None = None,
                 request_id: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.status = status
        self.detail = detail
        self.hint = hint
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        return self.message + (f" [request id {self.request_id}]" if self.request_id else "")


@dataclass(frozen=True)
class SearchHit:
    """One passage the server found, with everything needed to cite it."""

    chunk_id: str
    document_id: str
    source: str
    title: str
    heading: str
    text: str
    score: float
    path: str | None = None
    url: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = None
    service: str | None = None
    tags: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> SearchHit:
        return cls(
            chunk_id=item["chunk_id"], document_id=item["document_id"], source=item["source"],
            title=item["title"], heading=item.get("heading") or "", text=item["text"],
            score=float(item.get("score") or 0.0), path=item.get("path"), url=item.get("url"),
            start_line=item.get("start_line"), end_line=item.get("end_line"),
            symbol=item.get("symbol"), service=item.get("service"),
            tags=list(item.get("tags") or []),
        )

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

    def metadata(self) -> dict[str, Any]:
        """The citation metadata both retrievers attach: every field but the text and score,
        plus ``citation``."""
        out = asdict(self)
        del out["text"], out["score"]
        out["citation"] = self.citation
        return out


# The keys of ``SearchHit.metadata()``, and those that help a model or an embedding read the
# passage; the rest (ids, links, line numbers) are for the application and stay out of their text.
METADATA_KEYS = ("chunk_id", "document_id", "source", "title", "heading", "path", "url",
                 "start_line", "end_line", "symbol", "service", "tags", "citation")
FOR_THE_MODEL = ("title", "heading", "citation", "symbol", "service")
FOR_THE_EMBEDDING = ("title", "heading", "symbol", "service")


def search_body(query: str, *, top_k: int = 5, mode: Mode = "hybrid",
                sources: Sequence[str] = (), tags: Sequence[str] = (),
                services: Sequence[str] = (), path_prefix: str | None = None) -> dict[str, Any]:
    """The JSON body of ``POST /v1/search`` (``SearchRequest`` in the server's schemas)."""
    return {
        "query": query, "top_k": top_k, "mode": mode,
        "filters": {"sources": list(sources), "tags": list(tags),
                    "services": list(services), "path_prefix": path_prefix},
    }


class CitewiseClient:
    """Searches one citewise server as one API key.

    The sync client keeps its connections between calls (``close()`` ends them); each async
    search opens its own, since an httpx.AsyncClient belongs to the event loop that made it
    and a retriever may be called from several (``asyncio.run`` per call, notebooks).
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 30.0, headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        base_url = base_url or os.environ.get(URL_VARIABLE)
        if not base_url:
            raise CitewiseClientError(
                f"no citewise server to call: pass base_url or set ${URL_VARIABLE} "
                "(e.g. http://127.0.0.1:8000)", url="")
        self.base_url = base_url.rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
        self.headers = dict(headers or {})
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout
        self._transport = transport
        # Made here, not on first use: LangChain's batch calls search from several threads.
        self._http: httpx.Client | None = self._sync_client()

    def _sync_client(self) -> httpx.Client:
        return httpx.Client(headers=self.headers, timeout=self.timeout,
                            transport=self._transport)

    @property
    def search_url(self) -> str:
        return f"{self.base_url}/v1/search"

    def search(self, query: str, **options: Any) -> list[SearchHit]:
        """``options``: those of ``search_body`` (top_k, mode, sources, tags, services,
        path_prefix)."""
        if self._http is None:  # closed, and used again
            self._http = self._sync_client()
        try:
            resp = self._http.post(self.search_url, json=search_body(query, **options))
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        return self._hits(resp)

    async def asearch(self, query: str, **options: Any) -> list[SearchHit]:
        async with httpx.AsyncClient(headers=self.headers, timeout=self.timeout) as http:
            try:
                resp = await http.post(self.search_url, json=search_body(query, **options))
            except httpx.TransportError as e:
                raise self._unreachable(e) from e
        return self._hits(resp)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> CitewiseClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, e: httpx.TransportError) -> CitewiseClientError:
        if isinstance(e, httpx.TimeoutException):
            return CitewiseClientError(
                f"citewise at {self.base_url} did not answer within {self.timeout} s "
                f"({type(e).__name__}): check that the server is healthy, or raise timeout",
                url=self.search_url)
        return CitewiseClientError(
            f"cannot reach citewise at {self.base_url} ({type(e).__name__}: {e}): check that "
            f"`citewise serve` is running there and that base_url / ${URL_VARIABLE} points at it",
            url=self.search_url)

    def _hits(self, resp: httpx.Response) -> list[SearchHit]:
        request_id = resp.headers.get("x-request-id")
        if resp.status_code >= 400:
            raise refusal(resp, self.search_url)
        try:
            return [SearchHit.from_json(item) for item in resp.json()["results"]]
        except (ValueError, KeyError, TypeError) as e:
            raise CitewiseClientError(
                f"{self.search_url} answered {resp.status_code} with something that is not "
                f"a citewise search response ({type(e).__name__}: {e}): is base_url the "
                "citewise server itself, not a proxy's login page?",
                url=self.search_url, status=resp.status_code, request_id=request_id) from e


def refusal(resp: httpx.Response, url: str) -> CitewiseClientError:
    """An error response as a CitewiseClientError whose message says what to do next."""
    status = resp.status_code
    try:
        problem = resp.json()
        detail, hint = problem.get("detail"), problem.get("hint")
    except (ValueError, AttributeError):
        detail, hint = resp.text[:200] or None, None
    retry_after = _seconds(resp.headers.get("retry-after"))
    if status == 401:
        advice = (f"check the API key (api_key or ${KEY_VARIABLE}): it is missing, mistyped, "
                  "expired or revoked (`citewise keys list` on the server shows its keys)")
    elif status == 403:
        advice = ("check the key's scopes and principal: searching needs the 'search' scope "
                  "(`citewise keys create NAME --scopes search,answer`)")
    elif status == 429:
        wait = f"{retry_after:g} s" if retry_after is not None else "a little while"
        advice = f"the key or its principal is over a rate limit: retry after {wait}"
    elif status == 422:
        advice = "the request was not valid: check top_k (1-100), mode and the filters"
    elif status >= 500:
        advice = "the server failed: its logs know this request by the request id"
    else:
        advice = ""
    said = detail or f"HTTP {status}"
    if hint:
        said += f" ({hint})"
    message = f"citewise refused the search with {status}: {said}" + (
        f"; {advice}" if advice else "")
    return CitewiseClientError(message, url=url, status=status, detail=detail, hint=hint,
                               request_id=resp.headers.get("x-request-id"),
                               retry_after=retry_after)


def _seconds(value: str | None) -> float | None:
    """Retry-After as seconds (citewise sends a number; an HTTP date is left unparsed)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
