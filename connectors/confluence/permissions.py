"""Who may read a Confluence page, as citewise reader principals.

Confluence decides in two layers:

1. **Space permissions**: who may view the space at all.
2. **View restrictions** on the page *and on each of its ancestors*: a restriction on a parent
   applies to every page below it, and restrictions add up, so a reader must pass every
   restricted level (Atlassian: "Page restrictions", inherited view restrictions).

What we do with that:

* No restriction anywhere on the page's path: the readers are the space's readers.
* Some restricted levels: the readers are the principals named on **every** restricted level
  (a literal intersection). We cannot see group membership, so a user named on the page but only
  covered by a group on the parent is dropped: under-granting is the safe side. We take the
  principals a restriction names as able to view the space (Confluence restrictions only narrow).
* Anything we could not determine (a restriction or space-permission call that was refused or
  failed) makes the page **restricted to nobody**: ``NO_READERS``. It stays findable by nobody
  until a later run can read its permissions; never public. A single space grant whose subject
  cannot be named is left out (and reported), so it narrows the readers instead of hiding the
  space from everyone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from citewise.types import PUBLIC, principal

# A principal no caller can hold: an identity's groups are non-empty names, so "group:" with no
# name never matches. It keeps the readers list non-empty (empty means public in citewise).
NO_READERS = "group:"


@dataclass(frozen=True)
class ReadRestriction:
    """The view ("read") restriction on one page: the users and groups it names."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        return bool(self.users or self.groups)

    def principals(self) -> set[str]:
        return {principal("user", u) for u in self.users} | {
            principal("group", g) for g in self.groups}

    @classmethod
    def from_api(cls, restrictions: dict | None, *, user_key: str) -> ReadRestriction:
        """From the ``restrictions`` object of a read restriction (v1, both flavours):
        ``{"user": {"results": [...]}, "group": {"results": [{"name": ...}]}}``.

        ``user_key`` is the field naming a user: ``accountId`` (Cloud) or ``username`` (Data
        Center). A user or group without it cannot be named, so the restriction is
        undeterminable: raise ``ValueError``.
        """
        restrictions = restrictions or {}
        users, groups = [], []
        for u in (restrictions.get("user") or {}).get("results") or []:
            name = u.get(user_key)
            if not name:
                raise ValueError(f"restricted user without {user_key}")
            users.append(str(name))
        for g in (restrictions.get("group") or {}).get("results") or []:
            name = g.get("name")
            if not name:
                raise ValueError("restricted group without a name")
            groups.append(str(name))
        return cls(tuple(sorted(users)), tuple(sorted(groups)))


def space_readers(grants: Iterable[tuple[str, str | None]]) -> list[str] | None:
    """Readers from a space's view grants: ``(kind, name)`` with kind user, group or anonymous.

    A grant we cannot name (a user key or group id we could not resolve, passed with name
    None) is left out: one unnameable subject must not hide the space from everyone the other
    grants name (see ``unnamed_grants`` for the report). None when no grant can be named at
    all. Roles and other kinds grant nothing we can express.
    """
    out: set[str] = set()
    for kind, name in grants:
        if kind == "anonymous":
            out.add(PUBLIC)
        elif kind in ("user", "group") and name:
            out.add(principal(kind, name))
    return sorted(out) if out else None


def unnamed_grants(grants: Iterable[tuple[str, str | None]]) -> int:
    """How many user or group grants could not be named (and were left out)."""
    return sum(1 for kind, name in grants if kind in ("user", "group") and not name)


def page_readers(
    space: Sequence[str] | None, path: Sequence[ReadRestriction | None]
) -> list[str]:
    """Readers of a page from its space's readers and the restrictions on its path.

    ``path`` is the read restriction of each ancestor, top-down, then of the page itself;
    None where it could not be read. ``space`` is None when the space's permissions could not
    be read.
    """
    if any(r is None for r in path):
        return [NO_READERS]
    levels = [r.principals() for r in path if r is not None and r.restricted]
    if not levels:
        return sorted(space) if space else [NO_READERS]
    allowed = set.intersection(*levels)
    return sorted(allowed) if allowed else [NO_READERS]
