"""Where API keys are kept: the record of each key and the hash of its secret, never the secret.

``KeyStore`` is the contract the key service (``keys.py``: names, scopes, secrets, expiry) keeps
its keys in; ``sqlite_key_store.py`` keeps them in the embedded database. A name is taken for
good: a revoked key keeps it, so that usage and audit records keep meaning one key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class ApiKey:
    id: str
    name: str
    scopes: frozenset[str]
    principal: str | None = None  # user:ci-bot or group:sre: who the key acts as
    assert_identity: bool = False  # may name the end user in X-Citewise-User/Groups
    # Its conversations are its principal's own, as in their sign-in sessions (the operator
    # says this key is one of that person's doors); otherwise the key's are its own.
    shares_conversations: bool = False
    limits: dict[str, int] = field(default_factory=dict)
    created_at: str = ""
    created_by: str | None = None
    expires_at: str | None = None
    revoked_at: str | None = None
    last_used_at: str | None = None

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= utc_now():
            return "expired"
        return "active"

    def public(self) -> dict:
        """What ``keys list`` and ``GET /v1/keys`` show: everything but the hash."""
        return {
            "name": self.name, "id": self.id, "scopes": sorted(self.scopes),
            "principal": self.principal, "assert_identity": self.assert_identity,
            "shares_conversations": self.shares_conversations,
            "limits": self.limits, "status": self.status, "created_at": self.created_at,
            "created_by": self.created_by, "expires_at": self.expires_at,
            "revoked_at": self.revoked_at, "last_used_at": self.last_used_at,
        }


class KeyStore(Protocol):
    def add(self, key: ApiKey, secret_hash: str) -> None:
        """Keep a new key. ``ConflictError`` when its name is taken (by a revoked key too)."""
        ...

    def revoke(self, name: str, at: str) -> ApiKey:
        """Mark the key revoked at ``at`` (a key revoked before keeps its first time); the key.
        ``NotFoundError`` when there is none by that name."""
        ...

    def get(self, name: str) -> ApiKey | None: ...

    def by_id(self, key_id: str) -> tuple[ApiKey, str] | None:
        """The key with this id and the hash of its secret (what a request is checked with)."""
        ...

    def list(self) -> list[ApiKey]:
        """Every key, revoked and expired too, oldest first."""
        ...

    def active_count(self, at: str) -> int:
        """Keys neither revoked nor expired at ``at``."""
        ...

    def touch(self, used: dict[str, str]) -> None:
        """Record when each named key last served a request (``name -> time``)."""
        ...

    def import_key(self, key: ApiKey, secret_hash: str) -> None:
        """Keep ``key`` whole under its id, its revocation and last use too: a copy of another
        store's (``citewise migrate-catalog``, rerun until the cut-over). A key kept already
        under that id keeps its own revocation if it has one (a second copy never brings a
        revoked key back), and its last use becomes the later of the two. ``ConflictError``
        when another key has its name."""
        ...

    def close(self) -> None: ...
