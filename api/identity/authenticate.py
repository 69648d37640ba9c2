"""The front door's one decision: who is calling, and with which scopes.

In order, the first that applies:

1. ``X-Citewise-Operator``: the token ``citewise serve`` wrote to ``server.json`` (mode 0600):
   the operator's own CLI on this machine. Every scope.
2. ``Authorization: Bearer cw_...``: an API key from the catalog. Its scopes; its principal
   (``user:ci-bot``) as identity; the end user named in ``X-Citewise-User`` /
   ``X-Citewise-Groups`` only if the key may assert identity (the Slack bot's key), and a 403
   if another key tries.
3. ``Cf-Access-Jwt-Assertion`` (when Cloudflare Access is configured), or ``Authorization:
   Bearer <JWT>`` (when an OIDC issuer is configured): a verified token. The email (or subject)
   is the user; groups come from the configured claim and the ``[[groups]]`` mapping. Scopes:
   ``CITEWISE_SSO_SCOPES``, plus ingest and admin for members of ``CITEWISE_ADMIN_GROUPS``.
4. Nothing: in local mode (the server binds only to loopback and authentication is not
   required) the headers are taken as given, as on a laptop, with ingest and admin for callers
   on this machine; with ``CITEWISE_INSECURE_TRUST_IDENTITY_HEADERS`` the headers are believed
   from anyone; otherwise 401.

A header sent twice is refused (a proxy that appends instead of replacing would otherwise let
the client's value through), and so is a credential that does not verify: a bad key is never
treated as no key.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from dataclasses import dataclass

from starlette.datastructures import Headers

from citewise.api.identity.caller import ALL_SCOPES, Caller, parse_scopes
from citewise.api.identity.groups import GroupMap, claim_groups
from citewise.api.identity.keys import KEY_PREFIX, ApiKeys
from citewise.api.identity.tokens import TokenVerifier
from citewise.errors import AuthError, BadRequestError, ForbiddenError
from citewise.types import Identity

OPERATOR_HEADER = "x-citewise-operator"
USER_HEADER = "x-citewise-user"
GROUPS_HEADER = "x-citewise-groups"
ACCESS_HEADER = "cf-access-jwt-assertion"
SINGLE_HEADERS = (USER_HEADER, GROUPS_HEADER, OPERATOR_HEADER, "authorization", ACCESS_HEADER)
_USER = re.compile(r"^[^\s,;]{1,256}$")
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")  # its length: GroupBounds


class Authenticator:
    def __init__(
        self,
        *,
        keys: ApiKeys,
        groups: GroupMap,
        access: TokenVerifier | None = None,
        access_groups_claim: str | None = None,
        oidc: TokenVerifier | None = None,
        oidc_user_claim: str = "email",
        oidc_groups_claim: str = "groups",
        sso_scopes: str = "search,answer",
        admin_groups: list[str] | None = None,
        operator_token: str | None = None,
        required: bool = False,
        trust_headers: bool = False,
        group_bounds: GroupBounds | None = None,
    ) -> None:
        self.keys = keys
        self.groups = groups
        self.access = access
        self.access_groups_claim = access_groups_claim
        self.oidc = oidc
        self.oidc_user_claim = oidc_user_claim
        self.oidc_groups_claim = oidc_groups_claim
        self.sso_scopes = parse_scopes(sso_scopes)
        # Spelled as reader principals are (citewise.types.principal): without case.
        self.admin_groups = {g.casefold() for g in admin_groups or ()}
        self.operator_token = operator_token
        self.required = required
        self.trust_headers = trust_headers
        self.group_bounds = group_bounds or GroupBounds()

    @property
    def methods(self) -> list[str]:
        """The identity methods configured, for the start-up check and /healthz."""
        out = []
        if self.keys.active_count():
            out.append("api keys")
        if self.access:
            out.append("cloudflare access")
        if self.oidc:
            out.append("oidc")
        return out

    def describe(self) -> str:
        """The identity methods in use, for the server's start-up log: what an operator checks
        first when a caller is refused or let in. Never a secret (a key's count, a provider's
        public name)."""
        parts = []
        active = self.keys.active_count()
        if active:
            parts.append(f"API keys ({active} active)")
        if self.access:
            parts.append(f"Cloudflare Access (team {self.access.policy.issuer})")
        if self.oidc:
            parts.append(f"OIDC (issuer {self.oidc.policy.issuer})")
        if self.admin_groups and (self.access or self.oidc):
            parts.append(f"admin groups {', '.join(sorted(self.admin_groups))}")
        if self.trust_headers:
            parts.append("X-Citewise-User/Groups believed from every caller "
                         "(--insecure-trust-identity-headers)")
        elif not self.required:
            parts.append("local mode (callers on this machine are the operator, with every "
                         "scope; others may search and answer)")
        elif not parts:
            parts.append("none: every request is refused")
        if self.operator_token:
            parts.append("the operator's CLI on this machine (the token in server.json)")
        return ", ".join(parts)

    def authenticate(self, headers: Headers, client: str | None) -> Caller:
        for name in SINGLE_HEADERS:
            values = headers.getlist(name)
            if len(values) > 1:
                raise BadRequestError(
                    f"the {name} header appears {len(values)} times",
                    hint="send it once (a proxy in front of citewise must replace it, not "
                         "append)")
        operator = headers.get(OPERATOR_HEADER)
        if operator is not None:
            if not (self.operator_token and hmac.compare_digest(
                    operator.encode("utf-8"), self.operator_token.encode("utf-8"))):
                raise AuthError("the operator token is not valid",
                                hint="it is the one in <data dir>/server.json of this server")
            return Caller(self._named(headers) or Identity(), ALL_SCOPES, "operator")
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise AuthError("the Authorization header must be 'Bearer <key or token>'",
                                hint="send 'Authorization: Bearer cw_...' with a key from "
                                     "`citewise keys create`")
            if token.startswith(KEY_PREFIX):
                return self._key(token, headers)
            if self.oidc is not None:
                return self._sso(self.oidc.verify(token), headers, self.oidc_user_claim,
                                 self.oidc_groups_claim, "oidc")
            raise AuthError("the bearer token is not a citewise API key",
                            hint="keys look like cw_xxxxxxxxxx_...; this server accepts no "
                                 "other bearer tokens (no OIDC issuer is configured)")
        assertion = headers.get(ACCESS_HEADER)
        if assertion is not None and self.access is not None:
            return self._sso(self.access.verify(assertion), headers, "email",
                             self.access_groups_claim, "access")
        if self.trust_headers:
            return Caller(self._named(headers) or Identity(), self.sso_scopes, "headers")
        if self.required:
            raise AuthError(
                "this server requires an API key or a sign-in token",
                hint="send 'Authorization: Bearer <key>' (citewise keys create) or sign in "
                     "through the identity provider")
        scopes = frozenset({"search", "answer"})
        if _loopback(client):
            scopes = ALL_SCOPES
        return Caller(self._named(headers) or Identity(), scopes, "local")

    # ------------------------------------------------------------------------------------------
    def _named(self, headers: Headers) -> Identity | None:
        return _asserted(headers, self.group_bounds)

    def _key(self, secret: str, headers: Headers) -> Caller:
        key = self.keys.verify(secret)
        asserted = self._named(headers)
        if asserted is not None and not key.assert_identity:
            raise ForbiddenError(
                f"the key {key.name!r} may not name the user it acts for",
                hint="drop the X-Citewise-User/Groups headers, or create a key with "
                     "--assert-identity for a trusted front end such as the Slack bot")
        if asserted is not None:
            identity = asserted
        elif key.principal and key.principal.startswith("user:"):
            identity = Identity(user=key.principal[5:])
        elif key.principal and key.principal.startswith("group:"):
            identity = Identity(groups=(key.principal[6:],))
        else:
            identity = Identity()
        return Caller(identity, key.scopes, "key", key=key.name, limits=key.limits,
                      key_id=key.id, asserts_identity=key.assert_identity,
                      shares_conversations=key.shares_conversations)

    def _sso(self, claims: dict, headers: Headers, user_claim: str, groups_claim: str | None,
             method: str) -> Caller:
        if self._named(headers) is not None:
            raise ForbiddenError("X-Citewise-User/Groups cannot be combined with a sign-in token",
                                 hint="the token says who you are; drop the headers")
        user = claims.get(user_claim) or claims.get("email") or claims.get("common_name") \
            or claims.get("sub")
        if not isinstance(user, str) or not _USER.match(user):
            raise AuthError("the token names no user (no email or subject claim)",
                            hint=f"the provider must put the user in the {user_claim!r} claim")
        user = user.lower() if "@" in user else user
        groups = claim_groups(claims.get(groups_claim)) if groups_claim else []
        for g in self.groups.groups_of(claims.get("email") or user):
            if g not in groups:
                groups.append(g)
        scopes = self.sso_scopes
        if self.admin_groups & {g.casefold() for g in groups}:
            scopes = scopes | {"ingest", "admin"}
        return Caller(Identity(user=user, groups=tuple(groups)), scopes, method)


@dataclass(frozen=True)
class GroupBounds:
    """How many groups ``X-Citewise-Groups`` may name, and how long each may be
    (``CITEWISE_MAX_ASSERTED_GROUPS``, ``CITEWISE_MAX_GROUP_NAME``)."""

    count: int = 256
    length: int = 128


def header_text(value: str | None) -> str:
    """A header value as the text its sender meant. HTTP carries bytes, which Starlette reads
    as latin-1; a client (the Slack bot, curl) sending a name like ``zoë`` sends its UTF-8
    bytes, so a value that is valid UTF-8 is read as UTF-8 (a latin-1 reading of such bytes is
    mojibake no one meant), and any other value stays latin-1."""
    if not value:
        return ""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def _asserted(headers: Headers, bounds: GroupBounds = GroupBounds()) -> Identity | None:
    """The identity named in the headers, or ``None`` when they name none."""
    user = header_text(headers.get(USER_HEADER)).strip()
    raw_groups = header_text(headers.get(GROUPS_HEADER))
    groups = tuple(g.strip() for g in raw_groups.split(",") if g.strip())
    if not user and not groups:
        return None
    if user and not _USER.match(user):
        raise BadRequestError(f"{USER_HEADER} is not a user name: {user[:40]!r}",
                              hint="one name without spaces or commas, e.g. dana@example.com")
    if len(groups) > bounds.count:
        raise BadRequestError(f"{GROUPS_HEADER} names {len(groups)} groups, more than the "
                              f"{bounds.count} accepted",
                              hint="name the groups that matter for reading; the limit is "
                                   "CITEWISE_MAX_ASSERTED_GROUPS")
    long = [g[:40] + "..." for g in groups if len(g) > bounds.length]
    if long:
        raise BadRequestError(f"{GROUPS_HEADER} holds names longer than {bounds.length} "
                              f"characters: {long[:3]}",
                              hint="the limit is CITEWISE_MAX_GROUP_NAME")
    bad = [g for g in groups if not _GROUP.match(g)]
    if bad:
        raise BadRequestError(f"{GROUPS_HEADER} holds names that are not groups: {bad[:3]}",
                              hint="comma-separated names of letters, digits, . _ @ -")
    return Identity(user=user or None, groups=groups)


def _loopback(client: str | None) -> bool:
    try:
        return ipaddress.ip_address(client or "").is_loopback
    except ValueError:
        return False
