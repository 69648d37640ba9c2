"""The front door: every HTTP request passes here before any route reads it.

In order: a request id (``X-Request-Id``, taken from the client when it is a sane token, else
new; returned and in every log line); who is calling (``identity.Authenticator``, the one place
that decides it); whether the route's scope allows it; whether the caller's rate limits and
quotas do (429 with ``Retry-After`` and the ``RateLimit-Policy``/``RateLimit`` headers); then the
route; then usage is recorded and security headers added. A request that fails any step gets a
problem-details answer before its body is read, and refusals are written to the audit log.

``RULES`` is the map of which routes need which scope and which rate class they draw on: a
route under ``/v1`` that is not listed still needs a valid caller.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citewise import metrics
from citewise.api.identity.caller import Caller
from citewise.api.metering.store import Usage
from citewise.api.middleware import send_problem
from citewise.errors import BadRequestError, CitewiseError, ForbiddenError
from citewise.logs import REQUEST_ID

log = logging.getLogger("citewise.api")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Control characters other than tab. uvicorn's parser (h11) refuses NUL, CR and LF itself with a
# plain-text 400 before any app runs; the others it lets through, and they would reach logs,
# the audit log and identities.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Rule:
    methods: frozenset[str] | None  # None = any method
    path: re.Pattern
    scope: str | None  # the scope the caller needs; None = any authenticated caller
    rate_class: str | None  # search, answer or ingest: the buckets it draws on
    label: str  # how usage names requests refused before routing


def _rule(methods: str | None, path: str, scope: str | None, rate_class: str | None,
          label: str) -> Rule:
    return Rule(frozenset(methods.split("|")) if methods else None, re.compile(path), scope,
                rate_class, label)


RULES = (
    _rule("GET|POST", r"^/v1/search$", "search", "search", "/v1/search"),
    _rule("POST", r"^/v1/answer$", "answer", "answer", "/v1/answer"),
    _rule("POST", r"^/v1/chat/completions$", "answer", "answer", "/v1/chat/completions"),
    _rule("GET", r"^/v1/models(/|$)", "answer", None, "/v1/models"),
    _rule(None, r"^/v1/(conversations|answers)(/|$)", "answer", None, "/v1/conversations"),
    # MCP: the tools check their own scope (search, or answer for the answer tool).
    _rule(None, r"^/mcp(/|$)", "search", "search", "/mcp"),
    _rule(None, r"^/v1/documents(/|$)", "search", "search", "/v1/documents/{document_id}"),
    _rule(None, r"^/v1/sources$", "search", "search", "/v1/sources"),
    _rule("POST", r"^/v1/ingest/jobs$", "ingest", "ingest", "/v1/ingest/jobs"),
    _rule(None, r"^/v1/ingest(/|$)", "ingest", None, "/v1/ingest"),
    _rule(None, r"^/v1/(usage|audit|keys|admin)(/|$)", "admin", None, "/v1/admin"),
    _rule(None, r"^/metrics$", "admin", None, "/metrics"),
    _rule(None, r"^/v1(/|$)", None, None, "/v1"),
)
# Public: the API description and liveness. /healthz shows details to admins only.
OPTIONAL_AUTH = ("/healthz",)


def rule_for(method: str, path: str) -> Rule | None:
    for rule in RULES:
        if rule.path.match(path) and (rule.methods is None or method in rule.methods):
            return rule
    # A listed path with another method: still authenticated, the router answers 405.
    for rule in RULES:
        if rule.path.match(path):
            return Rule(None, rule.path, None, None, rule.label)
    return None


SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
# Answers depend on who asks: no shared cache may keep them.
API_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
]


class FrontDoor:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id")
        request_id = given if given and _REQUEST_ID.match(given) else uuid.uuid4().hex
        token = REQUEST_ID.set(request_id)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["outer_root_path"] = scope.get("root_path", "")
        path, method = scope.get("path", ""), scope.get("method", "GET")
        rule = rule_for(method, path)
        extra = [*SECURITY_HEADERS, (b"x-request-id", request_id.encode())]
        if rule is not None:
            extra += API_HEADERS
        started = time.perf_counter()
        status = {"code": 500}
        caller: Caller | None = None
        decision = None  # the rate limiter's, settled once the route has answered
        door = scope["app"].state.door

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message.setdefault("headers", [])
                present = {k.lower() for k, _ in message["headers"]}
                message["headers"] = list(message["headers"]) + [
                    (k, v) for k, v in extra if k not in present]
            await send(message)

        try:
            client = scope.get("client")
            address = client[0] if client else None
            bad = next((name for name, value in scope.get("headers", [])
                        if _CONTROL.search(value)), None)
            if bad is not None:
                await send_problem(send_with_headers, BadRequestError(
                    f"the {bad.decode('latin-1')[:64]} header holds a control character",
                    hint="header values are text: no control characters other than tab"),
                    path=path)
                return
            if rule is not None or path in OPTIONAL_AUTH:
                try:
                    caller = door.authenticator.authenticate(headers, address)
                    if rule is not None and rule.scope and not caller.may(rule.scope):
                        raise ForbiddenError(
                            f"this needs the {rule.scope!r} scope, which "
                            + (f"the key {caller.key!r} lacks" if caller.key
                               else "you do not have"),
                            hint="ask an administrator for a key or group with that scope")
                except CitewiseError as e:
                    if rule is None:  # /healthz: the public answer, without details
                        caller = None
                    else:
                        self._refused(door, e, caller, rule, address, request_id)
                        await send_problem(send_with_headers, e, _challenge(e),
                                           path=scope.get("path", ""))
                        return
            state["caller"] = caller
            if rule is not None and rule.rate_class and caller is not None:
                try:
                    decision = door.limiter.check(caller, rule.rate_class)
                except CitewiseError as e:
                    # Buckets shared by replicas live in the database: while it cannot be
                    # reached the request gets the 503 of any outage, not a pass uncounted.
                    await send_problem(send_with_headers, e, path=scope.get("path", ""))
                    return
                extra += [(k.lower().encode(), v.encode()) for k, v in decision.headers()]
                if not decision.allowed:
                    metrics.RATE_LIMITED.labels(rule.rate_class).inc()
                    await send_problem(send_with_headers, RateLimited(
                        f"too many {rule.rate_class} requests: the {decision.policy.name} limit "
                        f"of {decision.policy.quota} per {decision.policy.window} s is used up",
                        hint=f"retry after {max(1, decision.reset)} s"),
                        path=scope.get("path", ""))
                    return
            await self.app(scope, receive, send_with_headers)
        finally:
            if decision is not None and rule is not None:  # a decision is made for a rule
                try:
                    door.limiter.settle(rule.rate_class, decision, status["code"])
                except CitewiseError:  # the answer is sent; a token not given back is all
                    log.warning("could not give back the rate-limit token of a refused "
                                "request (the database is unreachable)")
            if rule is not None:
                self._record(door, scope, state, rule, caller, method, status["code"],
                             started, request_id)
            REQUEST_ID.reset(token)

    def _refused(self, door, error: CitewiseError, caller: Caller | None, rule: Rule,
                 address: str | None, request_id: str) -> None:
        metrics.AUTH_REFUSED.labels(str(error.status_code)).inc()
        if error.status_code in (401, 403):
            try:
                door.audit.record(
                    "request.refused", actor=caller.principal if caller else "unknown",
                    key=caller.key if caller else None, outcome="denied", target=rule.label,
                    detail={"status": error.status_code, "reason": error.message},
                    client=address, request_id=request_id)
            except Exception:  # the refusal stands even if the audit write fails
                log.exception("could not write the audit record of a refusal")

    def _record(self, door, scope: Scope, state: dict, rule: Rule, caller: Caller | None,
                method: str, status: int, started: float, request_id: str) -> None:
        route = getattr(scope.get("route"), "path", None)
        # A mounted app (/mcp) matches its own routes under the mount, and the router records
        # the inner one ("/"): the mount's prefix is what the root path grew by on the way in.
        mount = scope.get("root_path", "")[len(state.get("outer_root_path", "")):]
        route = (mount + route).rstrip("/") or "/" if route and mount else route or rule.label
        principal = caller.principal if caller else "unauthenticated"
        key = caller.key if caller else None
        metrics.REQUESTS_BY_KEY.labels(key or "", route, str(status)).inc()
        # The app, not scope["app"]: a mounted app (/mcp) puts itself there on the way in.
        door.usage.record(Usage(
            at=datetime.now(UTC).isoformat(timespec="milliseconds"), principal=principal,
            key=key, route=route, method=method, status=status,
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            results=int(state.get("results", 0) or 0),
            tokens_in=int(state.get("tokens_in", 0) or 0),
            tokens_out=int(state.get("tokens_out", 0) or 0),
            cost=float(state.get("cost", 0.0) or 0.0), request_id=request_id,
            cache_hits=int(state.get("cache_hits", 0) or 0),
            saved_tokens=int(state.get("saved_tokens", 0) or 0),
            provider=state.get("provider") or None,
            answers=int(state.get("answers", 0) or 0),
            abstentions=int(state.get("abstentions", 0) or 0)))


class RateLimited(CitewiseError):
    status_code = 429
    code = "rate_limited"


def _challenge(error: CitewiseError) -> list[tuple[bytes, bytes]] | None:
    if error.status_code == 401:
        return [(b"www-authenticate", b'Bearer realm="citewise"')]
    return None
