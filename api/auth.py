"""What routes know of the caller: the ``Caller`` the front door decided on (``frontdoor.py``,
``identity/authenticate.py``), as FastAPI dependencies.

Routes never read identity headers themselves: there is one place that decides who is calling,
and a route that finds no decision refuses (fail closed) rather than guessing.
"""

from __future__ import annotations

from fastapi import Request

from citewise.api.identity.authenticate import OPERATOR_HEADER
from citewise.api.identity.caller import Caller
from citewise.errors import AuthError
from citewise.types import Identity

__all__ = ["OPERATOR_HEADER", "caller", "identity", "is_admin"]


# The dependencies are coroutines although they only read ``request.state``: FastAPI runs a
# plain-function dependency in its thread pool, a hop to another thread and back (and a turn
# at the GIL) on every request, for a lookup that takes microseconds.


def _established(request: Request) -> Caller:
    """The ``Caller`` the front door decided on for ``request``; refuses if there is none."""
    found = getattr(request.state, "caller", None)
    if not isinstance(found, Caller):
        raise AuthError("no caller was established for this request",
                        hint="requests reach routes only through the front door")
    return found


async def caller(request: Request) -> Caller:
    """FastAPI dependency: the caller, with its scopes."""
    return _established(request)


async def identity(request: Request) -> Identity:
    """FastAPI dependency: the caller's identity, for the permission filter."""
    return _established(request).identity


def is_admin(request: Request) -> bool:
    found = getattr(request.state, "caller", None)
    return isinstance(found, Caller) and found.may("admin")
