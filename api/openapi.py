"""What the OpenAPI document says every route may answer besides success: RFC 9457 problem
details, with the statuses the front door, the body limit and the routes produce."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Problem(BaseModel):
    """An error: RFC 9457 problem details, plus a hint on what to do about it."""

    type: str = Field(examples=["urn:citewise:error:rate_limited"])
    title: str = Field(examples=["Rate limited"])
    status: int = Field(examples=[429])
    detail: str = Field(examples=["too many answer requests: the answer-minute limit of 30 per "
                                  "60 s is used up"])
    hint: str | None = Field(default=None, examples=["retry after 12 s"])
    errors: list[dict] | None = Field(default=None, description="422: one entry per field.")


_WHY = {
    400: "Malformed request (a header sent twice, an identity header that names no one).",
    401: "No valid API key or token (missing, unknown, revoked, expired, or a token that does "
         "not verify).",
    403: "Valid caller without the scope the route needs, or a key that may not assert an "
         "identity.",
    404: "No such document (or one the caller may not read), job or route.",
    413: "The request body is larger than CITEWISE_MAX_REQUEST_BYTES.",
    422: "The request does not match its schema.",
    429: "A rate limit or quota is used up; see Retry-After, RateLimit-Policy and RateLimit.",
    503: "A backend (the index, the identity provider's keys) cannot be reached.",
}

def problem_response(why: str) -> dict:
    """An OpenAPI response entry for a problem-details answer."""
    return {
        "model": Problem,
        "description": why,
        "content": {"application/problem+json": {"schema": {"$ref":
                                                              "#/components/schemas/Problem"}}},
    }


PROBLEM_RESPONSES: dict[int | str, dict] = {
    status: problem_response(why) for status, why in _WHY.items()}


# How a caller proves who it is (``identity/authenticate.py``), as OpenAPI security schemes:
# the reference's Authorize button sends them, and generated clients know where a key goes.
SECURITY_SCHEMES = {
    "apiKey": {
        "type": "http", "scheme": "bearer", "bearerFormat": "cw_... API key, or an OIDC token",
        "description": "`Authorization: Bearer cw_...` with a key from `citewise keys create` "
                       "(its scopes decide which routes it may call), or a token of the OIDC "
                       "issuer the server is configured with (`CITEWISE_OIDC_ISSUER`).",
    },
    "cloudflareAccess": {
        "type": "apiKey", "in": "header", "name": "Cf-Access-Jwt-Assertion",
        "description": "The token Cloudflare Access adds in front of the server "
                       "(`CITEWISE_ACCESS_TEAM_DOMAIN`); a browser behind Access sends it by "
                       "itself.",
    },
}


def describe_security(schema: dict, scope_for) -> dict:
    """Add the security schemes to ``schema`` and, to each operation the front door
    authenticates, the schemes it accepts and the scope it needs (``scope_for(method, path)``
    answers ``(authenticated, scope)``). A server in local mode (loopback only, no key
    required) lets callers without credentials through all the same: the document describes
    a deployed one."""
    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            authenticated, scope = scope_for(method.upper(), path)
            if not authenticated:
                continue
            operation["security"] = [{"apiKey": []}, {"cloudflareAccess": []}]
            if scope:
                operation["x-citewise-scope"] = scope
                text, note = (operation.get("description") or "").rstrip(), \
                    f"Needs the `{scope}` scope."
                operation["description"] = f"{text}\n\n{note}" if text else note
    return schema
