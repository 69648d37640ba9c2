"""The web page at ``/``: plain files from ``api/web`` (no build step, nothing from a CDN).

The page is a client of the same API as everyone else: it calls ``/v1/...`` with the browser's
credentials (a Cloudflare Access cookie, or a key the person pastes, kept for the tab only),
so the front door decides who is asking exactly as for curl. The files themselves are public:
they hold no knowledge, and a person who is not signed in must be able to load the sign-in.

``/ui/vendor/...`` serves the console's chart library (uPlot), which ``make setup`` fetches into
``api/web/vendor/`` (``api/web_vendor.py``); ``/ui/vendor/`` lists what is there, so that the page
knows whether it can draw charts without asking for a file that is not there.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from citewise.api.static import etag_of, file_response
from citewise.errors import NotFoundError

router = APIRouter(include_in_schema=False)

# Only our own files: no inline script or style, no third party; answers only from our API.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
         ".txt": "text/plain; charset=utf-8"}


def _load(folder: str = "web") -> dict[str, tuple[bytes, str, str]]:
    """Every file of the folder with its media type and ETag, read once (none when the folder
    is absent: the vendor folder of an install that could not fetch it)."""
    out: dict[str, tuple[bytes, str, str]] = {}
    root = files("citewise.api").joinpath(folder)
    if not root.is_dir():
        return out
    for item in root.iterdir():
        suffix = "." + item.name.rsplit(".", 1)[-1]
        if item.is_file() and suffix in TYPES:
            body = item.read_bytes()
            out[item.name] = (body, TYPES[suffix], etag_of(body))
    return out


ASSETS = _load()
VENDOR = _load("web/vendor")


def _serve(request: Request, name: str, assets: dict[str, tuple[bytes, str, str]] = ASSETS
           ) -> Response:
    found = assets.get(name)
    if found is None:
        raise NotFoundError(f"no page file named {name!r}", hint="the page lives at /")
    return file_response(request, *found, {"Content-Security-Policy": PAGE_CSP})


@router.api_route("/", methods=["GET", "HEAD"])
def page(request: Request) -> Response:
    return _serve(request, "index.html")


@router.api_route("/ui/{name}", methods=["GET", "HEAD"])
def asset(name: str, request: Request) -> Response:
    return _serve(request, name)


@router.get("/ui/vendor/")
def vendor_files() -> JSONResponse:
    return JSONResponse({"files": sorted(VENDOR)}, headers={"Cache-Control": "no-cache"})


@router.api_route("/ui/vendor/{name}", methods=["GET", "HEAD"])
def vendor_asset(name: str, request: Request) -> Response:
    return _serve(request, name, VENDOR)
