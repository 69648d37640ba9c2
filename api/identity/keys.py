"""API keys: created with a name and scopes, shown once, stored as a hash, revoked by name.

A key reads ``cw_<id>_<secret>``: the ``cw_`` prefix lets secret scanners (and citewise's own
redaction) recognise a leaked key, the id finds its row without scanning, and only the SHA-256
of the whole key is stored. The secret is 256 random bits, so a plain hash is as strong as a
slow one here (nothing to brute-force) and keeps verification to microseconds per request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from citewise.api.identity.caller import parse_scopes
from citewise.errors import AuthError, ConflictError, InvalidRequestError, NotFoundError
from citewise.index.catalog import Catalog
from citewise.types import normalise_readers

KEY_PREFIX = "cw_"
KEY_PATTERN = re.compile(r"^cw_([a-z2-7]{10})_([A-Za-z0-9_-]{43})$")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
LIMIT_NAMES = tuple(f"{cls}_per_{period}" for cls in ("search", "answer", "ingest")
                    for period in ("minute", "day"))


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
        if self.expires_at and self.expires_at <= _now():
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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_expiry(text: str | None, now: datetime | None = None) -> str | None:
    """``90d``, ``12h``, ``30m`` from now, or an ISO date/time; ``None`` = never."""
    if not text:
        return None
    now = now or datetime.now(UTC)
    m = re.fullmatch(r"\s*(\d+)\s*([dhm])\s*", text)
    if m:
        amount, unit = int(m.group(1)), m.group(2)
        delta = {"d": timedelta(days=amount), "h": timedelta(hours=amount),
                 "m": timedelta(minutes=amount)}[unit]
        if delta <= timedelta(0):
            raise InvalidRequestError(f"expiry {text!r} is not in the future")
        return (now + delta).isoformat(timespec="seconds")
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidRequestError(
            f"expiry {text!r} is neither a duration nor a date",
            hint="use 90d, 12h, 30m or an ISO date such as 2027-03-31") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if at <= now:
        raise InvalidRequestError(f"expiry {text!r} is in the past")
    return at.astimezone(UTC).isoformat(timespec="seconds")


def parse_limits(items: dict[str, int] | list[str] | None) -> dict[str, int]:
    """``["answer_per_minute=5"]`` or ``{"answer_per_minute": 5}``; 0 = unlimited for the key."""
    if not items:
        return {}
    pairs = items.items() if isinstance(items, dict) else (
        tuple(i.split("=", 1)) if "=" in i else (i, "") for i in items)
    out = {}
    for name, value in pairs:
        name = str(name).strip()
        if name not in LIMIT_NAMES:
            raise InvalidRequestError(f"unknown limit {name!r}",
                                      hint=f"limits are {', '.join(LIMIT_NAMES)}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise InvalidRequestError(f"limit {name} needs a whole number, not {value!r}") from None
        if number < 0:
            raise InvalidRequestError(f"limit {name} cannot be negative")
        out[name] = number
    return out


class KeyStore:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    # Writes ------------------------------------------------------------------------------------
    def create(self, name: str, scopes: str | list[str], *, principal: str | None = None,
               assert_identity: bool = False, expires: str | None = None,
               limits: dict[str, int] | list[str] | None = None,
               created_by: str | None = None,
               shares_conversations: bool = False) -> tuple[ApiKey, str]:
        """A new key and its secret, which is never shown again."""
        if not NAME_PATTERN.match(name or ""):
            raise InvalidRequestError(
                f"key name {name!r} is not valid",
                hint="lowercase letters, digits, '.', '_' and '-', up to 64 characters: ci-bot")
        parsed = parse_scopes(scopes)
        if not parsed:
            raise InvalidRequestError("a key needs at least one scope",
                                      hint="e.g. --scopes search,answer")
        if principal is not None:
            principal = normalise_readers([principal])[0]
            if principal == "public":
                raise InvalidRequestError(
                    "a key's principal is a user or a group, not public",
                    hint="user:ci-bot or group:sre; leave it out for a key that reads public "
                         "documents only")
        key_id = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(10))
        secret = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        record = ApiKey(id=key_id, name=name, scopes=parsed, principal=principal,
                        assert_identity=assert_identity, limits=parse_limits(limits),
                        created_at=_now(), created_by=created_by,
                        expires_at=parse_expiry(expires),
                        shares_conversations=shares_conversations)
        conn = self.catalog.connection()
        with self.catalog.transaction():
            taken = conn.execute("SELECT revoked_at FROM api_keys WHERE name = ?",
                                 [name]).fetchone()
            if taken is not None:
                raise ConflictError(
                    f"a key named {name!r} already exists"
                    + (" (revoked)" if taken["revoked_at"] else ""),
                    hint="choose another name; names stay taken after revocation so that usage "
                         "and audit records keep meaning one key")
            conn.execute(
                "INSERT INTO api_keys (id, name, secret_hash, scopes, principal, "
                "assert_identity, limits, created_at, created_by, expires_at, "
                "shares_conversations) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [record.id, name, _hash(secret), ",".join(sorted(parsed)), principal,
                 int(assert_identity), json.dumps(record.limits), record.created_at,
                 created_by, record.expires_at, int(shares_conversations)])
        return record, secret

    def revoke(self, name: str) -> ApiKey:
        conn = self.catalog.connection()
        with self.catalog.transaction():
            key = self.get(name)
            if key.revoked_at is None:
                key.revoked_at = _now()
                conn.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?",
                             [key.revoked_at, key.id])
        return key

    # Reads -------------------------------------------------------------------------------------
    def get(self, name: str) -> ApiKey:
        row = self.catalog.connection().execute(
            "SELECT * FROM api_keys WHERE name = ?", [name]).fetchone()
        if row is None:
            raise NotFoundError(f"no key named {name!r}", hint="citewise keys list")
        return _record(row)

    def list(self) -> list[ApiKey]:
        rows = self.catalog.connection().execute("SELECT * FROM api_keys ORDER BY created_at, name")
        return [_record(r) for r in rows]

    def active_count(self) -> int:
        return self.catalog.connection().execute(
            "SELECT count(*) FROM api_keys WHERE revoked_at IS NULL AND "
            "(expires_at IS NULL OR expires_at > ?)", [_now()]).fetchone()[0]

    def verify(self, secret: str) -> ApiKey:
        """The active key this secret belongs to, or ``AuthError`` saying why not."""
        m = KEY_PATTERN.match(secret)
        if not m:
            raise AuthError("the bearer token is not a citewise API key",
                            hint="keys look like cw_xxxxxxxxxx_...; create one with "
                                 "`citewise keys create`")
        row = self.catalog.connection().execute(
            "SELECT * FROM api_keys WHERE id = ?", [m.group(1)]).fetchone()
        # Compare against a hash even when the id is unknown, so timing says nothing.
        expected = row["secret_hash"] if row is not None else _hash("cw_unknown")
        if not hmac.compare_digest(_hash(secret), expected) or row is None:
            raise AuthError("the API key is not valid", hint="check the key, or create a new one")
        key = _record(row)
        if key.revoked_at:
            raise AuthError(f"the API key {key.name!r} was revoked at {key.revoked_at}",
                            hint="ask an administrator for a new key")
        if key.status == "expired":
            raise AuthError(f"the API key {key.name!r} expired at {key.expires_at}",
                            hint="ask an administrator for a new key")
        return key


def _record(row) -> ApiKey:
    return ApiKey(
        id=row["id"], name=row["name"], scopes=frozenset(row["scopes"].split(",")),
        principal=row["principal"], assert_identity=bool(row["assert_identity"]),
        limits=json.loads(row["limits"] or "{}"), created_at=row["created_at"],
        created_by=row["created_by"], expires_at=row["expires_at"],
        revoked_at=row["revoked_at"], last_used_at=row["last_used_at"],
        shares_conversations=bool(row["shares_conversations"]))
