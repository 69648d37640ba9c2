"""API keys: created with a name and scopes, shown once, stored as a hash, revoked by name.

A key reads ``cw_<id>_<secret>``: the ``cw_`` prefix lets secret scanners (and citewise's own
redaction) recognise a leaked key, the id finds its row without scanning, and only the SHA-256
of the whole key is stored. The secret is 256 random bits, so a plain hash is as strong as a
slow one here (nothing to brute-force) and keeps verification to microseconds per request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime, timedelta

from citewise.api.identity.caller import parse_scopes
from citewise.api.identity.key_store import ApiKey, KeyStore, utc_now
from citewise.errors import AuthError, InvalidRequestError, NotFoundError
from citewise.types import normalise_readers

KEY_PREFIX = "cw_"
KEY_PATTERN = re.compile(r"^cw_([a-z2-7]{10})_([A-Za-z0-9_-]{43})$")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
LIMIT_NAMES = tuple(f"{cls}_per_{period}" for cls in ("search", "answer", "ingest")
                    for period in ("minute", "day"))


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


class ApiKeys:
    """Creating, revoking and checking API keys, kept in a ``KeyStore``."""

    def __init__(self, store: KeyStore) -> None:
        self.store = store

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
                        created_at=utc_now(), created_by=created_by,
                        expires_at=parse_expiry(expires),
                        shares_conversations=shares_conversations)
        self.store.add(record, _hash(secret))
        return record, secret

    def revoke(self, name: str) -> ApiKey:
        return self.store.revoke(name, utc_now())

    # Reads -------------------------------------------------------------------------------------
    def get(self, name: str) -> ApiKey:
        key = self.store.get(name)
        if key is None:
            raise NotFoundError(f"no key named {name!r}", hint="citewise keys list")
        return key

    def list(self) -> list[ApiKey]:
        return self.store.list()

    def active_count(self) -> int:
        return self.store.active_count(utc_now())

    def verify(self, secret: str) -> ApiKey:
        """The active key this secret belongs to, or ``AuthError`` saying why not."""
        m = KEY_PATTERN.match(secret)
        if not m:
            raise AuthError("the bearer token is not a citewise API key",
                            hint="keys look like cw_xxxxxxxxxx_...; create one with "
                                 "`citewise keys create`")
        found = self.store.by_id(m.group(1))
        # Compare against a hash even when the id is unknown, so timing says nothing.
        expected = found[1] if found is not None else _hash("cw_unknown")
        if not hmac.compare_digest(_hash(secret), expected) or found is None:
            raise AuthError("the API key is not valid", hint="check the key, or create a new one")
        key = found[0]
        if key.revoked_at:
            raise AuthError(f"the API key {key.name!r} was revoked at {key.revoked_at}",
                            hint="ask an administrator for a new key")
        if key.status == "expired":
            raise AuthError(f"the API key {key.name!r} expired at {key.expires_at}",
                            hint="ask an administrator for a new key")
        return key
