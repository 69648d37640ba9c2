"""Signed identity tokens: Cloudflare Access assertions and any OIDC provider's JWTs.

Verified with PyJWT against the issuer's JSON Web Key Set, never by hand:

* only asymmetric algorithms are accepted, and only the one the key itself is for (so
  ``alg: none`` and an HS256 token "signed" with the public key fail);
* ``iss`` and ``aud`` must match, ``exp`` must be present; ``exp``, ``nbf`` and ``iat`` are checked
  with a small leeway for clock skew;
* the key set is fetched once and cached; a token signed with an unknown ``kid`` refetches it
  once (providers rotate keys: Access every six weeks), no more often than every
  ``REFETCH_INTERVAL`` seconds, so random kids cannot make us hammer the provider;
* when the key set cannot be fetched and no cached key fits, the answer is 503: never "let it
  through", never "everyone is anonymous"; the key set's address and the error are logged, not
  shown to the (unauthenticated) caller;
* a token whose header is malformed (not JSON, a ``kid`` that is not a string, an unknown
  ``crit`` extension, an ``alg`` that is not a name) is a 401 like any other bad token.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt

from citewise.errors import AuthError, CitewiseError

log = logging.getLogger("citewise.identity")

ASYMMETRIC = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA"}
_SIGN_IN = "sign in again through the identity provider; tokens cannot be altered or reused"
REFETCH_INTERVAL = 30.0  # seconds between refetches caused by unknown kids
MAX_AGE = 3600.0  # a cached key set older than this is refreshed (kept if that fails)


class IdentityProviderUnavailable(CitewiseError):
    status_code = 503
    code = "identity_provider_unavailable"


@dataclass(frozen=True)
class TokenPolicy:
    """What a valid token of one provider looks like."""

    name: str  # "Cloudflare Access" or "OIDC": named in errors
    issuer: str
    audiences: tuple[str, ...]
    leeway: float = 60.0


class KeySet:
    """A provider's signing keys by kid, from a JWKS URL or a file."""

    def __init__(self, url: str | None = None, path: Path | None = None,
                 timeout: float = 5.0, client: httpx.Client | None = None) -> None:
        if not url and not path:
            raise ValueError("a key set needs a URL or a file")
        self.url = url
        self.path = Path(path) if path else None
        self.timeout = timeout
        self._client = client
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = 0.0
        self._last_unknown = -REFETCH_INTERVAL  # the last refetch an unknown kid caused
        self._lock = threading.Lock()

    def key(self, kid: str | None) -> jwt.PyJWK | None:
        """The key for ``kid``: cached, or after one refetch; ``None`` when the provider does
        not know it either. Raises ``IdentityProviderUnavailable`` when the set cannot be read
        and no cached key fits."""
        with self._lock:
            stale = time.monotonic() - self._fetched_at > MAX_AGE
            if (kid not in self._keys or stale) and self._may_fetch(kid, stale):
                self._refresh(required=kid not in self._keys)
            # Keys are stored by their kid: a token that names none matches none.
            return None if kid is None else self._keys.get(kid)

    def _may_fetch(self, kid: str | None, stale: bool) -> bool:
        if not self._keys or stale:
            return True
        # An unknown kid: refetch, but not more than once per interval.
        if time.monotonic() - self._last_unknown < REFETCH_INTERVAL:
            return False
        self._last_unknown = time.monotonic()
        return True

    def _refresh(self, *, required: bool) -> None:
        try:
            data = self._read()
            keys = {}
            for entry in data.get("keys", []):
                if entry.get("use", "sig") != "sig":
                    continue
                try:
                    keys[entry.get("kid")] = jwt.PyJWK(entry)
                except jwt.PyJWKError as e:
                    log.warning("skipping a key of %s: %s", self.source, e)
            if not keys:
                raise ValueError("it holds no usable signing key")
            self._keys = keys
            self._fetched_at = time.monotonic()
        except (httpx.HTTPError, OSError, ValueError) as e:
            if required or not self._keys:
                # The URL and the error stay in the log: the caller is not signed in yet, and
                # where our provider lives (an internal host name, a tenant id) is not theirs.
                log.error("the identity provider's keys cannot be read from %s: %s",
                          self.source, e)
                raise IdentityProviderUnavailable(
                    "the identity provider's signing keys cannot be read, so sign-in tokens "
                    "cannot be verified",
                    hint="retry in a moment; an administrator finds the key set's address and "
                         "the error in the server's log") from e
            log.warning("refreshing the keys from %s failed (keeping the cached ones): %s",
                        self.source, e)

    def _read(self) -> dict:
        if self.path is not None:
            return json.loads(self.path.read_text(encoding="utf-8"))
        assert self.url is not None  # __init__ refuses a key set with neither a file nor a URL
        client = self._client or httpx.Client(timeout=self.timeout)
        try:
            resp = client.get(self.url)
            resp.raise_for_status()
            return resp.json()
        finally:
            if self._client is None:
                client.close()

    @property
    def source(self) -> str:
        return str(self.path or self.url)


class TokenVerifier:
    def __init__(self, policy: TokenPolicy, keys: KeySet) -> None:
        self.policy = policy
        self.keys = keys

    def verify(self, token: str) -> dict:
        """The token's claims, or ``AuthError`` naming what is wrong with it."""
        name = self.policy.name
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as e:
            # DecodeError (not base64, not JSON, not an object) and its siblings for a header
            # of the wrong shape: a kid that is not a string, a crit extension PyJWT does not
            # know. All are the caller's token, so all are a 401, never a 500.
            raise AuthError(f"the {name} token is not a JWT we can read: {e}",
                            hint=_SIGN_IN) from None
        alg, kid = header.get("alg"), header.get("kid")
        # Checked before any lookup: a list or an object here would be an unhashable key.
        if not isinstance(alg, str) or alg not in ASYMMETRIC:
            raise AuthError(f"the {name} token uses algorithm {str(alg)[:40]!r}, which is not "
                            "accepted", hint="tokens must be signed with the provider's private "
                                             "key (RS256, ES256...)")
        if kid is not None and not isinstance(kid, str):
            raise AuthError(f"the {name} token's key id (kid) is not a string", hint=_SIGN_IN)
        jwk = self.keys.key(kid)
        if jwk is None:
            raise AuthError(f"the {name} token is signed with a key the provider does not list "
                            f"(kid {header.get('kid')!r})", hint=_SIGN_IN)
        expected = getattr(jwk, "algorithm_name", None) or alg
        if expected != alg:
            raise AuthError(f"the {name} token's algorithm {alg} does not match its key "
                            f"({expected})", hint=_SIGN_IN)
        try:
            return jwt.decode(
                token, jwk.key, algorithms=[alg], audience=list(self.policy.audiences),
                issuer=self.policy.issuer, leeway=self.policy.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError(f"the {name} token has expired", hint="sign in again") from None
        except jwt.ImmatureSignatureError:
            raise AuthError(f"the {name} token is not valid yet (nbf/iat in the future)",
                            hint="check the clocks of this server and the provider") from None
        except jwt.InvalidAudienceError:
            raise AuthError(f"the {name} token is for another application (aud)",
                            hint=_SIGN_IN) from None
        except jwt.InvalidIssuerError:
            raise AuthError(f"the {name} token comes from another issuer (iss)",
                            hint=_SIGN_IN) from None
        except jwt.InvalidTokenError as e:
            raise AuthError(f"the {name} token is not valid: {e}", hint=_SIGN_IN) from None
