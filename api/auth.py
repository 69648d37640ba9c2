"""Who is calling, and whether they may run operator actions.

Identity: ``X-Citewise-User`` and ``X-Citewise-Groups`` (comma-separated) name the person a
request is for; the Slack bot or the SSO proxy in front of citewise sets them. When
``CITEWISE_API_KEYS`` is set, /v1 requests must carry ``Authorization: Bearer <key>`` (checked
by ``middleware.KeyGate`` before the body is read), and only key holders can claim an identity.
Without keys (the embedded default, bound to 127.0.0.1) the headers are taken as given: do not
expose such a server beyond the machine. A header sent twice is refused: a proxy that appends
instead of replacing would otherwise let the client's value through.

Operators (ingest, runs, metrics, health details): a key holder when keys are set; otherwise a
caller on this machine, by the socket's address (``X-Forwarded-For`` is believed only from the
proxies in ``CITEWISE_TRUSTED_PROXIES``). The operator's own CLI also proves itself with the token
``citewise serve`` writes, readable only by the data folder's owner, to ``server.json``.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request

from citewise.errors import AuthError, BadRequestError, ForbiddenError
from citewise.types import Identity

OPERATOR_HEADER = "x-citewise-operator"
IDENTITY_HEADERS = ("x-citewise-user", "x-citewise-groups", OPERATOR_HEADER, "authorization")


def _same(given: str, expected: str) -> bool:
    # Bytes, so a non-ASCII token is simply wrong instead of a TypeError.
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def key_checker(keys: list[str]):
    """``check(authorization header)`` for ``KeyGate``: raises ``AuthError`` when keys are set
    and the header carries none of them."""

    def check(header: str | None) -> None:
        if not keys:
            return
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(
                "this server requires an API key", hint="send 'Authorization: Bearer <key>'"
            )
        if not any(_same(token.strip(), k) for k in keys):
            raise AuthError("the API key is not valid",
                            hint="check the key (CITEWISE_API_KEYS on the server)")

    return check


def _header(request: Request, name: str) -> str | None:
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise BadRequestError(
            f"the {name} header appears {len(values)} times",
            hint="send it once (a proxy in front of citewise must replace it, not append)",
        )
    return values[0] if values else None


def identity(request: Request) -> Identity:
    """FastAPI dependency: the caller's identity (the key was checked by ``KeyGate``)."""
    for name in IDENTITY_HEADERS:
        _header(request, name)
    user = (_header(request, "x-citewise-user") or "").strip() or None
    groups = tuple(
        g.strip() for g in (_header(request, "x-citewise-groups") or "").split(",") if g.strip()
    )
    return Identity(user=user, groups=groups)


def is_local_operator(request: Request) -> bool:
    """The operator's CLI on the server's machine: it read the token from server.json."""
    token = _header(request, OPERATOR_HEADER)
    expected = getattr(request.app.state, "operator_token", None)
    return bool(token and expected and _same(token, expected))


def is_operator(request: Request) -> bool:
    if is_local_operator(request):
        return True
    settings = request.app.state.services.settings
    if settings.api_key_list():
        # KeyGate let the request through, so it holds a valid key (for /v1 routes); outside
        # /v1 the key is checked here.
        try:
            key_checker(settings.api_key_list())(_header(request, "authorization"))
        except AuthError:
            return False
        return True
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_operator(request: Request) -> None:
    """Ingest and other operator actions: a key holder, or a caller on this machine."""
    for name in IDENTITY_HEADERS:
        _header(request, name)
    if not is_operator(request):
        settings = request.app.state.services.settings
        if settings.api_key_list():
            raise AuthError("this needs an API key", hint="send 'Authorization: Bearer <key>'")
        raise ForbiddenError(
            "operator actions are only accepted from this machine when no API keys are "
            "configured",
            hint="set CITEWISE_API_KEYS on the server and send one as a bearer token",
        )
