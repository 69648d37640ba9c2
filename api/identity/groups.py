"""Groups for people whose tokens carry none: the ``[[groups]]`` tables of the config file.

Cloudflare Access tokens hold an email and no groups unless the team adds a custom claim; an
OIDC provider's group claim may be missing or hold ids. The mapping says who belongs where:

    [[groups]]
    name = "sre"
    members = ["dana@example.com", "li@example.com"]

    [[groups]]
    name = "engineering"
    email_domains = ["example.com"]
"""

from __future__ import annotations

import re

from citewise.api.identity.settings import GroupConfig

_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


class GroupMap:
    def __init__(self, groups: list[GroupConfig]) -> None:
        self.groups = groups

    def groups_of(self, email: str | None) -> list[str]:
        if not email:
            return []
        email = email.lower()
        domain = email.rsplit("@", 1)[-1] if "@" in email else None
        return [g.name for g in self.groups
                if email in g.members or (domain is not None and domain in g.email_domains)]


def claim_groups(value) -> list[str]:
    """A token's group claim as group names: a list of strings (Keycloak's "/sre" paths lose
    the slash) or of objects with a name; anything else, and names that could not be a group,
    are dropped rather than trusted."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if isinstance(item, dict):
            item = item.get("name") or item.get("displayName")
        if isinstance(item, str):
            name = item.strip().strip("/").rsplit("/", 1)[-1]
            if _GROUP.match(name) and name not in out:
                out.append(name)
    return out
