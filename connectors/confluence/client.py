"""A well-behaved HTTP client for the Confluence REST APIs (httpx).

* **Rate**: at most ``requests_per_second``, spaced evenly (Atlassian's rate limits are per
  user and per site; staying under them beats being told to back off).
* **429**: waits what ``Retry-After`` says (seconds), capped at ``max_retry_wait`` so a server
  asking for an hour cannot hang a run, then retries.
* **5xx and timeouts**: exponential backoff with jitter, at most ``max_retries`` retries, then
  ``ConfluenceUnavailable``.
* **401 / 403**: ``ConfluenceAuthError`` at once (retrying a bad credential only locks the
  account); 404: ``ConfluenceNotFound``.
* **Pagination**: both flavours answer ``{"results": [...], "_links": {"next": ...}}`` and
  pages are followed until there is no ``next`` (v2 uses an opaque ``cursor`` in that link, v1
  ``start``/``limit``; both documented by Atlassian under "Pagination in the REST API").

Credentials live in the ``httpx`` client's headers only: no message, log line or exception
here ever includes a header or the token.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from citewise.errors import SourceError

log = logging.getLogger("citewise.connectors.confluence")


class ConfluenceAuthError(SourceError):
    """The credentials were refused (401) or lack permission (403)."""


class ConfluenceNotFound(SourceError):
    """404: the space, page or endpoint does not exist (or the credentials cannot see it)."""


class ConfluenceUnavailable(SourceError):
    """The server kept failing (5xx, timeouts, 429) after every retry."""


class ConfluenceServerError(SourceError):
    """A 5xx that is the server's considered answer, not an outage (asked not to retry it)."""

    def __init__(self, message: str, *, status: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class ConfluencePermissionsRefused(SourceError):
    """The space's permissions cannot be read with these credentials (or on this version)."""


class ConfluenceTooLarge(SourceError):
    """A download went past the size it was allowed."""


@dataclass
class ClientSettings:
    requests_per_second: float = 10.0
    timeout: float = 30.0
    max_retries: int = 5
    max_retry_wait: float = 60.0  # longest single wait, for Retry-After and backoff alike
    backoff_base: float = 0.5


class RateLimiter:
    """Even spacing between requests: simple, and enough for one run at a time."""

    def __init__(self, per_second: float, clock=time.monotonic, sleep=time.sleep) -> None:
        self.interval = 1.0 / per_second if per_second and per_second > 0 else 0.0
        self.clock, self.sleep = clock, sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = self.clock()
            if self._next > now:
                self.sleep(self._next - now)
                now = self._next
            self._next = now + self.interval


class ConfluenceHttp:
    """GETs JSON from one Confluence site. ``base_url`` is the API root of the site: for Cloud
    ``https://acme.atlassian.net/wiki``, for Data Center ``https://host[/context]``."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        settings: ClientSettings | None = None,
        *,
        credential_hint: str = "check the credentials",
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.context = parts.path.rstrip("/")  # "/wiki" on Cloud, "" or "/confluence" on DC
        self.settings = settings or ClientSettings()
        self.credential_hint = credential_hint
        self.sleep = sleep
        self.limiter = RateLimiter(self.settings.requests_per_second, sleep=sleep)
        self.requests = 0  # requests sent, retries included: the cost of a run
        self.retries = 0
        self._http = httpx.Client(
            headers={"Accept": "application/json", **headers},
            timeout=self.settings.timeout,
            follow_redirects=True,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    # URLs -------------------------------------------------------------------------------------
    def url(self, path_or_link: str) -> str:
        """An absolute URL for an API path or a ``_links.next`` link.

        Cloud's v2 ``next`` links start with the context (``/wiki/api/v2/...``); v1 links on both
        flavours are relative to the context (``/rest/api/...``).
        """
        if path_or_link.startswith(("http://", "https://")):
            return path_or_link
        if self.context and (path_or_link == self.context
                             or path_or_link.startswith(self.context + "/")):
            return self.origin + path_or_link
        return self.base_url + path_or_link

    # Requests ---------------------------------------------------------------------------------
    def get_json(self, path: str, params: dict | None = None, *,
                 retry_server_errors: bool = True) -> Any:
        """GET a JSON body: an object, or a list from some Data Center endpoints.
        ``retry_server_errors=False``: a 5xx raises ``ConfluenceServerError`` at once (some
        endpoints answer 500 for a missing permission, and always will)."""

        def read(resp: httpx.Response, where: str) -> Any:
            resp.read()
            try:
                return resp.json()
            except ValueError:
                raise ConfluenceUnavailable(
                    f"Confluence answered {where} with something that is not JSON",
                    hint="check base_url: it should be the site, not a login page",
                ) from None

        return self._send("GET", path, params, read, retry_server_errors=retry_server_errors)

    def post_json(self, path: str, body: dict, *, retry_server_errors: bool = True):
        """POST a JSON body and read a JSON answer (Data Center's JSON-RPC)."""

        def read(resp: httpx.Response, where: str):
            resp.read()
            try:
                return resp.json()
            except ValueError:
                raise ConfluenceUnavailable(
                    f"Confluence answered {where} with something that is not JSON",
                    hint="a login page or an administrator confirmation (WebSudo) answered "
                         "instead of the API",
                ) from None

        return self._send("POST", path, None, read, json_body=body,
                          retry_server_errors=retry_server_errors)

    def get_bytes(self, path: str, max_bytes: int) -> bytes:
        """A file (an attachment's download link), read as it streams in and abandoned past
        ``max_bytes``: the listed size can be stale, a download must not fill the memory."""

        def read(resp: httpx.Response, where: str) -> bytes:
            data = bytearray()
            for chunk in resp.iter_bytes():
                data += chunk
                if len(data) > max_bytes:
                    raise ConfluenceTooLarge(f"{where} is larger than {max_bytes} bytes")
            return bytes(data)

        return self._send("GET", path, None, read, accept="*/*")

    def _send(self, method: str, path: str, params: dict | None, read: Callable,
              accept: str | None = None, *, json_body: dict | None = None,
              retry_server_errors: bool = True):
        url = self.url(path)
        where = _redact_url(url)
        headers = {"Accept": accept} if accept else None
        attempt = 0
        while True:
            self.limiter.wait()
            self.requests += 1
            try:
                with self._http.stream(method, url, params=params, headers=headers,
                                       json=json_body) as resp:
                    if resp.status_code < 300:
                        return read(resp, where)
                    resp.read()
            except (httpx.TimeoutException, httpx.TransportError) as e:
                reason = f"{type(e).__name__}"
                wait = self._backoff(attempt)
            else:
                if resp.status_code in (401, 403):
                    raise ConfluenceAuthError(
                        f"Confluence refused {where} ({resp.status_code})",
                        hint=self.credential_hint,
                    )
                if resp.status_code == 404:
                    raise ConfluenceNotFound(f"Confluence has no {where} (404)")
                if resp.status_code == 429:
                    reason = "429 Too Many Requests"
                    wait = _retry_after(resp) or self._backoff(attempt)
                elif resp.status_code >= 500:
                    if not retry_server_errors:
                        raise ConfluenceServerError(
                            f"Confluence answered {where} with {resp.status_code}: "
                            f"{_short(resp.text)}", status=resp.status_code)
                    reason = f"{resp.status_code} server error"
                    wait = self._backoff(attempt)
                else:
                    raise SourceError(
                        f"Confluence answered {where} with {resp.status_code}: "
                        f"{_short(resp.text)}",
                        hint="check the source's settings (space keys, labels, base_url)",
                    )
            if attempt >= self.settings.max_retries:
                raise ConfluenceUnavailable(
                    f"Confluence kept failing on {where} ({reason}) after "
                    f"{attempt + 1} attempts",
                    hint="the server may be down or overloaded; the next run retries",
                )
            wait = min(wait, self.settings.max_retry_wait)
            log.info("confluence: %s on %s; retrying in %.1fs", reason, where, wait)
            attempt += 1
            self.retries += 1
            self.sleep(wait)

    def pages(
        self, path: str, params: dict | None = None
    ) -> Iterator[tuple[list[dict], str | None]]:
        """Each page of results with the link to the next one (None on the last page).

        The link is what a checkpoint stores: resuming from it continues where a run stopped.
        """
        link: str | None = path
        first = True
        while link:
            body = self.get_json(link, params if first else None)
            first = False
            link = ((body.get("_links") or {}).get("next")) or None
            yield list(body.get("results") or []), link

    def _backoff(self, attempt: int) -> float:
        return self.settings.backoff_base * (2 ** attempt) * (0.5 + random.random() / 2)


def _retry_after(resp: httpx.Response) -> float | None:
    """Seconds to wait from ``Retry-After`` (delta-seconds or an HTTP date)."""
    value = resp.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _redact_url(url: str) -> str:
    """The URL without a query string or user info: safe for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "..."
