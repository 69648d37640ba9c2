"""Who is calling. Identity comes from headers set by a trusted front end.

``X-Citewise-User`` and ``X-Citewise-Groups`` (comma-separated) name the person a request is
for; the Slack bot or the SSO proxy in front of citewise sets them. When ``CITEWISE_API_KEYS``
is set, /v1 requests must carry ``Authorization: Bearer <key>``, and only key holders can claim
an identity. Without keys (the embedded default, bound to 127.0.0.1) the headers are taken as
given: do not expose such a server beyond the machine.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request

from citewise.errors import AuthError, ForbiddenError
from citewise.types import Identity


def _check_key(request: Request) -> None:
    keys = request.app.state.services.settings.api_key_list()
    if not keys:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise AuthError(
            "this server requires an API key", hint="send 'Authorization: Bearer <key>'"
        )
    if not any(hmac.compare_digest(token.strip(), k) for k in keys):
        raise AuthError("the API key is not valid", hint="check CITEWISE_API_KEYS on the server")


def identity(request: Request) -> Identity:
    """FastAPI dependency: the caller's identity, after checking the API key if required."""
    _check_key(request)
    user = (request.headers.get("x-citewise-user") or "").strip() or None
    groups = tuple(
        g.strip() for g in (request.headers.get("x-citewise-groups") or "").split(",") if g.strip()
    )
    return Identity(user=user, groups=groups)


def require_operator(request: Request) -> None:
    """Ingest and other write operations: a key holder, or a local caller when keyless."""
    _check_key(request)
    if request.app.state.services.settings.api_key_list():
        return
    host = request.client.host if request.client else ""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ForbiddenError(
        "ingest is only accepted from this machine when no API keys are configured",
        hint="set CITEWISE_API_KEYS on the server and send one as a bearer token",
    )
