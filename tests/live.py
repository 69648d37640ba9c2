"""A real uvicorn server on loopback for tests that need the socket: streams, disconnects,
forwarded headers, and HTTP clients of our own API (the official ``openai`` client)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn

from citewise.api.app import uvicorn_options


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, app, settings) -> None:
        self.app = app
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                **uvicorn_options(settings))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        url = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                return url
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError("server did not start")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
