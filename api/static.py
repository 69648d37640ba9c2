"""Files served as they are (the web page's, the API reference's), revalidated by ETag."""

from __future__ import annotations

import hashlib

from fastapi import Request
from fastapi.responses import Response


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:16] + '"'


def file_response(request: Request, body: bytes, media_type: str, etag: str,
                  headers: dict[str, str] | None = None) -> Response:
    """The file, or 304 when the browser has it. Revalidated on every load (a 304 is cheap): an
    upgraded server is never half old, half new."""
    headers = {"ETag": etag, "Cache-Control": "no-cache", **(headers or {})}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=media_type, headers=headers)
