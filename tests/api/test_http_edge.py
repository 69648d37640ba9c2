"""The HTTP edge, on a real uvicorn server with the options ``citewise serve`` gives it
(``app.uvicorn_options``): what the security and fault probe of issue 30 (item 8) sent, and
what comes back now. Raw sockets where the request is one no well-behaved client would send."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from citewise.api.app import create_app
from tests.kb import stored_rows
from tests.live import LiveServer


@pytest.fixture
def server(make_services):
    def start(**settings):
        services = make_services(**settings)
        return services, LiveServer(create_app(services=services), services.settings)

    return start


def exchange(url: str, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send ``raw`` on a fresh connection and read until the server closes it or goes quiet."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def test_a_control_character_in_a_header_is_a_problem_document(server):
    services, live = server()
    with live as url:
        for value in ("dana\x01", "a\x1bb", "x\x7f"):
            resp = httpx.get(f"{url}/v1/me", headers={"X-Citewise-User": value})
            assert resp.status_code == 400, (value, resp.text)
            assert resp.headers["content-type"] == "application/problem+json"
            assert "control character" in resp.json()["detail"]
            assert "x-request-id" in resp.headers
        # NUL and CR never reach the app (h11 refuses them): the server's protocol answers
        # with a problem document of its own and closes, never a reset or a hang.
        for raw in (b"GET /v1/me HTTP/1.1\r\nHost: x\r\nX-Citewise-User: a\x00b\r\n\r\n",
                    b"GET /v1/me HTTP/1.1\r\nHost: x\r\nX-Citewise-User: a\rb\r\n\r\n"):
            answer = exchange(url, raw)
            assert answer.startswith(b"HTTP/1.1 400 "), raw
            assert b"content-type: application/problem+json" in answer
            assert b'"status": 400' in answer


def test_a_name_in_utf8_comes_back_as_written(server):
    services, live = server()
    with live as url:
        resp = httpx.get(f"{url}/v1/me", headers=[(b"X-Citewise-User", "zoë".encode())])
        assert resp.status_code == 200, resp.text
        me = resp.json()
        assert me["user"] == "zoë" and me["principal"] == "user:zoë", me
        # A latin-1 value that is not UTF-8 is read as latin-1, as before.
        latin = httpx.get(f"{url}/v1/me", headers=[(b"X-Citewise-User", "zoë".encode("latin-1"))])
        assert latin.json()["user"] == "zoë"
    # The usage log records the same name (written when the server stops).
    principals = {r[0] for r in stored_rows(services).execute(
        "SELECT principal FROM usage")}
    assert "user:zoë" in principals, principals


def test_the_groups_header_is_bounded(server):
    services, live = server(max_asserted_groups=5, max_group_name=12)
    with live as url:
        ok = httpx.get(f"{url}/v1/me", headers={"X-Citewise-Groups": "a,b,c,d,e"})
        assert ok.status_code == 200 and len(ok.json()["groups"]) == 5
        many = httpx.get(f"{url}/v1/me", headers={"X-Citewise-Groups": "a,b,c,d,e,f"})
        assert many.status_code == 400
        assert many.headers["content-type"] == "application/problem+json"
        assert "6 groups, more than the 5" in many.json()["detail"]
        long = httpx.get(f"{url}/v1/me", headers={"X-Citewise-Groups": "a," + "g" * 13})
        assert long.status_code == 400 and "longer than 12" in long.json()["detail"]


def test_the_default_bounds_refuse_five_thousand_groups(server):
    services, live = server()
    with live as url:
        groups = ",".join(f"g{i}" for i in range(5000))  # ~29 KB: within the head limit
        resp = httpx.get(f"{url}/v1/me", headers={"X-Citewise-Groups": groups})
        assert resp.status_code == 400 and "more than the 256" in resp.json()["detail"]


def test_a_huge_header_is_a_clean_431_not_a_reset(server):
    services, live = server()
    with live as url:
        raw = (b"GET /v1/me HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200_000 + b"\r\n\r\n")
        answer = exchange(url, raw)  # a reset would raise ConnectionResetError here
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"content-type: application/problem+json" in answer
        assert b"larger than 65536 bytes" in answer
        # The server is fine afterwards.
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_a_connection_that_sends_no_request_is_closed(server):
    services, live = server(http_header_timeout=1.0, http_keep_alive=1.0)
    with live as url:
        host, port = url.removeprefix("http://").split(":")
        silent = socket.create_connection((host, int(port)), timeout=10)
        trickle = socket.create_connection((host, int(port)), timeout=10)
        started = time.monotonic()
        trickle.sendall(b"GET /healthz HTTP/1.1\r\n")
        for _ in range(3):  # a byte every half second never finishes the head
            time.sleep(0.5)
            try:
                trickle.sendall(b"X")
            except OSError:
                break
        assert silent.recv(1) == b""  # closed by the server
        assert time.monotonic() - started < 5
        try:
            assert trickle.recv(1) == b""
        except ConnectionResetError:
            pass  # closed with our unread bytes: a reset is how that looks
        silent.close()
        trickle.close()
        # A request that arrives in time is answered, and its connection kept for the next.
        with httpx.Client() as client:
            assert client.get(f"{url}/healthz").status_code == 200
            time.sleep(0.5)
            assert client.get(f"{url}/healthz").status_code == 200


@pytest.mark.parametrize("deadline", ["keep-alive", "head"])
def test_a_request_waiting_when_a_deadline_fires_is_answered_not_reset(deadline):
    """The soak's reset (bench/results/soak.md): after a response, a client sends its next
    request on the kept-alive connection, and the server's deadline fires in the same turn of
    the event loop, before the loop has read the bytes (as when a thread holding the
    interpreter lock kept the loop from running). The connection stays, and the request is
    answered. Driven on a socket pair so that the timer provably comes first."""
    import asyncio

    import uvicorn
    from uvicorn.server import ServerState

    from citewise.api.app import uvicorn_options
    from citewise.api.settings import ServerSettings

    async def hello(scope, receive, send):  # the app does not matter here: the protocol does
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    request = b"GET / HTTP/1.1\r\nhost: citewise\r\n\r\n"

    async def read_response(client: socket.socket) -> bytes:
        loop = asyncio.get_running_loop()
        out = b""
        while not out.endswith(b"ok"):
            chunk = await asyncio.wait_for(loop.sock_recv(client, 4096), 5)
            if not chunk:
                break
            out += chunk
        return out

    async def scenario() -> tuple[bytes, bytes, bool]:
        options = uvicorn_options(ServerSettings())
        protocol_class = options.pop("http")
        config = uvicorn.Config(hello, log_config=None, **options)
        config.load()
        served, client = socket.socketpair()
        client.setblocking(False)
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_accepted_socket(
            lambda: protocol_class(config, ServerState(), {}), served)
        await loop.sock_sendall(client, request)
        first = await read_response(client)
        client.send(request)  # the next request, in the socket, not yet read by the loop
        if deadline == "keep-alive":
            protocol.timeout_keep_alive_handler()
        else:
            protocol._too_slow()
        closed = transport.is_closing()
        second = b"" if closed else await read_response(client)
        transport.close()
        client.close()
        return first, second, closed

    first, second, closed = asyncio.run(scenario())
    assert first.startswith(b"HTTP/1.1 200")
    assert not closed
    assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"ok")
