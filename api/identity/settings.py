"""Who is calling: the identity methods' settings (see docs/identity.md) and the ``[[groups]]``
of the config file (see ``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from citewise.errors import ConfigError
from citewise.settings import ConfigTable, SettingsPart, from_table


class GroupConfig(BaseModel):
    """A ``[[groups]]`` entry: who belongs to a group, for identity providers whose tokens carry
    no groups (Cloudflare Access by default). Members are emails; ``email_domains`` admits a
    whole domain."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
    members: list[str] = Field(default_factory=list)
    email_domains: list[str] = Field(default_factory=list)

    @field_validator("members", "email_domains")
    @classmethod
    def _lower(cls, v: list[str]) -> list[str]:
        return [x.strip().lower().lstrip("@") for x in v if x.strip()]


class IdentitySettings(SettingsPart):
    api_keys: str | None = Field(
        default=None, exclude=True,
        description="Removed: API keys now live in the catalog (`citewise keys create`).",
    )
    require_auth: bool | None = Field(
        default=None,
        description="Refuse requests without a key or token; unset = required unless the "
        "server binds only to loopback.",
    )
    insecure_trust_identity_headers: bool = Field(
        default=False,
        description="Believe X-Citewise-User/Groups from anyone: only behind a proxy that sets "
        "them and that nothing can bypass. Logged loudly at start.",
    )
    access_team_domain: str | None = Field(
        default=None,
        description="Cloudflare Access team domain (https://<team>.cloudflareaccess.com); "
        "set with access_aud to accept Cf-Access-Jwt-Assertion tokens.",
    )
    access_aud: str | None = Field(
        default=None, description="The Access application's AUD tag (comma-separated for several)."
    )
    access_jwks_url: str | None = Field(
        default=None, description="JWKS URL; unset = <team domain>/cdn-cgi/access/certs."
    )
    access_groups_claim: str | None = Field(
        default=None,
        description="Claim holding the user's groups; unset = the [[groups]] mapping only."
    )
    oidc_issuer: str | None = Field(
        default=None, description="OIDC issuer (iss) whose bearer JWTs are accepted."
    )
    oidc_audience: str | None = Field(
        default=None, description="Expected aud of OIDC tokens (comma-separated for several)."
    )
    oidc_jwks_url: str | None = Field(default=None, description="The issuer's JWKS URL.")
    oidc_jwks_file: Path | None = Field(
        default=None, description="A JWKS file instead of the URL (air-gapped installs)."
    )
    oidc_user_claim: str = Field(
        default="email", description="Claim naming the user (falls back to sub)."
    )
    oidc_groups_claim: str = Field(default="groups", description="Claim holding the groups.")
    jwt_leeway: float = Field(
        default=60.0, ge=0, le=600, description="Seconds of clock skew allowed on exp/nbf/iat."
    )
    jwks_timeout: float = Field(default=5.0, description="Seconds to fetch a JWKS.")
    sso_scopes: str = Field(
        default="search,answer", description="Scopes of people signed in through Access/OIDC."
    )
    admin_groups: str | None = Field(
        default=None,
        description="Groups (comma-separated) whose signed-in members also get the ingest and "
        "admin scopes.",
    )
    max_asserted_groups: int = Field(
        default=256, ge=1, description="Most groups X-Citewise-Groups may name; more is a 400.")
    max_group_name: int = Field(
        default=128, ge=1, le=1024, description="Longest group name X-Citewise-Groups may "
        "hold (characters); longer is a 400.")
    groups: list[GroupConfig] = from_table("[[groups]]", list)

    def loaded(self) -> None:
        if self.api_keys:
            raise ConfigError(
                "CITEWISE_API_KEYS is no longer read: keys live in the catalog, hashed, with "
                "scopes",
                hint="create one per client with `citewise keys create NAME --scopes "
                     "search,answer` and unset CITEWISE_API_KEYS",
            )


def _read_groups(table: Any, path: Path) -> dict[str, Any]:
    return {"groups": [GroupConfig(**g) for g in table or []]}


GROUPS_TABLE = ConfigTable("groups", "[[groups]]", _read_groups)
