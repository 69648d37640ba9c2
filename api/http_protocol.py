"""How ``citewise serve`` speaks HTTP/1.1: uvicorn's h11 protocol, with a deadline for reading a
request's head.

uvicorn closes a connection that stays idle after a response (``timeout_keep_alive``), but has
no limit on how long a new connection, or the next request on a kept-alive one, may take to send
its request line and headers: a connection that opens and sends nothing, or a byte a minute,
stays open for good, and a few hundred of them hold the server's file descriptors. Here each
connection must finish a request's head within ``CITEWISE_HTTP_HEADER_TIMEOUT`` seconds of
opening or of its previous response, or it is closed. The body is not under this deadline
(the body limit and the routes' own deadlines govern it).

The other limits are uvicorn's own options (``app.uvicorn_options``): the most connections and
requests at once (``limit_concurrency``: over it, a 503), and the largest request head
(``h11_max_incomplete_event_size``).

A request h11 cannot parse (NUL, CR or LF inside a header value, a head larger than the limit)
never reaches the app, so the front door cannot answer it. uvicorn answers those with a
plain-text 400 and closes the socket at once, and when the client is still sending (the rest of
a 200 KB header) that close is a TCP reset that loses the answer. Here the answer is a problem
document (431 for a head over the limit, else 400), the connection is half-closed after it, and
what the client still sends is read and dropped for a moment before closing, so the client
reads the answer rather than a reset.

Neither deadline closes a connection whose next request is already waiting in its socket. A
timer and the bytes that arrive just before it fires can reach the event loop in the same
turn, the timer first, when the loop has been kept from running (by a thread holding Python's
interpreter lock, as the embedded engine does through a flush at the end of an ingest run):
closing then, with the request unread, resets the connection under a client that did nothing
wrong (the likely cause of the one reset in the 30-minute soak of bench/results/soak.md). The
bytes are read instead, and the request is answered.
"""

from __future__ import annotations

import asyncio
import json
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol

from citewise.errors import problem_body

DRAIN_SECONDS = 2.0  # how long the rest of an unparseable request is read and dropped
RECHECK_SECONDS = 1.0  # a head deadline that found bytes waiting looks again after this


def _bytes_waiting(transport: asyncio.BaseTransport) -> bool:
    """Whether the connection's socket holds bytes the event loop has not read yet. Peeked on a
    duplicate of the descriptor (asyncio's socket wrapper does not offer ``recv``), without
    blocking and without taking them."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        with socket.socket(fileno=socket.dup(sock.fileno())) as peek:
            return bool(peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:  # closed meanwhile, or not a stream socket: nothing to wait for
        return False


def _refusal(status: int, detail: str, hint: str) -> bytes:
    code, reason = {431: ("header_too_large", "Request Header Fields Too Large")}.get(
        status, ("bad_request", "Bad Request"))
    body = json.dumps(problem_body(status, code, detail, hint)).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/problem+json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def with_header_timeout(seconds: float, max_head: int) -> type[H11Protocol]:
    """An h11 protocol class whose connections must send a request's head within ``seconds``,
    and whose unparseable requests (a head over ``max_head`` bytes) get a problem document."""

    class HeaderDeadlineProtocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None
        _draining = False

        def data_received(self, data: bytes) -> None:
            if self._draining:
                return  # the rest of a refused request: dropped
            super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            self._disarm()
            if len(self.conn.trailing_data[0]) >= max_head:
                answer = _refusal(431, f"the request's line and headers are larger than "
                                       f"{max_head} bytes",
                                  "send fewer or shorter headers; the limit is "
                                  "CITEWISE_HTTP_MAX_HEADER_BYTES")
            else:
                answer = _refusal(400, f"the request is not valid HTTP/1.1 ({msg.rstrip('.')})",
                                  "header values may not hold NUL, CR or LF; send one "
                                  "well-formed request")
            self._draining = True
            self.transport.write(answer)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(DRAIN_SECONDS, self.transport.close)

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            # uvicorn types ``cycle`` as always set; it is None until the first request.
            if self.cycle is not None and not self.cycle.response_complete:  # type: ignore[redundant-expr]
                self._disarm()  # the head arrived: the request is the app's now

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this connection gets its own deadline

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _too_slow(self) -> None:
            self._head_deadline = None
            if not self.transport.is_closing() and (
                    self.cycle is None or self.cycle.response_complete):  # type: ignore[redundant-expr]
                if _bytes_waiting(self.transport):
                    # Looked at again shortly: a head that then still is not complete is
                    # closed, so a slow sender gains a moment, not a new deadline.
                    self._head_deadline = self.loop.call_later(RECHECK_SECONDS, self._too_slow)
                    return
                self.transport.close()

        def timeout_keep_alive_handler(self) -> None:
            if _bytes_waiting(self.transport):
                return  # the next request is here: reading it cancels the keep-alive anyway
            super().timeout_keep_alive_handler()

    return HeaderDeadlineProtocol
