"""Confluence Data Center / Server: REST API v1 with ``expand`` and CQL.

Endpoints (https://developer.atlassian.com/server/confluence/rest/):

* ``GET /rest/api/space/{key}`` and ``GET /rest/api/space?type=global`` for spaces.
* ``GET /rest/api/space/{key}/permissions`` -> ``[{"operation": {"operationKey": "read",
  "targetType": "space"}, "subject": {"type": "user"|"group"|"anonymous", "name", ...}}]``
  (Data Center 8.x+; space admins only. Where refused, see ``use_space_permissions``).
* ``GET /rest/api/content?spaceKey=K&type=page&expand=...`` for a full listing, and
  ``GET /rest/api/content/search?cql=space="K" and type=page and lastmodified >= "..."``
  for an incremental one; both ``start``/``limit`` paged with ``_links.next``. The expansion
  brings body, version, ancestors (with titles), labels and the page's read restriction in the
  same call, so a run costs one request per ``limit`` pages plus one per distinct ancestor.
* ``GET /rest/api/content/{id}/restriction/byOperation/read`` for an ancestor's restriction.
* ``GET /rest/api/content/{id}/child/attachment?expand=version`` -> attachments with
  ``extensions.mediaType``/``fileSize`` and ``_links.download`` (relative to the context);
  ``GET /rest/api/content/{attachment id}?expand=container`` for the page an attachment is on.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from citewise.connectors.confluence.client import ConfluenceHttp, ConfluenceNotFound
from citewise.connectors.confluence.model import Attachment, Page, Space, parse_time
from citewise.connectors.confluence.permissions import ReadRestriction

EXPAND = ",".join([
    "body.storage", "version", "ancestors", "space", "metadata.labels",
    "restrictions.read.restrictions.user", "restrictions.read.restrictions.group",
])


def cql_time(t: datetime) -> str:
    """CQL's date form ``"yyyy/MM/dd HH:mm"`` (minute precision; the overlap window covers the
    rounding and the server's time zone offset, which CQL applies to the value)."""
    return t.astimezone(UTC).strftime("%Y/%m/%d %H:%M")


class DataCenterApi:
    flavour = "datacenter"

    def __init__(self, http: ConfluenceHttp) -> None:
        self.http = http

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
        body = self.http.get_json(f"/rest/api/space/{space.key}/permissions")
        items = body if isinstance(body, list) else body.get("results") or []
        grants: list[tuple[str, str | None]] = []
        for p in items:
            op = p.get("operation") or {}
            if op.get("operationKey") != "read" or op.get("targetType") != "space":
                continue
            subject = p.get("subject") or {}
            kind = subject.get("type")
            if kind == "anonymous":
                grants.append(("anonymous", None))
            elif kind == "user":
                grants.append(("user", subject.get("username") or subject.get("name")))
            elif kind == "group":
                grants.append(("group", subject.get("name") or subject.get("displayName")))
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
                   f'lastmodified >= "{cql_time(since)}" order by lastmodified desc')
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
