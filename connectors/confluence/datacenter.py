"""Confluence Data Center / Server: REST API v1 with ``expand`` and CQL.

Endpoints (https://developer.atlassian.com/server/confluence/rest/):

* ``GET /rest/api/space/{key}`` and ``GET /rest/api/space?type=global`` for spaces.
* Space view permissions, three ways, because Data Center changed them:

  - ``GET /rest/api/space/{key}/permissions`` (Data Center 9.1 and later; CONFSERVER-100505)
    -> a bare array of ``{"operation": {"targetType": "space", "operationKey": "read"},
    "subject": {"type": "user", "userKey": "..."} | {"type": "group", "name": "..."}}``. Users
    come by ``userKey`` only, resolved to their username with ``GET /rest/api/user?key=``
    (cached per run). Without space-admin rights this answers 500 (CONFSERVER-99908): that is
    reported as the missing permission, not retried as an outage.
  - Before 9.1 that path is unknown (404); ``POST /rpc/json-rpc/confluenceservice-v2``
    ``getSpacePermissionSets`` gives the ``VIEWSPACE`` set (``userName``/``groupName``, both
    null for anonymous), if the remote API is on and the account is a space admin.
  - Anonymous view: ``GET /rest/api/space/{key}/permissions/anonymous``, which counts only if
    the site lets anonymous users in at all (``GET /rest/api/permissions/anonymous`` grants
    ``use``); when that cannot be confirmed the space is not treated as public.

* ``GET /rest/api/content?spaceKey=K&type=page&expand=...`` for a full listing, and
  ``GET /rest/api/content/search?cql=space="K" and type=page and lastmodified >= "..."``
  for an incremental one; both ``start``/``limit`` paged with ``_links.next``. The expansion
  brings body, version, ancestors (with titles), labels and the page's read restriction in the
  same call, so a run costs one request per ``limit`` pages plus one per distinct ancestor.
* CQL dates have no offset and are read in the account's time zone, by default the server's
  (the CQL field reference: "relative to your configured time zone"): ``cql_time`` writes them
  in the zone the connector gives (``query_zone``).
* ``GET /rest/api/content/{id}/restriction/byOperation/read`` for an ancestor's restriction.
* ``GET /rest/api/content/{id}/child/attachment?expand=version`` -> attachments with
  ``extensions.mediaType``/``fileSize`` and ``_links.download`` (relative to the context);
  ``GET /rest/api/content/{attachment id}?expand=container`` for the page an attachment is on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo

from citewise.connectors.confluence.client import (
    ConfluenceHttp,
    ConfluenceNotFound,
    ConfluencePermissionsRefused,
    ConfluenceServerError,
)
from citewise.connectors.confluence.model import Attachment, Page, Space, parse_time
from citewise.connectors.confluence.permissions import ReadRestriction
from citewise.errors import SourceError

log = logging.getLogger("citewise.connectors.confluence")

EXPAND = ",".join([
    "body.storage", "version", "ancestors", "space", "metadata.labels",
    "restrictions.read.restrictions.user", "restrictions.read.restrictions.group",
])


RPC_PATH = "/rpc/json-rpc/confluenceservice-v2"


def cql_time(t: datetime, zone: tzinfo = UTC) -> str:
    """CQL's date form ``"yyyy/MM/dd HH:mm"``, written in ``zone`` (minute precision: the
    overlap window covers the rounding)."""
    return t.astimezone(zone).strftime("%Y/%m/%d %H:%M")


class DataCenterApi:
    flavour = "datacenter"

    def __init__(self, http: ConfluenceHttp) -> None:
        self.http = http
        # The zone CQL dates are written in; the connector sets it for each run.
        self.query_zone: tzinfo = UTC
        self._users: dict[str, list[str]] = {}
        self._site_anonymous: bool | None = None

    def spaces(self, keys: list[str]) -> tuple[list[Space], list[str]]:
        found: list[Space] = []
        missing: list[str] = []
        if keys:
            for key in keys:
                try:
                    s = self.http.get_json(f"/rest/api/space/{key}")
                except ConfluenceNotFound:
                    missing.append(key)
                    continue
                found.append(Space(id=str(s.get("id", key)), key=s["key"],
                                   name=s.get("name") or s["key"]))
            return found, missing
        for results, _ in self.http.pages("/rest/api/space", {"type": "global", "limit": 100}):
            found.extend(Space(id=str(s.get("id", s["key"])), key=s["key"],
                               name=s.get("name") or s["key"]) for s in results)
        return found, []

    def space_grants(self, space: Space) -> list[tuple[str, str | None]]:
        try:
            body = self.http.get_json(f"/rest/api/space/{space.key}/permissions",
                                      retry_server_errors=False)
        except ConfluenceNotFound:
            return self._rpc_grants(space)  # before Data Center 9.1
        except ConfluenceServerError as e:
            raise _needs_admin(space, e) from None
        items = body if isinstance(body, list) else (body or {}).get("results") or []
        grants: list[tuple[str, str | None]] = []
        for p in items:
            if not _reads_space(p.get("operation")):
                continue
            subject = p.get("subject") or {}
            kind = subject.get("type")
            if kind == "user":
                # None: a user we cannot name
                names: list[str | None] = list(self._user_names(subject)) or [None]
                grants.extend(("user", n) for n in names)
            elif kind == "group":
                grants.append(("group", subject.get("name") or None))
            elif kind == "anonymous":
                grants.append(("anonymous", None))
        if self._anonymous_may_view(space):
            grants.append(("anonymous", None))
        return grants

    def _user_names(self, subject: dict) -> list[str]:
        """The names citewise knows a person by: the username (and the email, where the
        server gives one). A user key that cannot be resolved gives none."""
        named = [name for k in ("username", "email") if (name := subject.get(k))]
        if named:
            return named
        key = subject.get("userKey")
        if not key:
            return []
        if key not in self._users:
            try:
                person = self.http.get_json("/rest/api/user", {"key": key})
            except SourceError as e:
                log.warning("confluence: user key %s could not be resolved: %s", key, e)
                person = {}
            self._users[key] = [person[k] for k in ("username", "email") if person.get(k)]
        return self._users[key]

    def _anonymous_may_view(self, space: Space) -> bool:
        try:
            items = self.http.get_json(f"/rest/api/space/{space.key}/permissions/anonymous",
                                       retry_server_errors=False)
        except ConfluenceNotFound:
            return False
        except ConfluenceServerError as e:
            raise _needs_admin(space, e) from None
        return any(_reads_space(op) for op in _operations(items)) and self._site_lets_anonymous()

    def _site_lets_anonymous(self) -> bool:
        """Space-level anonymous view only counts when the site grants anonymous users "use"."""
        if self._site_anonymous is None:
            try:
                items = self.http.get_json("/rest/api/permissions/anonymous",
                                           retry_server_errors=False)
                self._site_anonymous = any(
                    (op.get("targetType"), op.get("operationKey")) == ("application", "use")
                    for op in _operations(items))
            except SourceError as e:
                log.warning("confluence: cannot tell whether the site admits anonymous users "
                            "(%s); spaces open to them are indexed as not public", e)
                self._site_anonymous = False
        return self._site_anonymous

    def _rpc_grants(self, space: Space) -> list[tuple[str, str | None]]:
        call = {"jsonrpc": "2.0", "method": "getSpacePermissionSets", "id": 1,
                "params": [space.key]}
        hint = ("Data Center before 9.1 has no REST endpoint for space permissions: turn on "
                "the remote API (General configuration > Further configuration) and make the "
                "account a space administrator, or set use_space_permissions = false and give "
                "the source readers")
        try:
            body = self.http.post_json(RPC_PATH, call, retry_server_errors=False)
        except SourceError as e:
            raise ConfluencePermissionsRefused(
                f"cannot read the view permissions of space {space.key!r}: {e.message}",
                hint=hint) from None
        if not isinstance(body, dict) or "error" in body or not isinstance(
                body.get("result"), list):
            error = (body or {}).get("error") if isinstance(body, dict) else None
            raise ConfluencePermissionsRefused(
                f"cannot read the view permissions of space {space.key!r}: "
                f"{(error or {}).get('message') or 'an unexpected JSON-RPC answer'}", hint=hint)
        grants: list[tuple[str, str | None]] = []
        for permission_set in body["result"]:
            if permission_set.get("type") != "VIEWSPACE":
                continue
            for entry in permission_set.get("spacePermissions") or []:
                user, group = entry.get("userName"), entry.get("groupName")
                if user:
                    grants.append(("user", user))
                elif group:
                    grants.append(("group", group))
                elif self._site_lets_anonymous():
                    grants.append(("anonymous", None))
        return grants

    def list_pages(
        self, space: Space, *, since: datetime | None, cursor: str | None, limit: int
    ) -> Iterator[tuple[list[Page], str | None]]:
        if cursor:
            source = self.http.pages(cursor)
        elif since is None:
            source = self.http.pages("/rest/api/content", {
                "spaceKey": space.key, "type": "page", "status": "current",
                "expand": EXPAND, "limit": limit})
        else:
            cql = (f'space = "{space.key}" and type = page and '
                   f'lastmodified >= "{cql_time(since, self.query_zone)}" '
                   "order by lastmodified desc")
            source = self.http.pages("/rest/api/content/search",
                                     {"cql": cql, "expand": EXPAND, "limit": limit})
        for results, next_link in source:
            yield [self._page(r, space.key) for r in results
                   if r.get("type", "page") == "page" and r.get("status", "current") == "current"
                   ], next_link

    def _page(self, r: dict, space_key: str) -> Page:
        version = r.get("version") or {}
        labels = ((r.get("metadata") or {}).get("labels") or {}).get("results")
        read = (r.get("restrictions") or {}).get("read")
        page = Page(
            id=str(r["id"]),
            title=r.get("title") or "",
            space_key=((r.get("space") or {}).get("key")) or space_key,
            version=int(version.get("number") or 0),
            modified=parse_time(version.get("when")),
            body=((r.get("body") or {}).get("storage") or {}).get("value"),
            webui=(r.get("_links") or {}).get("webui"),
            ancestors=[(str(a["id"]), a.get("title") or "") for a in r.get("ancestors") or []
                       if a.get("type", "page") == "page"],
            labels=sorted(str(lb["name"]) for lb in labels if lb.get("name"))
            if labels is not None else None,
        )
        if read is not None:
            try:
                page.restriction = ReadRestriction.from_api(read.get("restrictions"),
                                                            user_key="username")
                page.restriction_known = True
            except ValueError:
                pass  # read again through the restriction endpoint
        return page

    def page(self, page_id: str, spaces: dict[str, Space]) -> Page | None:
        try:
            r = self.http.get_json(f"/rest/api/content/{page_id}", {"expand": EXPAND})
        except ConfluenceNotFound:
            return None
        if r.get("status", "current") != "current":
            return None
        key = (r.get("space") or {}).get("key")
        if key not in spaces:
            return None
        return self._page(r, key)

    def labels(self, page: Page) -> list[str]:
        if page.labels is None:
            body = self.http.get_json(f"/rest/api/content/{page.id}/label", {"limit": 200})
            page.labels = sorted(str(lb["name"]) for lb in body.get("results") or []
                                 if lb.get("name"))
        return page.labels

    def ancestors(self, page: Page) -> list[tuple[str, str]]:
        return page.ancestors or []

    def read_restriction(self, page_id: str) -> ReadRestriction:
        body = self.http.get_json(f"/rest/api/content/{page_id}/restriction/byOperation/read",
                                  {"limit": 200})
        return ReadRestriction.from_api(body.get("restrictions"), user_key="username")

    def page_url(self, page: Page) -> str:
        if page.webui:
            return self.http.base_url + page.webui
        return f"{self.http.base_url}/pages/viewpage.action?pageId={page.id}"

    def attachments(self, page_id: str) -> list[Attachment]:
        out: list[Attachment] = []
        for results, _ in self.http.pages(f"/rest/api/content/{page_id}/child/attachment",
                                          {"expand": "version", "limit": 100}):
            for a in results:
                if a.get("status", "current") != "current":
                    continue
                ext = a.get("extensions") or {}
                media = ext.get("mediaType") or ((a.get("metadata") or {}).get("mediaType"))
                size = ext.get("fileSize")
                links = a.get("_links") or {}
                out.append(Attachment(
                    id=str(a["id"]), title=a.get("title") or str(a["id"]),
                    media_type=media or "",
                    file_size=int(size) if size is not None else None,
                    version=int((a.get("version") or {}).get("number") or 0),
                    download=links.get("download"), webui=links.get("webui")))
        return out

    def attachment_page(self, attachment_id: str) -> str | None:
        try:
            body = self.http.get_json(f"/rest/api/content/{attachment_id}",
                                      {"expand": "container"})
        except ConfluenceNotFound:
            return None
        container = body.get("container") or {}
        if body.get("status", "current") != "current" or container.get("type") != "page":
            return None
        return str(container["id"]) if container.get("id") else None


def _reads_space(operation) -> bool:
    op = operation or {}
    return op.get("operationKey") == "read" and op.get("targetType") == "space"


def _operations(items) -> list[dict]:
    """The operations of a permission list, in either shape Data Center versions answer:
    ``[{"operation": {...}}, ...]`` or ``{"operations": [...]}``."""
    if isinstance(items, dict):
        items = items.get("operations") or items.get("results") or []
    out = []
    for item in items or []:
        if isinstance(item, dict):
            out.append(item.get("operation") if "operation" in item else item)
    return [op for op in out if isinstance(op, dict)]


def _needs_admin(space: Space, error: ConfluenceServerError) -> ConfluencePermissionsRefused:
    return ConfluencePermissionsRefused(
        f"Confluence answered {error.status} when asked for the view permissions of space "
        f"{space.key!r}",
        hint="Data Center answers 500 there when the account lacks space-administrator (or "
             "Confluence administrator) permission (CONFSERVER-99908): grant it, or set "
             "use_space_permissions = false and give the source readers",
    )
