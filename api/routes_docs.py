"""The API reference at ``/docs``: Swagger UI from the files the ``fastapi-offline`` package ships.

FastAPI's own ``/docs`` page loads Swagger UI from a CDN (jsdelivr), so on a network without
internet, where citewise is meant to run, it stays blank. Here the script and style are the
files the package ships (Swagger UI 5, which reads the OpenAPI 3.1 that FastAPI writes;
``swagger-ui-bundle``'s 4.15 cannot), served by us: nothing leaves the network. Only the
package's files are used, not its app class. (``/redoc``, which would load its script from a
CDN too, is not offered.)

The page is ours, not FastAPI's ``get_swagger_ui_html``, whose inline ``<script>`` would need
``'unsafe-inline'``: Swagger UI is started by ``reference/swagger-init.js``, and the page is
served with ``DOCS_CSP``, which allows script from this server only. Styles may be inline
(Swagger UI's components set them); a style cannot run code.

The files are public, like ``/openapi.json``: they hold no knowledge. A call made from the
reference's "Try it out" goes through the same front door as everyone else's, with the key its
Authorize button took (the document's security schemes, ``openapi.describe_security``).
"""

from __future__ import annotations

from html import escape
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from citewise.api.static import etag_of, file_response
from citewise.errors import NotFoundError

router = APIRouter(include_in_schema=False)

# The three files the page needs from the package, with their media types; nothing else of the
# package is served. Plus our own script that starts it.
FILES = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
         "swagger-ui.css": "text/css; charset=utf-8",
         "favicon.png": "image/png"}
INIT = "swagger-init.js"

# Script only from this server (no inline script, no eval); the OpenAPI document and "Try it
# out" calls to this server only; no frames, no plugins, no forms elsewhere.
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link type="text/css" rel="stylesheet" href="{root}/docs/assets/swagger-ui.css">
<link rel="icon" href="{root}/docs/assets/favicon.png">
<title>citewise API reference</title>
</head>
<body>
<div id="swagger-ui" data-openapi-url="{root}/openapi.json"></div>
<script src="{root}/docs/assets/swagger-ui-bundle.js"></script>
<script src="{root}/docs/assets/swagger-init.js"></script>
</body>
</html>
"""


def _folder() -> Path:
    return Path(str(files("fastapi_offline").joinpath("static")))


def _load() -> dict[str, tuple[bytes, str, str]]:
    folder = _folder()
    out = {}
    for name, media_type in FILES.items():
        body = (folder / name).read_bytes()
        out[name] = (body, media_type, etag_of(body))
    body = files("citewise.api").joinpath("reference", INIT).read_bytes()
    out[INIT] = (body, "text/javascript; charset=utf-8", etag_of(body))
    return out


_assets: dict[str, tuple[bytes, str, str]] | None = None


@router.get("/docs")
def reference(request: Request) -> HTMLResponse:
    root = escape(request.scope.get("root_path", ""), quote=True)
    return HTMLResponse(PAGE.format(root=root), headers={"Content-Security-Policy": DOCS_CSP})


@router.api_route("/docs/assets/{name}", methods=["GET", "HEAD"])
def asset(name: str, request: Request) -> Response:
    global _assets
    if _assets is None:  # read on first use: a server nobody browses never reads 1 MB
        _assets = _load()
    found = _assets.get(name)
    if found is None:
        raise NotFoundError(f"no API reference file named {name!r}",
                            hint="the API reference lives at /docs")
    return file_response(request, *found, {"Content-Security-Policy": DOCS_CSP})
