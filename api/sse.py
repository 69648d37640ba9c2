"""Server-sent events from a blocking producer, with keep-alives and cancellation.

Answers are produced by blocking code (search, the model's HTTP stream), so the producer runs
in a worker thread and hands events to the response through a queue. While it is quiet the
response sends ``: ping`` comments (proxies such as nginx and Cloudflare close idle streams).
When the client goes away, Starlette cancels the response; the producer is told, stops at its
next event and closes its iterator, which closes the model's upstream request. A route that
hands its own ``cancelled`` event to ``relay`` and wraps the answer's source in ``until`` stops
between two of the model's tokens, not at the next event it sends (text held back by the
guardrails may be a long token without a space), and knows not to keep an answer nobody received.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from fastapi.sse import KEEPALIVE_COMMENT, EventSourceResponse, format_sse_event

from citewise.errors import CitewiseError, problem_body

log = logging.getLogger("citewise.api")

_END = object()


def event_schema(events: list[str] | None) -> dict:
    """The OpenAPI schema of one server-sent event of a ``text/event-stream`` response: its
    ``event`` name (one of ``events``; absent when None) and its ``data``, a JSON text."""
    properties: dict = {"data": {"type": "string", "description": "JSON"}}
    if events:
        properties["event"] = {"type": "string", "enum": events}
    return {"type": "object", "properties": properties, "required": ["data"]}


def sse_bytes(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False,
                                                            separators=(",", ":"))
    return format_sse_event(data_str=payload, event=event)


def until(cancelled: threading.Event, events: Iterator[Any]) -> Iterator[Any]:
    """``events`` until ``cancelled`` is set (the client went away): then the source is closed,
    which closes the model's upstream request, and nothing more is produced."""
    try:
        for item in events:
            if cancelled.is_set():
                return
            yield item
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


async def relay(events: Iterator[Any], encode: Callable[[Any], bytes | None], *,
                keepalive: float = 15.0,
                on_error: Callable[[BaseException], bytes] | None = None,
                cancelled: threading.Event | None = None) -> AsyncIterator[bytes]:
    """Run ``events`` in a worker thread and yield each one encoded (``encode`` may return
    None to send nothing); a ``: ping`` comment after ``keepalive`` seconds of quiet.
    ``cancelled`` is set when the client goes (pass one to see it from the producer)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    cancelled = cancelled if cancelled is not None else threading.Event()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is gone: the response ended
            cancelled.set()

    def produce() -> None:
        try:
            for item in events:
                if cancelled.is_set():
                    break
                put(item)
        except BaseException as e:  # reported to the client as an error event
            put(e)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    log.exception("closing an event stream failed")
            put(_END)

    context = contextvars.copy_context()  # the request id follows into the worker's logs
    threading.Thread(target=context.run, args=(produce,), daemon=True,
                     name="citewise-sse").start()
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=keepalive)
            except TimeoutError:
                yield KEEPALIVE_COMMENT
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                if not isinstance(item, CitewiseError):
                    log.error("an event stream failed", exc_info=item)
                if on_error is not None:
                    yield on_error(item)
                return
            data = encode(item)
            if data:
                yield data
    finally:
        cancelled.set()


def event_response(stream: AsyncIterator[bytes]) -> EventSourceResponse:
    """The SSE response; ``X-Accel-Buffering: no`` tells nginx not to buffer it."""
    return EventSourceResponse(stream, headers={"X-Accel-Buffering": "no"})


def error_problem(e: BaseException) -> dict:
    if isinstance(e, CitewiseError):
        return e.problem()
    return problem_body(500, "internal_error", "the answer failed while streaming",
                        "the server log has the details (look for the request id)")
