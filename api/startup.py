"""Loading in the background: `citewise serve` binds at once and loads its heavy parts behind it.

Importing torch and sentence-transformers and loading the embedding model takes seconds, the
parsers (unstructured, spaCy) seconds more; a server that loaded them before binding its port
left load balancers and probes with a closed port for all that time, and a restart looked like
an outage. Here the port opens first and a thread loads the parts in order (what requests need
first; `citewise serve`'s list is ``api/cli/serve.py``'s ``start_parts``). Meanwhile:

* ``/healthz`` (liveness) answers 200 with ``{"status": "starting", "loading": [...]}``: the
  process is alive, do not restart it;
* ``/readyz`` (readiness) answers 503, a problem document naming what is still loading, so that
  a load balancer sends no traffic yet; 200 once the parts requests need are loaded (the
  others go on loading behind, named in its ``loading``);
* a request that needs a part still loading waits for it (``StartGate``, at most
  ``WAIT_SECONDS``) rather than failing: the first answer comes as soon as it can.

A part that fails to load is logged with its error and said by ``/healthz`` (``degraded``, or
``failed``); a part marked ``fatal`` (the embedding model: nothing can be answered without it)
also stops the server, which exits non-zero so that a supervisor sees the failure.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from citewise.errors import problem_body

log = logging.getLogger("citewise.api")

# How long a request that needs a part still loading waits for it before a 503 with Retry-After:
# longer than the model's load on a busy two-core machine, shorter than clients' own timeouts.
WAIT_SECONDS = 60.0
POLL_SECONDS = 0.02

Status = Literal["starting", "ok", "degraded", "failed"]

# Paths answered while parts load: the probes themselves, the page and the API description.
# Every other route waits (``StartGate``).
NEVER_WAIT = ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json")


@dataclass
class Part:
    """One thing loaded in the background. ``needed``: requests wait for it (the query encoder,
    the start-up checks); ``fatal``: the server cannot serve without it, and stops when it
    fails (the model)."""

    name: str
    load: Callable[[], None]
    needed: bool = False
    fatal: bool = False
    # Loaded once the port is open (``Startup.serving``): importing torch beside the server's
    # own imports would delay the port by as long again, on two cores with one GIL.
    after_bind: bool = False


# How long a part loaded after the bind waits for it: a server that never says it serves (an
# app run by another ASGI server, say) still gets it.
BIND_WAIT_SECONDS = 30.0


class Startup:
    """What a starting server has loaded, is loading, and failed to load; one per server.
    ``Startup.done()`` (nothing to load: an app built around ready services) is ``ok`` at once."""

    def __init__(self, parts: list[Part], *, on_fatal: Callable[[], None] | None = None) -> None:
        self.parts = parts
        self.on_fatal = on_fatal
        self._lock = threading.Lock()
        self._loaded: dict[str, float] = {}  # name -> seconds it took
        self._failed: dict[str, str] = {}  # name -> what went wrong
        self._needed = threading.Event()  # every needed part loaded, or one failed
        self._finished = threading.Event()
        self._serving = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = time.perf_counter()
        if not any(p.needed for p in parts):
            self._needed.set()
        if not parts:
            self._finished.set()

    @classmethod
    def done(cls) -> Startup:
        return cls([])

    def serving(self) -> None:
        """The app is about to accept connections: the parts held for it may load now."""
        self._serving.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="citewise-startup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for part in self.parts:
            if part.after_bind:
                self._serving.wait(BIND_WAIT_SECONDS)
            began = time.perf_counter()
            try:
                part.load()
            except BaseException as e:  # noqa: BLE001 (a failure of any kind is said, not lost)
                message = f"{type(e).__name__}: {e}" if not str(e).startswith(type(e).__name__) \
                    else str(e)
                with self._lock:
                    self._failed[part.name] = message
                log.error("start-up: loading %s failed: %s", part.name, message,
                          exc_info=not part.fatal or None)
                if part.fatal:
                    log.critical("start-up: the server cannot answer without %s; stopping "
                                 "(exit status 1)", part.name)
                    self._needed.set()
                    self._finished.set()
                    if self.on_fatal is not None:
                        self.on_fatal()
                    return
            else:
                took = time.perf_counter() - began
                with self._lock:
                    self._loaded[part.name] = took
                log.info("start-up: %s loaded in %.1f s", part.name, took)
            if all(p.name in self._loaded or p.name in self._failed
                   for p in self.parts if p.needed):
                self._needed.set()
        self._finished.set()
        log.info("start-up: done %.1f s after the port opened%s",
                 time.perf_counter() - self.started,
                 "" if not self._failed else f" ({len(self._failed)} failed: see above)")

    @property
    def status(self) -> Status:
        with self._lock:
            if any(p.fatal and p.name in self._failed for p in self.parts):
                return "failed"
            if not self._finished.is_set():
                return "starting"
            return "degraded" if self._failed else "ok"

    @property
    def loading(self) -> list[str]:
        """The parts not loaded yet (nor failed), in the order they load."""
        with self._lock:
            return [p.name for p in self.parts
                    if p.name not in self._loaded and p.name not in self._failed]

    @property
    def failed(self) -> dict[str, str]:
        with self._lock:
            return dict(self._failed)

    @property
    def fatal_failure(self) -> bool:
        return self.status == "failed"

    def problem(self) -> str | None:
        failed = self.failed
        if not failed:
            return None
        return "; ".join(f"loading {name} failed: {why}" for name, why in failed.items())

    def needed_failure(self) -> str | None:
        with self._lock:
            return next((f"loading {p.name} failed: {self._failed[p.name]}"
                         for p in self.parts if p.needed and p.name in self._failed), None)

    def wait_needed(self, timeout: float) -> bool:
        """Block until the parts requests need are loaded (or one failed); False on timeout."""
        return self._needed.wait(timeout)

    def wait_finished(self, timeout: float) -> bool:
        return self._finished.wait(timeout)

    def public(self) -> dict:
        """What anyone may see: the status and the names of the parts still loading."""
        status = self.status
        return {"status": status, "loading": self.loading} if status == "starting" \
            else {"status": status}

    def readiness(self) -> tuple[int, dict]:
        """``/readyz``: 200 once the parts requests need are loaded (those still loading
        behind them named in ``loading``; a part that failed without being fatal leaves the
        server ready: it answers, and ``/healthz`` says what failed); 503 problem details
        naming what is loading, or what failed, before."""
        status = self.status
        if status in ("ok", "degraded"):
            return 200, {"status": status}
        if status == "starting" and self._needed.is_set():
            return 200, {"status": "ok", "loading": self.loading}
        if status == "starting":
            loading = self.loading
            body = problem_body(503, "starting",
                                "the server is starting: still loading " + ", ".join(loading),
                                "retry in a few seconds; /healthz answers 200 meanwhile")
            return 503, {**body, "loading": loading}
        body = problem_body(503, "start_failed", self.problem() or "start-up failed",
                            "see the server's log; it stops and exits with status 1")
        return 503, {**body, "failed": self.failed}


Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class StartGate:
    """Holds requests that need a part still loading until it is loaded (at most
    ``wait_seconds``), then lets them through; answers 503 with ``Retry-After`` when it takes
    longer or failed. Innermost of the middleware: a request is authenticated and counted first,
    and only a request the server will serve waits."""

    def __init__(self, app: ASGIApp, startup: Callable[[], Startup],
                 wait_seconds: float = WAIT_SECONDS) -> None:
        self.app = app
        self.startup = startup
        self.wait_seconds = wait_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(NEVER_WAIT):
            await self.app(scope, receive, send)
            return
        startup = self.startup()
        if not startup.wait_needed(0):
            # Polled on the event loop rather than waited for on a thread: a burst of requests
            # at start must not take every worker thread, and /healthz answers meanwhile.
            deadline = time.monotonic() + self.wait_seconds
            while not startup.wait_needed(0) and time.monotonic() < deadline:
                await asyncio.sleep(POLL_SECONDS)
            if not startup.wait_needed(0):
                await _send(send, 503, problem_body(
                    503, "starting", "the server is still loading " + ", ".join(
                        startup.loading) + f" after {self.wait_seconds:.0f} s",
                    "retry shortly; /readyz says when the server is ready"),
                    retry_after=5)
                return
        failure = startup.needed_failure()
        if failure is not None:
            await _send(send, 503, problem_body(503, "start_failed", failure,
                                                "see the server's log"))
            return
        await self.app(scope, receive, send)


async def _send(send: Send, status: int, body: dict, retry_after: int | None = None) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/problem+json"),
               (b"content-length", str(len(data)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
