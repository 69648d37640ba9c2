"""Who the caller is, as the front door decided: what the page shows as "signed in as", and
what an operator checks when a key or a token does not do what they expected."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from citewise.api.auth import caller
from citewise.api.identity.caller import Caller

router = APIRouter(prefix="/v1", tags=["identity"])


class Me(BaseModel):
    principal: str = Field(description="The name usage, the audit log and conversations use.")
    user: str | None = None
    groups: list[str] = Field(default_factory=list)
    scopes: list[str] = Field(description="What the caller may do: search, answer, ingest, "
                              "admin.")
    method: str = Field(description="How the caller proved who they are: key, access "
                        "(Cloudflare Access), oidc, operator, local (keyless loopback mode).")
    key: str | None = Field(default=None, description="The API key's name, when one was used.")


@router.get("/me", response_model=Me, summary="Who you are signed in as")
def me(who: Annotated[Caller, Depends(caller)]) -> Me:
    """The caller's identity, groups and scopes: any authenticated caller may ask."""
    return Me(principal=who.principal, user=who.identity.user, groups=list(who.identity.groups),
              scopes=sorted(who.scopes), method=who.method, key=who.key)
