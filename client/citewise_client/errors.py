"""What can go wrong calling citewise, as exceptions a caller catches by kind.

Every error citewise answers is a problem-details document (RFC 9457)::

    {"type": "urn:citewise:error:rate_limited", "title": "Rate limited", "status": 429,
     "detail": "too many search requests: ...", "hint": "retry after 12 s"}

The exception's class is chosen by the code in ``type`` (``Refused.codes``), never by the words
of the message. An error answer without a citewise type (a proxy's 502 page, the HTTP server's
own 400 for a request it could not parse) is classed by its status alone. Each exception
carries what the problem said (``detail``, ``hint``, ``errors``), the ``X-Request-Id`` the
server's logs and audit log know the request by, and ``Retry-After`` in seconds; its message
says what to do next.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from citewise_client.environment import KEY_VARIABLE, URL_VARIABLE

URN = "urn:citewise:error:"


class CitewiseClientError(Exception):
    """Anything but the answer asked for. ``status`` is the HTTP status (None when no answer
    came); ``code`` the problem's code (``rate_limited``; None when the answer was not a
    citewise problem); ``url`` the URL called, without its query."""

    def __init__(self, message: str, *, url: str, status: int | None = None,
                 code: str | None = None, detail: str | None = None, hint: str | None = None,
                 request_id: str | None = None, retry_after: float | None = None,
                 errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.status = status
        self.code = code
        self.detail = detail
        self.hint = hint
        self.request_id = request_id
        self.retry_after = retry_after
        self.errors = errors or []

    def __str__(self) -> str:
        return self.message + (f" [request id {self.request_id}]" if self.request_id else "")


class Unreachable(CitewiseClientError):
    """No answer came: the connection was refused, the name did not resolve, or the server
    took longer than the timeout. ``reason`` is what the HTTP library said."""

    def __init__(self, message: str, *, url: str, reason: str) -> None:
        super().__init__(message, url=url)
        self.reason = reason


class UnexpectedResponse(CitewiseClientError):
    """An answer that is not citewise's: a success whose body is not the route's response (a
    login page of a proxy in front of the server), or an error that is not a problem
    document and has no status this module knows."""


class Refused(CitewiseClientError):
    """citewise (or something in front of it) answered with an error status."""

    codes: ClassVar[tuple[str, ...]] = ()  # the problem types' codes this class stands for
    statuses: ClassVar[tuple[int, ...]] = ()  # the statuses it stands for without one

    @classmethod
    def advice(cls, *, what: str, scope: str | None, retry_after: float | None) -> str:
        """What to do next, for the message; empty when the detail and hint say it all."""
        return ""


class BadRequest(Refused):
    """The request is malformed in a way no schema describes (a header sent twice)."""

    codes, statuses = ("bad_request",), (400,)


class Unauthorized(Refused):
    """No valid key or token: missing, mistyped, expired or revoked."""

    codes, statuses = ("unauthorized",), (401,)

    @classmethod
    def advice(cls, *, what: str, scope: str | None, retry_after: float | None) -> str:
        return (f"check the API key (api_key or ${KEY_VARIABLE}): it is missing, mistyped, "
                "expired or revoked (`citewise keys list` on the server shows its keys)")


class Forbidden(Refused):
    """A valid caller without the scope the route needs, or a key that may not name the user
    it acts for."""

    codes, statuses = ("forbidden",), (403,)

    @classmethod
    def advice(cls, *, what: str, scope: str | None, retry_after: float | None) -> str:
        if scope is None:
            return "check the key's scopes and principal"
        return (f"check the key's scopes and principal: the {what} request needs the "
                f"'{scope}' scope (`citewise keys create NAME --scopes {scope}`)")


class GuardrailBlocked(Refused):
    """A guardrail policy of the server refused the question or its answer (a 403 that no
    other key would get past: the subject is not answered here)."""

    codes = ("guardrail_blocked",)


class NotFound(Refused):
    """No such document (or one the caller may not read), conversation, job or route."""

    codes, statuses = ("not_found",), (404,)


class Conflict(Refused):
    """The operation cannot run now."""

    codes, statuses = ("conflict",), (409,)


class RunLocked(Conflict):
    """Another ingest run, repair or backup of the server's data folder is under way."""

    codes = ("run_locked",)


class CatalogLost(Conflict):
    """A repair would delete most of the index because the catalog lists almost none of it."""

    codes = ("catalog_lost",)


class PayloadTooLarge(Refused):
    """The request body is larger than the server accepts."""

    codes, statuses = ("payload_too_large",), (413,)


class InvalidRequest(Refused):
    """The request does not match the route's schema; ``errors`` names each field."""

    codes, statuses = ("invalid_request",), (422,)

    @classmethod
    def advice(cls, *, what: str, scope: str | None, retry_after: float | None) -> str:
        return "the request was not valid: the detail names the field"


class RateLimited(Refused):
    """A rate limit or quota of the key or its principal is used up; ``retry_after`` says
    when to try again."""

    codes, statuses = ("rate_limited",), (429,)

    @classmethod
    def advice(cls, *, what: str, scope: str | None, retry_after: float | None) -> str:
        wait = f"{retry_after:g} s" if retry_after is not None else "a little while"
        return f"the key or its principal is over a rate limit: retry after {wait}"


class ServerError(Refused):
    """The server failed (every 5xx): its logs know the request by ``request_id``."""

    codes = ("internal_error",)

    @classmethod
    def advice(cls, *, what: str, scope: str | None, retry_after: float | None) -> str:
        return "the server failed: its logs know this request by the request id"


_KINDS: tuple[type[Refused], ...] = (
    BadRequest, Unauthorized, Forbidden, GuardrailBlocked, NotFound, Conflict, RunLocked,
    CatalogLost, PayloadTooLarge, InvalidRequest, RateLimited, ServerError)
# Each class's own codes and statuses (vars(): RunLocked does not inherit Conflict's 409).
BY_CODE: dict[str, type[Refused]] = {
    code: kind for kind in _KINDS for code in vars(kind).get("codes", ())}
BY_STATUS: dict[int, type[Refused]] = {
    status: kind for kind in _KINDS for status in vars(kind).get("statuses", ())}


def kind_of(code: str | None, status: int) -> type[Refused]:
    """The class of an error answer: by its problem type's code, else by its status."""
    if code is not None and code in BY_CODE:
        return BY_CODE[code]
    if status in BY_STATUS:
        return BY_STATUS[status]
    return ServerError if status >= 500 else Refused


def refusal(response: httpx.Response, *, what: str, scope: str | None, url: str) -> Refused:
    """An error answer as the exception of its kind, with a message that says what to do."""
    status = response.status_code
    problem = _problem(response)
    kind_url = problem.get("type") if problem else None
    code = kind_url[len(URN):] if isinstance(kind_url, str) and kind_url.startswith(URN) \
        else None
    if problem is not None and isinstance(problem.get("detail"), str):
        detail: str | None = problem["detail"]
    else:
        detail = response.text[:200] or None
    hint = problem.get("hint") if problem else None
    hint = hint if isinstance(hint, str) else None
    errors = problem.get("errors") if problem else None
    retry_after = _seconds(response.headers.get("retry-after"))
    kind = kind_of(code, status)
    said = (detail or f"HTTP {status}") + (f" ({hint})" if hint else "")
    advice = kind.advice(what=what, scope=scope, retry_after=retry_after)
    message = f"citewise refused the {what} request with {status}: {said}" + (
        f"; {advice}" if advice else "")
    return kind(message, url=url, status=status, code=code, detail=detail, hint=hint,
                request_id=response.headers.get("x-request-id"), retry_after=retry_after,
                errors=errors if isinstance(errors, list) else None)


def unreachable(error: httpx.TransportError, *, base_url: str, timeout: float | None,
                url: str) -> Unreachable:
    if isinstance(error, httpx.TimeoutException):
        message = (f"citewise at {base_url} did not answer within {timeout} s "
                   f"({type(error).__name__}): check that the server is healthy, or raise "
                   "timeout")
    else:
        message = (f"cannot reach citewise at {base_url} ({type(error).__name__}: {error}): "
                   "check that `citewise serve` is running there and that base_url / "
                   f"${URL_VARIABLE} points at it")
    return Unreachable(message, url=url, reason=str(error) or type(error).__name__)


def unexpected(response: httpx.Response, error: ValueError, *, what: str,
               url: str) -> UnexpectedResponse:
    """A success whose body is not the route's response."""
    said = str(error).splitlines()[0] if str(error) else ""
    return UnexpectedResponse(
        f"{url} answered {response.status_code} with something that is not a citewise {what} "
        f"response ({type(error).__name__}: {said}): is base_url the citewise server itself, "
        "not a proxy's login page?",
        url=url, status=response.status_code,
        request_id=response.headers.get("x-request-id"))


def _problem(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:  # not JSON, or not text
        return None
    return body if isinstance(body, dict) else None


def _seconds(value: str | None) -> float | None:
    """Retry-After in seconds (citewise sends a number; an HTTP date is left unread)."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
