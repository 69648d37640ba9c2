"""A real uvicorn server on loopback for tests that need the socket: streams, disconnects,
forwarded headers, and HTTP clients of our own API (the official ``openai`` client)."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from citewise.api.app import uvicorn_options


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> dict:
    """``/healthz`` of a ``citewise serve`` started as ``proc`` (its output in ``log``), once it
    answers and has loaded its parts (no longer ``starting``: ``api/startup.py``); the test
    fails with that output if it exits or stays silent for ``timeout``."""
    import pytest  # here: the benchmarks import this module without the test extra

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            resp = httpx.get(f"{url}/healthz", timeout=2)
            if resp.status_code == 200 and resp.json().get("status") != "starting":
                return resp.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the server did not answer /healthz in {timeout}s:\n{log.read_text()}")


class LiveServer:
    def __init__(self, app, settings) -> None:
        self.app = app
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                **uvicorn_options(settings.server))
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
