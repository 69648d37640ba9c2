"""The FastAPI application: thin routers over the services built by the composition root."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from citewise import __version__
from citewise.api import (
    problems,
    routes_admin,
    routes_console,
    routes_conversations,
    routes_docs,
    routes_ingest,
    routes_library,
    routes_me,
    routes_openai,
    routes_page,
    routes_query,
)
from citewise.api.auth import is_admin
from citewise.api.composition import (
    Door,
    Services,
    build_answering,
    build_door,
    build_services,
)
from citewise.api.forwarded import ForwardedFor, TrustedProxies
from citewise.api.frontdoor import FrontDoor, rule_for
from citewise.api.health import Health, Ready, admin_health
from citewise.api.http_protocol import with_header_timeout
from citewise.api.ingest_metrics import catalog_metrics
from citewise.api.mcp import http_server
from citewise.api.middleware import BodyLimit, RequestMetrics, send_problem
from citewise.api.openapi import EVERY, describe_refusals, describe_security
from citewise.api.reload import ConfigReloader
from citewise.api.settings import ServerSettings, Settings
from citewise.api.startup import StartGate, Startup
from citewise.errors import CitewiseError, ConfigError
from citewise.settings import comma_separated

log = logging.getLogger("citewise.api")
FLUSH_INTERVAL = 1.0  # seconds between writes of usage and rate buckets
COMPACT_INTERVAL = 3600.0  # seconds between foldings of old usage into hourly rows

DESCRIPTION = """
Cited answers over your engineering knowledge: runbooks, wiki pages and code.

* `POST /v1/search` (or `GET /v1/search?q=...`): hybrid dense + BM25 search.
* `POST /v1/answer`: an answer whose sentences cite `[n]` passages, or an abstention.
* `GET /v1/me`: who you are signed in as. `/` is a web page over this API, `/mcp/` an MCP
  server for agents.
* Identity: `Authorization: Bearer <key>` (an API key from `citewise keys create`), a
  Cloudflare Access assertion (`Cf-Access-Jwt-Assertion`) or an OIDC bearer token. Keys that may
  assert identity (the Slack bot's) name the end user in `X-Citewise-User` and
  `X-Citewise-Groups`. On a server bound to loopback without authentication, those headers are
  taken as given.
* Scopes: `search`, `answer`, `ingest`, `admin`. Rate limits answer 429 with `Retry-After` and
  `RateLimit-Policy` / `RateLimit` headers.
* Every response carries `X-Request-Id`. Errors are RFC 9457 problem details with a `hint`.
"""


def uvicorn_options(settings: ServerSettings) -> dict:
    """uvicorn takes the client's address from the socket; ``X-Forwarded-For`` is read by the
    app itself (``forwarded.ForwardedFor``), from the proxies in ``CITEWISE_TRUSTED_PROXIES``
    only. (uvicorn's own reading believes loopback proxies by default, which would let any
    local proxy make every remote caller look local, and for ``*`` takes the address the client
    wrote rather than the one the proxy appended.) The connection limits are in
    ``http_protocol``'s docstring."""
    return {
        "proxy_headers": False,
        "http": with_header_timeout(settings.http_header_timeout,
                                    settings.http_max_header_bytes),
        "timeout_keep_alive": settings.http_keep_alive,
        "h11_max_incomplete_event_size": settings.http_max_header_bytes,
        "limit_concurrency": settings.http_max_concurrency,
    }


def _describe_front_door(app: FastAPI) -> None:
    """The OpenAPI document with how callers authenticate and what the front door refuses: its
    rules decide which operations need a credential and which scope, and which draw on rate
    limits (one definition, ``frontdoor.RULES``)."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = describe_refusals(describe_security(build(), rule_for),
                                                   rule_for)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    settings: Settings | None = None,
    services: Services | None = None,
    *,
    operator_token: str | None = None,
    bind_host: str | None = None,
    startup: Startup | None = None,
) -> FastAPI:
    """Build the app. Pass ``services`` to share already-built ones (tests, embedding), the
    ``operator_token`` that ``citewise serve`` wrote to server.json (a fresh one if none), and
    the address the server binds (``None``: embedded in a process, like loopback): a server
    reachable from other machines refuses to start without an identity method. ``startup``:
    the parts `citewise serve` loads in the background (``api/startup.py``); without it the
    app is ready at once."""
    owned = services is None
    settings = settings or (services.settings if services is not None else Settings())
    if settings.identity.api_keys:
        raise ConfigError("CITEWISE_API_KEYS is no longer read: keys live in the catalog",
                          hint="create them with `citewise keys create NAME --scopes ...`")
    token = operator_token or secrets.token_urlsafe(32)

    def open_door(app: FastAPI) -> None:
        app.state.door = build_door(settings, app.state.services.stores, operator_token=token,
                                    bind_host=bind_host)
        app.state.answering = build_answering(app.state.services, app.state.door)
        # `citewise serve` replaces it with one that also runs the ingest schedule.
        app.state.reloader = ConfigReloader(app.state.services, audit=app.state.door.audit)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if app.state.services is None:
            app.state.services = build_services(settings)
        if app.state.door is None:
            open_door(app)
        flusher = _Flusher(app.state.door, app.state.services)
        flusher.start()
        # The MCP server is made per start: its session manager runs once per instance.
        agents = http_server(lambda: app.state.services, lambda: app.state.answering)
        app.state.mcp_app = agents.streamable_http_app(
            streamable_http_path="/", stateless_http=True, host=bind_host or "127.0.0.1")
        app.state.startup.serving()  # the server binds next: the heavy parts may load now
        try:
            async with agents.session_manager.run():
                yield
        finally:
            app.state.mcp_app = None
            flusher.stop()
            if owned and app.state.services is not None:
                app.state.services.close()

    app = FastAPI(
        title="citewise",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        responses=EVERY,
        # Served by routes_docs from a package's files: FastAPI's would load from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    app.state.door = None
    app.state.answering = None
    app.state.reloader = None
    app.state.startup = startup or Startup.done()
    _describe_front_door(app)
    app.state.operator_token = token
    if services is not None:
        open_door(app)
    problems.install(app)
    # The last one added runs first: the request metrics, CORS preflights, then the front door
    # (request id, who is calling, scopes, rate limits), then the body limit, then the routes.
    server = settings.server
    # Innermost: a request that needs a part still loading waits for it (api/startup.py).
    app.add_middleware(StartGate, startup=lambda: app.state.startup)
    app.add_middleware(BodyLimit, max_bytes=server.max_request_bytes)
    app.add_middleware(FrontDoor)
    origins = comma_separated(server.cors_origins)
    if origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["authorization", "content-type", "x-request-id"],
            expose_headers=["x-request-id", "ratelimit", "ratelimit-policy", "retry-after"],
            max_age=600)
    if server.trusted_proxies:
        try:
            TrustedProxies(server.trusted_proxies)  # a bad entry is a start-up error
        except ValueError as e:
            raise ConfigError(f"CITEWISE_TRUSTED_PROXIES: {e}",
                              hint="comma-separated addresses or networks: 10.0.0.5,"
                                   "10.1.0.0/16") from None
        # Outermost: the front door must see the client's address, not the proxy's.
        app.add_middleware(ForwardedFor, trusted=server.trusted_proxies)
    # Outermost: every answer is counted, the front door's refusals and CORS preflights too.
    app.add_middleware(RequestMetrics)

    app.include_router(routes_query.router)
    app.include_router(routes_library.router)
    app.include_router(routes_ingest.router)
    app.include_router(routes_admin.router)
    app.include_router(routes_console.router)
    app.include_router(routes_openai.router)
    app.include_router(routes_conversations.router)
    app.include_router(routes_me.router)
    app.include_router(routes_page.router)
    app.include_router(routes_docs.router)
    app.state.mcp_app = None
    app.mount("/mcp", _McpMount(app), name="mcp")

    @app.get("/healthz", tags=["ops"],
             summary="Liveness, and for admins the state of the database and the index",
             response_model=Health, response_model_exclude_unset=True)
    def healthz(request: Request) -> dict:
        """Anyone gets ``status`` (the process serves; nothing else is touched, so a probe
        never fails for an outage of the database, which requests meanwhile answer with 503):
        ``starting`` with the parts still ``loading`` while a fresh server loads them behind
        its open port (always 200: alive; ``/readyz`` says when to send traffic), ``ok``, or
        ``degraded`` / ``failed`` when a part failed to load. Admins (an admin key or group,
        or this machine in local mode) also get the database, the vector store and the counts,
        which say how much restricted content exists."""
        startup: Startup = request.app.state.startup
        if not is_admin(request):
            return startup.public()
        health = admin_health(request.app.state.services, request.app.state.door)
        if startup.status == "ok":
            return health
        # Loading, or a part failed to load: that is the state, whatever the stores say.
        problems = [p for p in (startup.problem(), health.get("problem")) if p]
        return {**health, **startup.public(),
                "problem": "; ".join(problems) if problems else None}

    @app.get("/readyz", tags=["ops"],
             summary="Readiness: 200 once a starting server has loaded everything",
             response_model=Ready, response_model_exclude_unset=True)
    def readyz(request: Request):
        """For load balancers and Kubernetes' readinessProbe: 503 (problem details naming
        what is still loading) while a fresh server loads what questions need behind its open
        port (the query encoder, the start-up checks), 200 after (naming what still loads
        behind: torch's model, the parsers). Liveness is ``/healthz``, which answers 200 all
        along. Public, like ``/healthz``, and touches nothing."""
        status, body = request.app.state.startup.readiness()
        if status == 200:
            return body
        return JSONResponse(body, status_code=status, media_type="application/problem+json")

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics (admin scope)",
             response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition format"}})
    def prometheus(request: Request) -> Response:
        # The ingest gauges are read from the catalog, so they cover every process's runs.
        services = request.app.state.services
        ingest = catalog_metrics(services.catalog, services.sources)
        return Response(generate_latest() + ingest, media_type=CONTENT_TYPE_LATEST)

    return app


class _McpMount:
    """/mcp: the MCP server of the running app (made in the lifespan), behind the same front
    door as every route."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        inner = self.app.state.mcp_app
        if inner is None:
            await send_problem(send, _McpNotStarted("the MCP server starts with the app",
                                                    hint="retry in a moment"))
            return
        await inner(scope, receive, send)


class _McpNotStarted(CitewiseError):
    status_code = 503
    code = "not_started"


class _Flusher:
    """Writes usage and rate buckets every second, folds old usage and forgets idle
    conversations hourly, and flushes once more at shutdown: recording a request never waits
    on the database."""

    def __init__(self, door: Door, services: Services) -> None:
        self.door = door
        self.services = services
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="citewise-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._flush()

    def _run(self) -> None:
        last_compact = 0.0
        while not self._stop.wait(FLUSH_INTERVAL):
            self._flush()
            if time.monotonic() - last_compact > COMPACT_INTERVAL:
                last_compact = time.monotonic()
                try:
                    self.door.usage.compact()
                    if self.services.conversations is not None:
                        self.services.conversations.expire()
                except Exception:
                    log.exception("hourly upkeep (usage roll-up, idle conversations) failed")

    def _flush(self) -> None:
        try:
            self.door.flush()
        except CitewiseError as e:
            # The database is away: said once, not every second; what was not written is
            # kept and written by the flush after it answers again.
            if not self._failing:
                log.warning("writing usage and rate limits failed: %s; keeping them and "
                            "retrying every %.0f s", e.message, FLUSH_INTERVAL)
            self._failing = True
            return
        except Exception:
            log.exception("writing usage and rate limits failed (will retry)")
            return
        if self._failing:
            log.info("usage and rate limits are written again")
            self._failing = False
