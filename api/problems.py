"""One error shape for every failure: RFC 9457 problem details, with a hint on what to do.

    {"type": "urn:citewise:error:invalid_request", "title": "Invalid request", "status": 422,
     "detail": "top_k must be between 1 and 100, not 500", "hint": null, "errors": [...]}
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from citewise.errors import CitewiseError, problem_body

log = logging.getLogger("citewise.api")

PROBLEM_JSON = "application/problem+json"
__all__ = ["PROBLEM_JSON", "for_path", "problem", "problem_body"]


# Routes of the OpenAI protocol: their clients read errors from {"error": {"message": ...}}.
OPENAI_PATHS = ("/v1/chat/", "/v1/models")


def for_path(body: dict, path: str) -> dict:
    """The problem body, plus the OpenAI error member on the OpenAI-protocol routes (an RFC
    9457 extension member), so the official clients show the detail instead of a bare code."""
    if path.startswith(OPENAI_PATHS):
        message = body["detail"] + (f" ({body['hint']})" if body.get("hint") else "")
        body["error"] = {"message": message, "type": body["type"].rsplit(":", 1)[-1],
                         "code": body["status"]}
    return body


def problem(
    status: int, code: str, detail: str, hint: str | None = None, errors: list | None = None,
    *, path: str = "",
) -> JSONResponse:
    return JSONResponse(for_path(problem_body(status, code, detail, hint, errors), path),
                        status_code=status, media_type=PROBLEM_JSON)


def install(app: FastAPI) -> None:
    @app.exception_handler(CitewiseError)
    async def _citewise(request: Request, exc: CitewiseError):
        if exc.status_code >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return problem(exc.status_code, exc.code, exc.message, exc.hint,
                       path=request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            errors.append({"field": loc or "body", "message": err.get("msg", "invalid")})
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
        return problem(
            422,
            "invalid_request",
            f"the request is not valid: {detail}",
            hint="see the request schema at /docs",
            errors=errors,
            path=request.url.path,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
            exc.status_code, "http_error"
        )
        # Starlette types it str; FastAPI's HTTPException (a subclass) carries any JSON value.
        given: object = exc.detail
        detail = given if isinstance(given, str) else str(given)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such endpoint: {request.method} {request.url.path}"
            return problem(404, code, detail, hint="the API is described at /docs",
                           path=request.url.path)
        return problem(exc.status_code, code, detail, path=request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(
            500, "internal_error", "an unexpected error occurred; the server log has details"
        )
