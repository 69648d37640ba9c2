"""ASGI middleware that must run before a route reads anything: the body size limit; and the
request metrics, at the ASGI level too (see ``RequestMetrics``).

FastAPI reads and parses a request body before running a route's dependencies, so a check in a
dependency comes too late: a 100 MB body would be read in full before its 413 (or its 401: see
``frontdoor.FrontDoor``, which runs first). ``BodyLimit`` wraps the app at the ASGI level and
answers 413 as soon as ``Content-Length`` (or the bytes actually received) exceed the limit,
without reading the rest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

from citewise import metrics
from citewise.api.problems import for_path, problem_body
from citewise.errors import CitewiseError, InvalidRequestError
from citewise.serving import REQUESTS

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROBLEM_JSON = b"application/problem+json"


class PayloadTooLarge(CitewiseError):
    status_code = 413
    code = "payload_too_large"


async def send_problem(send: Send, error: CitewiseError, headers: list | None = None,
                       path: str = "") -> None:
    body = json.dumps(for_path(
        problem_body(error.status_code, error.code, error.message, error.hint), path)).encode()
    await send({
        "type": "http.response.start",
        "status": error.status_code,
        "headers": [(b"content-type", PROBLEM_JSON), (b"content-length", str(len(body)).encode()),
                    *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"the request body is larger than {self.max_bytes} bytes",
            hint="send a smaller request (a question, a query and filters fit in a few KB)",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_problem(send, InvalidRequestError(
                        "the Content-Length header is not a number"), path=scope["path"])
                    return
                if declared > self.max_bytes:
                    await send_problem(send, self._too_large(), path=scope["path"])
                    return
        received = 0
        started = False

        async def counted_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await send_problem(send, self._too_large(), path=scope["path"])


class _BodyTooLarge(BaseException):
    # A BaseException, so that FastAPI's body parsing (which turns any Exception into "error
    # parsing the body") lets it through to ``BodyLimit``.
    pass


class RequestMetrics:
    """``citewise_http_requests_total`` and ``citewise_http_request_seconds`` of every HTTP
    request, by method, route template and status, the latency taken when the response starts
    (its headers: a stream's events come after).

    A plain ASGI wrapper rather than ``@app.middleware("http")``: Starlette runs such a function
    in a task of its own with memory streams between it and the app for every request, and on
    two cores the search door's requests are half HTTP work (docs/operations.md, "Throughput").
    The route is read when the response starts, once the router has put it in the scope.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def counted(message: dict) -> None:
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", "unmatched")
                metrics.HTTP_REQUESTS.labels(scope["method"], route, message["status"]).inc()
                metrics.HTTP_LATENCY.labels(scope["method"], route).observe(
                    time.perf_counter() - started)
            await send(message)

        REQUESTS.started()  # what an ingest run in this process gives way to (pacing.py)
        try:
            await self.app(scope, receive, counted)
        finally:
            REQUESTS.ended()
