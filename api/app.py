"""The FastAPI application: thin routers over the services built by the composition root."""

from __future__ import annotations

import secrets
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from citewise import __version__, metrics
from citewise.api import problems, routes_ingest, routes_library, routes_query
from citewise.api.auth import is_operator, key_checker, require_operator
from citewise.api.composition import Services, build_services
from citewise.api.middleware import BodyLimit, KeyGate
from citewise.ingest.consistency import check
from citewise.settings import Settings

DESCRIPTION = """
Cited answers over your engineering knowledge: runbooks, wiki pages and code.

* `POST /v1/search` (or `GET /v1/search?q=...`): hybrid dense + BM25 search.
* `POST /v1/answer`: an answer whose sentences cite `[n]` passages, or an abstention.
* Identity: `X-Citewise-User` and `X-Citewise-Groups` headers (set by a trusted front end);
  with `CITEWISE_API_KEYS` set, also `Authorization: Bearer <key>`.
* Errors are RFC 9457 problem details with a `hint`.
"""


def uvicorn_options(settings: Settings) -> dict:
    """How uvicorn learns the client's address: from the socket, unless the operator names the
    reverse proxies whose ``X-Forwarded-For`` to believe. (uvicorn believes loopback proxies by
    default, which would let any local proxy make every remote caller look local.)"""
    if settings.trusted_proxies:
        return {"proxy_headers": True, "forwarded_allow_ips": settings.trusted_proxies}
    return {"proxy_headers": False}


def create_app(
    settings: Settings | None = None,
    services: Services | None = None,
    *,
    operator_token: str | None = None,
) -> FastAPI:
    """Build the app. Pass ``services`` to share already-built ones (tests, embedding), and
    the ``operator_token`` that ``citewise serve`` wrote to server.json (a fresh one if none)."""
    owned = services is None
    settings = settings or (services.settings if services is not None else Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if app.state.services is None:
            app.state.services = build_services(settings)
        yield
        if owned and app.state.services is not None:
            app.state.services.close()

    app = FastAPI(
        title="citewise",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.operator_token = operator_token or secrets.token_urlsafe(32)
    problems.install(app)
    # The last one added runs first: the key check, then the body limit, then the routes.
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(KeyGate, check=key_checker(settings.api_key_list()))

    @app.middleware("http")
    async def _metrics(request: Request, call_next):
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.HTTP_REQUESTS.labels(request.method, path, response.status_code).inc()
        metrics.HTTP_LATENCY.labels(request.method, path).observe(time.perf_counter() - started)
        return response

    app.include_router(routes_query.router)
    app.include_router(routes_library.router)
    app.include_router(routes_ingest.router)

    @app.get("/healthz", tags=["ops"], summary="Liveness, and for operators the index's state")
    def healthz(request: Request) -> dict:
        """Anyone gets ``status``; operators (a key holder, or this machine when keyless) also
        get the counts, which say how much restricted content exists."""
        s: Services = request.app.state.services
        if not is_operator(request):
            return {"status": "ok"}
        health = check(s.catalog, s.index)
        return {
            "status": "ok" if health.ok else "degraded",
            "problem": health.problem(),
            "version": __version__,
            "index": s.index_kind,
            "blob_store": s.settings.blob_store,
            "answers": "llm" if s.settings.llm_base_url else "extractive",
            "documents": s.catalog.count_documents(),
            "chunks": health.catalog_chunks,
            "points": health.points,
            "open_swaps": health.open_swaps,
        }

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics (operators)",
             dependencies=[Depends(require_operator)])
    def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
