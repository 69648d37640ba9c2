"""Who is calling, once the front door has decided: an identity for the permission filter, the
scopes that say which routes it may use, and how it proved itself.

Every door (HTTP routes, and later Slack, MCP, the page) gets a ``Caller`` from
``Authenticator.authenticate`` and nothing else; the retrieval layer only ever sees its
``identity``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from citewise.types import Identity

SCOPES = ("search", "answer", "ingest", "admin")
ALL_SCOPES = frozenset(SCOPES)


@dataclass(frozen=True)
class Caller:
    identity: Identity
    scopes: frozenset[str]
    # key (an API key), access (Cloudflare Access), oidc, operator (the CLI on this machine with
    # the token from server.json), local (keyless loopback mode), headers (the insecure flag).
    method: str
    key: str | None = None  # the API key's name
    limits: dict[str, int] = field(default_factory=dict)  # the key's own rate limits
    key_id: str | None = None
    # A key created with --shares-conversations: its conversations are its principal's, the
    # same as that person's sign-in sessions (otherwise each key's are its own).
    shares_conversations: bool = False
    asserts_identity: bool = False  # a key that may name the end user: capped as a whole

    @property
    def principal(self) -> str:
        """The name usage and the audit log record: the person, else the key, else anonymous."""
        if self.identity.user:
            return f"user:{self.identity.user}"
        if self.identity.groups:
            return "group:" + ",".join(self.identity.groups)
        if self.key:
            return f"key:{self.key}"
        return "anonymous"

    def may(self, scope: str) -> bool:
        return scope in self.scopes


def parse_scopes(text: str | list[str] | tuple[str, ...]) -> frozenset[str]:
    """``"search,answer"`` as a set, refusing scopes that do not exist."""
    items = text.split(",") if isinstance(text, str) else list(text)
    scopes = frozenset(s.strip().lower() for s in items if s and s.strip())
    unknown = scopes - ALL_SCOPES
    if unknown:
        from citewise.errors import InvalidRequestError

        raise InvalidRequestError(
            f"unknown scope(s): {', '.join(sorted(unknown))}",
            hint=f"scopes are {', '.join(SCOPES)}",
        )
    return scopes
