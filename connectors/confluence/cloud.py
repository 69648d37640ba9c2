"""Confluence Cloud: REST API v2 for spaces, pages, bodies, labels and ancestors; v1 for what
v2 does not offer (view restrictions, a group's name from its id).

Endpoints (https://developer.atlassian.com/cloud/confluence/rest/v2/):

* ``GET /wiki/api/v2/spaces?keys=A,B`` -> ``{"results": [{"id", "key", "name", ...}],
  "_links": {"next": "/wiki/api/v2/spaces?cursor=..."}}``
* ``GET /wiki/api/v2/spaces/{id}/permissions`` -> ``{"results": [{"principal": {"type":
  "user"|"group"|"role", "id"}, "operation": {"key": "read", "targetType": "space"}}]}``
* ``GET /wiki/api/v2/spaces/{id}/pages?body-format=storage&sort=-modified-date`` -> pages with
  ``version.createdAt`` (the last edit), ``body.storage.value``, ``_links.webui``. Newest first,
  so an incremental run stops at the first page older than its mark.
* ``GET /wiki/api/v2/pages/{id}?body-format=storage``, ``/pages/{id}/labels``,
  ``/pages/{id}/ancestors`` (ids only, top-down: titles come from the listing or a page GET).
* v1 ``GET /wiki/rest/api/content/{id}/restriction/byOperation/read`` -> ``{"restrictions":
  {"user": {"results": [{"accountId"}]}, "group": {"results": [{"name", "id"}]}}}``
* v1 ``GET /wiki/rest/api/group/by-id?id=...`` -> ``{"name", "id"}``.
* ``GET /wiki/api/v2/pages/{id}/attachments`` -> ``{"results": [{"id", "title", "status",
  "mediaType", "fileSize", "version": {"number"}, "downloadLink", "webuiLink"}], "_links":
  {"next"}}`` (links relative to ``/wiki``); ``GET /wiki/api/v2/attachments/{id}`` -> ``pageId``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo

from citewise.connectors.confluence.client import ConfluenceHttp, ConfluenceNotFound
from citewise.connectors.confluence.model import Attachment, Page, Space, parse_time
from citewise.connectors.confluence.permissions import ReadRestriction


class CloudApi:
    flavour = "cloud"

    def __init__(self, http: ConfluenceHttp) -> None:
        self.http = http
        # Cloud lists pages newest first by their UTC timestamps: no zone is involved.
        self.query_zone: tzinfo = UTC
        self._titles: dict[str, str] = {}
        self._group_names: dict[str, str | None] = {}
        self._space_keys: dict[str, str] = {}  # space id -> key

    def spaces(self, keys: list[str]) -> tuple[list[Space], list[str]]:
        params: dict = {"limit": 250}
        if keys:
            params["keys"] = ",".join(keys)
        found: list[Space] = []
        for results, _ in self.http.pages("/api/v2/spaces", params):
            for s in results:
                if s.get("status", "current") != "current":
                    continue
                space = Space(id=str(s["id"]), key=s["key"], name=s.get("name") or s["key"])
                self._space_keys[space.id] = space.key
                found.append(space)
        have = {s.key for s in found}
        return found, [k for k in keys if k not in have]

    def space_grants(self, space: Space) -> list[tuple[str, str | None]]:
        grants: list[tuple[str, str | None]] = []
        for results, _ in self.http.pages(f"/api/v2/spaces/{space.id}/permissions",
                                          {"limit": 250}):
            for p in results:
                op = p.get("operation") or {}
                if op.get("key") != "read" or op.get("targetType") != "space":
                    continue
                principal = p.get("principal") or {}
                kind, pid = principal.get("type"), principal.get("id")
                if kind == "group":
                    grants.append(("group", self._group_name(str(pid)) if pid else None))
                elif kind == "user":
                    grants.append(("user", str(pid) if pid else None))
                elif kind == "anonymous":
                    grants.append(("anonymous", None))
        return grants

    def _group_name(self, group_id: str) -> str | None:
        if group_id not in self._group_names:
            try:
                body = self.http.get_json("/rest/api/group/by-id", {"id": group_id})
                self._group_names[group_id] = body.get("name")
            except ConfluenceNotFound:
                self._group_names[group_id] = None
        return self._group_names[group_id]

    def list_pages(
        self, space: Space, *, since: datetime | None, cursor: str | None, limit: int
    ) -> Iterator[tuple[list[Page], str | None]]:
        params = {"body-format": "storage", "sort": "-modified-date", "status": "current",
                  "limit": limit}
        source = self.http.pages(cursor) if cursor else self.http.pages(
            f"/api/v2/spaces/{space.id}/pages", params)
        for results, next_link in source:
            pages = [self._page(r, space.key) for r in results]
            if since is not None:
                fresh = [p for p in pages if p.modified is None or p.modified >= since]
                if len(fresh) < len(pages):  # newest first: the rest are older still
                    yield fresh, None
                    return
                pages = fresh
            yield pages, next_link

    def _page(self, r: dict, space_key: str) -> Page:
        version = r.get("version") or {}
        body = ((r.get("body") or {}).get("storage") or {}).get("value")
        page = Page(
            id=str(r["id"]),
            title=r.get("title") or "",
            space_key=space_key,
            version=int(version.get("number") or 0),
            modified=parse_time(version.get("createdAt")),
            body=body,
            webui=(r.get("_links") or {}).get("webui"),
            extra={"parent_id": r.get("parentId")},
        )
        self._titles[page.id] = page.title
        return page

    def page(self, page_id: str, spaces: dict[str, Space]) -> Page | None:
        try:
            r = self.http.get_json(f"/api/v2/pages/{page_id}", {"body-format": "storage"})
        except ConfluenceNotFound:
            return None
        if r.get("status", "current") != "current":
            return None
        key = self._space_keys.get(str(r.get("spaceId")))
        if key is None or key not in spaces:
            return None
        return self._page(r, key)

    def labels(self, page: Page) -> list[str]:
        if page.labels is None:
            names: list[str] = []
            for results, _ in self.http.pages(f"/api/v2/pages/{page.id}/labels", {"limit": 250}):
                names.extend(str(lb["name"]) for lb in results if lb.get("name"))
            page.labels = sorted(names)
        return page.labels

    def ancestors(self, page: Page) -> list[tuple[str, str]]:
        if page.ancestors is None:
            if not page.extra.get("parent_id"):
                page.ancestors = []
                return page.ancestors
            body = self.http.get_json(f"/api/v2/pages/{page.id}/ancestors", {"limit": 250})
            out = []
            for a in body.get("results") or []:
                if a.get("type", "page") != "page":
                    continue  # folders and whiteboards: not pages, carry no restrictions we read
                aid = str(a["id"])
                out.append((aid, self._title(aid)))
            page.ancestors = out
        return page.ancestors

    def _title(self, page_id: str) -> str:
        if page_id not in self._titles:
            try:
                self._titles[page_id] = self.http.get_json(f"/api/v2/pages/{page_id}").get(
                    "title") or ""
            except ConfluenceNotFound:
                self._titles[page_id] = ""
        return self._titles[page_id]

    def read_restriction(self, page_id: str) -> ReadRestriction:
        body = self.http.get_json(f"/rest/api/content/{page_id}/restriction/byOperation/read",
                                  {"limit": 200})
        return ReadRestriction.from_api(body.get("restrictions"), user_key="accountId")

    def page_url(self, page: Page) -> str:
        if page.webui:
            return self.http.base_url + page.webui
        return f"{self.http.base_url}/spaces/{page.space_key}/pages/{page.id}"

    def attachments(self, page_id: str) -> list[Attachment]:
        out: list[Attachment] = []
        for results, _ in self.http.pages(f"/api/v2/pages/{page_id}/attachments",
                                          {"limit": 250}):
            for a in results:
                if a.get("status", "current") != "current":
                    continue
                size = a.get("fileSize")
                out.append(Attachment(
                    id=str(a["id"]), title=a.get("title") or str(a["id"]),
                    media_type=a.get("mediaType") or "",
                    file_size=int(size) if size is not None else None,
                    version=int((a.get("version") or {}).get("number") or 0),
                    download=a.get("downloadLink"), webui=a.get("webuiLink")))
        return out

    def attachment_page(self, attachment_id: str) -> str | None:
        try:
            body = self.http.get_json(f"/api/v2/attachments/{attachment_id}")
        except ConfluenceNotFound:
            return None
        if body.get("status", "current") != "current":
            return None
        return str(body["pageId"]) if body.get("pageId") else None
