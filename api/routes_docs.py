"""The API reference at ``/docs``: Swagger UI from the files the ``fastapi-offline`` package ships.

FastAPI's own ``/docs`` page loads Swagger UI from a CDN (jsdelivr), so on a network without
internet, where citewise is meant to run, it stays blank. Here the page is FastAPI's, and its
script and style are the files the package ships (Swagger UI 5, which reads the OpenAPI 3.1
that FastAPI writes; ``swagger-ui-bundle``'s 4.15 cannot), served by us: nothing leaves the
network. Only the package's files are used, not its app class. (``/redoc``, which would load
its script from a CDN too, is not offered.)

The files are public, like ``/openapi.json``: they hold no knowledge. A call made from the
reference's "Try it out" goes through the same front door as everyone else's, with the key its
Authorize button took (the document's security schemes, ``openapi.describe_security``).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from citewise.api.static import etag_of, file_response
from citewise.errors import NotFoundError

router = APIRouter(include_in_schema=False)

# The three files the page needs, with their media types; nothing else of the package is served.
FILES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
         "swagger-ui.css": "text/css; charset=utf-8",
         "favicon.png": "image/png"}


def _folder() -> Path:
    return Path(str(files("fastapi_offline").joinpath("static")))


def _load() -> dict[str, tuple[bytes, str, str]]:
    folder = _folder()
    out = {}
    for name, media_type in FILES.items():
        body = (folder / name).read_bytes()
        out[name] = (body, media_type, etag_of(body))
    return out


_assets: dict[str, tuple[bytes, str, str]] | None = None


@router.get("/docs")
def reference(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json", title="citewise API reference",
        swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
        swagger_favicon_url=f"{root}/docs/assets/favicon.png")


@router.api_route("/docs/assets/{name}", methods=["GET", "HEAD"])
def asset(name: str, request: Request) -> Response:
    global _assets
    if _assets is None:  # read on first use: a server nobody browses never reads 1 MB
        _assets = _load()
    found = _assets.get(name)
    if found is None:
        raise NotFoundError(f"no API reference file named {name!r}",
                            hint="the API reference lives at /docs")
    return file_response(request, *found)
