"""Who is asking: a Slack user as a citewise principal.

The user's email (``users.info``, which needs the ``users:read.email`` scope) is the citewise
user, as Cloudflare Access or OIDC would name them; their groups come from Slack user groups
mapped to citewise groups in the bot's configuration (``security-team`` -> ``security``). Both
are cached for a few minutes: ``users.info`` is a Tier 4 method and ``usergroups.list`` Tier 2.
A user without an email (a bot, a guest the workspace hides) is refused, never treated as
anyone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from slack_sdk import WebClient

TTL = 300.0


@dataclass(frozen=True)
class Person:
    slack_id: str
    email: str
    groups: tuple[str, ...]


class UnknownPerson(Exception):
    pass


class People:
    def __init__(self, client: WebClient, group_map: dict[str, str] | None = None) -> None:
        self.client = client
        self.group_map = group_map or {}
        self._people: dict[str, tuple[float, Person]] = {}
        self._groups: tuple[float, dict[str, set[str]]] | None = None
        self._lock = threading.Lock()

    def _memberships(self) -> dict[str, set[str]]:
        """Slack user id -> citewise groups, from the mapped Slack user groups."""
        now = time.monotonic()
        with self._lock:
            if self._groups and now - self._groups[0] < TTL:
                return self._groups[1]
        members: dict[str, set[str]] = {}
        if self.group_map:
            listed = self.client.usergroups_list(include_users=True)
            groups: list[dict] = listed.get("usergroups", [])
            for g in groups:
                group = self.group_map.get(g.get("handle", ""))
                if not group:
                    continue
                for user in g.get("users", []):
                    members.setdefault(user, set()).add(group)
        with self._lock:
            self._groups = (now, members)
        return members

    def lookup(self, slack_id: str) -> Person:
        now = time.monotonic()
        with self._lock:
            cached = self._people.get(slack_id)
            if cached and now - cached[0] < TTL:
                return cached[1]
        user = self.client.users_info(user=slack_id).get("user") or {}
        email = (user.get("profile") or {}).get("email")
        if not email or user.get("is_bot"):
            raise UnknownPerson(slack_id)
        person = Person(slack_id, email.lower(),
                        tuple(sorted(self._memberships().get(slack_id, set()))))
        with self._lock:
            self._people[slack_id] = (now, person)
        return person
