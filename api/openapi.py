"""What the OpenAPI document says a route may answer besides success: RFC 9457 problem
details (``application/problem+json``), for the statuses it can return.

Three places produce them, and each declares its own:

* every request passes the front door and the body limit: 400, 413, 422 and 503 (``EVERY``,
  on every operation);
* the front door's rules (``frontdoor.RULES``) say which routes need a caller (401, 403) and
  which draw on rate limits (429): ``describe_refusals`` adds those to each operation from the
  same rules the door applies;
* a route declares what it raises itself with ``problems({404: "why", ...})``.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from citewise.api.frontdoor import Rule
from citewise.api.problems import PROBLEM_JSON

# The front door's rule for an operation (method, path template); None: not authenticated.
DoorRule = Callable[[str, str], Rule | None]
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


class OpenAIError(BaseModel):
    """What the official OpenAI clients read from an error: on the OpenAI-protocol routes
    (``/v1/chat/completions``, ``/v1/models``) only."""

    message: str = Field(description="The detail, and the hint in parentheses.")
    type: str = Field(description="The problem type's last part, e.g. `not_found`.")
    code: int = Field(description="The HTTP status.")


class Problem(BaseModel):
    """An error: RFC 9457 problem details, plus a hint on what to do about it."""

    type: str = Field(examples=["urn:citewise:error:rate_limited"])
    title: str = Field(examples=["Rate limited"])
    status: int = Field(examples=[429])
    detail: str = Field(examples=["too many answer requests: the answer-minute limit of 30 per "
                                  "60 s is used up"])
    hint: str | None = Field(default=None, examples=["retry after 12 s"])
    errors: list[dict] | None = Field(default=None, description="422: one entry per field.")
    error: OpenAIError | None = Field(default=None, description="On the OpenAI-protocol routes "
                                      "only.")


def problem_response(why: str) -> dict:
    """An OpenAPI response entry for a problem-details answer."""
    return {"description": why, "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}}}


def problems(statuses: dict[int, str]) -> dict[int | str, dict]:
    """A route's ``responses=`` for the problems it raises itself: status -> why."""
    return {status: problem_response(why) for status, why in statuses.items()}


# What the front door and the body limit may answer to any request.
EVERY = problems({
    400: "Malformed request (a header with a control character, an identity header that "
         "names no one).",
    413: "The request body is larger than CITEWISE_MAX_REQUEST_BYTES.",
    422: "The request does not match its schema (or its Content-Length is not a number).",
    503: "A backend (the catalog, the index, the identity provider's keys) cannot be reached.",
})
# What the front door adds on a route its rules cover.
AUTHENTICATED = problems({
    401: "No valid API key or token (missing, unknown, revoked, expired, or a token that does "
         "not verify).",
    403: "Valid caller without the scope the route needs, or a key that may not assert an "
         "identity.",
})
RATE_LIMITED = problems({
    429: "A rate limit or quota is used up; see Retry-After, RateLimit-Policy and RateLimit.",
})


def describe_refusals(schema: dict, door_rule: DoorRule) -> dict:
    """Add to each operation of ``schema`` the problems the front door may answer it with,
    from its rule: a caller is needed (401, 403), and with a ``rate_class`` rate limits apply
    (429). A status the route declares itself keeps the route's description. Also puts the
    ``Problem`` schema in the components (problem responses name it by reference)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(_schemas(Problem))
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            rule = door_rule(method.upper(), path)
            if rule is None:
                continue
            refusals = dict(AUTHENTICATED)
            if rule.rate_class:
                refusals.update(RATE_LIMITED)
            responses = operation.setdefault("responses", {})
            for status, response in refusals.items():
                responses.setdefault(str(status), response)
            operation["responses"] = dict(sorted(responses.items()))
    return schema


def _schemas(model: type[BaseModel]) -> dict[str, dict]:
    """``model``'s JSON schema and those it refers to, as OpenAPI components."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {model.__name__: schema, **defs}


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


def describe_security(schema: dict, door_rule: DoorRule) -> dict:
    """Add the security schemes to ``schema`` and, to each operation the front door
    authenticates, the schemes it accepts and the scope it needs (from its rule). A server in
    local mode (loopback only, no key required) lets callers without credentials through all
    the same: the document describes a deployed one."""
    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            rule = door_rule(method.upper(), path)
            if rule is None:
                continue
            scope = rule.scope
            operation["security"] = [{"apiKey": []}, {"cloudflareAccess": []}]
            if scope:
                operation["x-citewise-scope"] = scope
                text, note = (operation.get("description") or "").rstrip(), \
                    f"Needs the `{scope}` scope."
                operation["description"] = f"{text}\n\n{note}" if text else note
    return schema
