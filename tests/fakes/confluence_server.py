# ruff: noqa: E501  (storage-format fixtures are long lines of markup, as Confluence writes them)
"""A Confluence site on loopback that speaks both REST flavours, for tests and the benchmark.

One in-memory model of spaces, pages, labels and view restrictions is served as:

* **Cloud** under ``/wiki``: REST v2 (``/wiki/api/v2/spaces``, ``.../spaces/{id}/pages``,
  ``/pages/{id}``, ``/labels``, ``/ancestors``, ``/spaces/{id}/permissions``; cursor pagination
  through ``_links.next``) and the v1 endpoints Cloud still needs (read restrictions, group by
  id). Basic auth with email + API token.
* **Data Center** under ``/confluence`` (a context path, as many installs have): REST v1
  ``/rest/api/content`` with ``expand``, ``/rest/api/content/search`` with a small CQL subset,
  ``/rest/api/space``, space permissions and read restrictions; ``start``/``limit`` pagination
  through ``_links.next``. Bearer personal access token. Its awkward parts, as documented:

  - ``/rest/api/space/{key}/permissions`` exists from 9.1 (CONFSERVER-100505; DC REST v1010
    "Space Permissions"), answers a bare array, and names a user by ``userKey`` only
    (``{"type": "user", "userKey": "4028800d98..."}``), so a name needs
    ``/rest/api/user?key=`` (a Person: ``type``, ``username``, ``userKey``, ``displayName``, no
    email). Before 9.1 the path is unknown (404 with Jersey's XML body) and the JSON-RPC
    ``getSpacePermissionSets`` is the way (``VIEWSPACE`` sets of ``userName``/``groupName``,
    both null for anonymous). Without space-admin rights it answers 500 (CONFSERVER-99908).
  - Anonymous view of a space is only in ``/rest/api/space/{key}/permissions/anonymous``, and
    takes effect only when the site grants anonymous users "use"
    (``/rest/api/permissions/anonymous``).
  - Timestamps (``version.when``) carry the server's UTC offset with milliseconds
    (``2024-03-11T19:24:06.964+08:00``; ``Z`` at zero), and CQL reads ``lastmodified`` dates
    ("yyyy/MM/dd HH:mm" and three other forms) in the account's zone, by default the
    server's (DC CQL field reference: "relative to your configured time zone").

Attachments are served on both: the listings (v2 ``/pages/{id}/attachments``, v1
``/content/{id}/child/attachment``), one attachment by id, and the files' bytes under
``/download/attachments/{page id}/{file name}``, as both flavours link them.

Payload shapes follow Atlassian's reference pages for those endpoints. Knobs make it misbehave:
a 429 with ``Retry-After`` on chosen requests, transient or permanent 500s on paths matching a
pattern, pages that vanish right after a listing returned them, a cap on ``limit``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, quote_plus, urlencode, urlsplit


@dataclass
class FakeSpace:
    id: int
    key: str
    name: str
    # Who may view the space: ("group", name), ("user", account id / username), ("anonymous", "")
    grants: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class FakeUser:
    username: str
    key: str  # the opaque user key Data Center names users by (32 hex characters)
    display_name: str


@dataclass
class FakeAttachment:
    id: str  # "att<n>", as Confluence numbers them
    file_name: str
    media_type: str
    data: bytes
    version: int = 1


@dataclass
class FakePage:
    id: int
    space: str
    title: str
    body: str
    parent: int | None = None
    labels: list[str] = field(default_factory=list)
    read_users: list[str] = field(default_factory=list)
    read_groups: list[str] = field(default_factory=list)
    version: int = 1
    modified: datetime = field(default_factory=lambda: datetime(2024, 1, 1, tzinfo=UTC))
    attachments: list[FakeAttachment] = field(default_factory=list)


class ConfluenceModel:
    """The site's content. Edits bump the version and the modification time, as Confluence
    does; restriction changes do not (they are not page versions in Confluence either)."""

    def __init__(self) -> None:
        self.spaces: dict[str, FakeSpace] = {}
        self.pages: dict[int, FakePage] = {}
        self.group_ids: dict[str, str] = {}
        self.users: dict[str, FakeUser] = {}
        self.clock = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
        # Data Center's server: its version, its time zone, whether the integration account is
        # a space admin, and whether the site lets anonymous users in at all.
        self.dc_version: tuple[int, int] = (9, 2)
        self.server_tz: tzinfo = UTC
        self.space_admin = True
        self.anonymous_site_access = True
        self._next_id = 100000
        self.lock = threading.RLock()

    def tick(self, minutes: float = 1) -> datetime:
        self.clock += timedelta(minutes=minutes)
        return self.clock

    def user(self, username: str) -> FakeUser:
        if username not in self.users:
            key = hashlib.md5(username.encode()).hexdigest()  # 32 hex, like a DC user key
            self.users[username] = FakeUser(username, key, username.replace(".", " ").title())
        return self.users[username]

    def group_id(self, name: str) -> str:
        return self.group_ids.setdefault(name, f"g-{len(self.group_ids) + 1:04d}-{name}")

    def add_space(self, key: str, name: str, grants: list[tuple[str, str]]) -> FakeSpace:
        space = FakeSpace(id=len(self.spaces) + 1000, key=key, name=name, grants=list(grants))
        self.spaces[key] = space
        for kind, who in grants:
            if kind == "group":
                self.group_id(who)
            elif kind == "user":
                self.user(who)
        return space

    def add_page(self, space: str, title: str, body: str, *, parent: int | None = None,
                 labels: tuple[str, ...] = (), users: tuple[str, ...] = (),
                 groups: tuple[str, ...] = (), modified: datetime | None = None) -> int:
        with self.lock:
            self._next_id += 1
            pid = self._next_id
            self.pages[pid] = FakePage(pid, space, title, body, parent, list(labels),
                                       list(users), list(groups), 1, modified or self.tick())
            for g in groups:
                self.group_id(g)
            return pid

    def edit(self, pid: int, *, body: str | None = None, title: str | None = None) -> None:
        with self.lock:
            page = self.pages[pid]
            page.body = body if body is not None else page.body
            page.title = title if title is not None else page.title
            page.version += 1
            page.modified = self.tick()

    def restrict(self, pid: int, *, users: tuple[str, ...] = (), groups: tuple[str, ...] = ()
                 ) -> None:
        with self.lock:
            self.pages[pid].read_users = list(users)
            self.pages[pid].read_groups = list(groups)
            for g in groups:
                self.group_id(g)

    def delete(self, pid: int) -> None:
        with self.lock:
            self.pages.pop(pid, None)

    def attach(self, pid: int, file_name: str, media_type: str, data: bytes) -> str:
        """A file attached to the page. Like Confluence, this is no new version of the page."""
        with self.lock:
            self._next_id += 1
            att = FakeAttachment(f"att{self._next_id}", file_name, media_type, data)
            self.pages[pid].attachments.append(att)
            return att.id

    def remove_attachment(self, att_id: str) -> None:
        with self.lock:
            for page in self.pages.values():
                page.attachments = [a for a in page.attachments if a.id != att_id]

    def attachment(self, att_id: str) -> tuple[FakePage, FakeAttachment] | None:
        for page in self.pages.values():
            for a in page.attachments:
                if a.id == att_id:
                    return page, a
        return None

    def ancestors(self, page: FakePage) -> list[FakePage]:
        chain, parent = [], page.parent
        while parent is not None and parent in self.pages:
            chain.append(self.pages[parent])
            parent = self.pages[parent].parent
        return list(reversed(chain))


class _Reply(Exception):
    def __init__(self, status: int, body, headers: dict | None = None) -> None:
        self.status, self.body, self.headers = status, body, headers or {}


@dataclass
class _File:
    data: bytes
    media_type: str


@dataclass
class _Xml:
    text: str


class FakeConfluence:
    """The HTTP server. ``cloud_url`` and ``dc_url`` are the base URLs a connector is given."""

    def __init__(self, model: ConfluenceModel, *, email: str = "bot@example.com",
                 api_token: str = "cloud-secret-token", pat: str = "dc-secret-pat",
                 max_limit: int = 25) -> None:
        self.model = model
        self.cloud_auth = "Basic " + base64.b64encode(f"{email}:{api_token}".encode()).decode()
        self.dc_auth = f"Bearer {pat}"
        self.max_limit = max_limit
        self.rate_limit_on: set[int] = set()  # request numbers (1-based) that get a 429
        self.retry_after = "1"
        self.transient: dict[str, int] = {}  # path regex -> how many more 500s to answer
        self.failing: list[str] = []  # path regexes that always answer 500
        self.vanish_after_listing: set[int] = set()  # deleted right after a listing shows them
        self.log: list[str] = []  # "GET /path?query" of every request, in order
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    # Lifecycle --------------------------------------------------------------------------------
    def start(self) -> FakeConfluence:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                fake._handle(self)

            def do_POST(self) -> None:  # noqa: N802
                fake._handle(self, "POST")

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def origin(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def cloud_url(self) -> str:
        return self.origin + "/wiki"

    @property
    def dc_url(self) -> str:
        return self.origin + "/confluence"

    def reset_log(self) -> None:
        with self._lock:
            self.log.clear()

    # Dispatch ---------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, method: str = "GET") -> None:
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        multi = parse_qs(parts.query)
        posted = None
        if method == "POST":
            length = int(h.headers.get("Content-Length") or 0)
            posted = json.loads(h.rfile.read(length) or b"null")
        with self._lock:
            self.log.append(f"{method} {h.path}")
            n = len(self.log)
        try:
            if n in self.rate_limit_on:
                raise _Reply(429, {"message": "Rate limit exceeded"},
                             {"Retry-After": self.retry_after})
            for pattern in self.failing:
                if re.search(pattern, parts.path):
                    raise _Reply(500, {"message": "Internal server error"})
            for pattern, left in list(self.transient.items()):
                if left > 0 and re.search(pattern, parts.path):
                    self.transient[pattern] = left - 1
                    raise _Reply(500, {"message": "Internal server error"})
            path = parts.path
            with self.model.lock:
                if path.startswith("/wiki/"):
                    self._auth(h, self.cloud_auth)
                    body = self._cloud(path[len("/wiki"):], query, parts.query)
                elif path.startswith("/confluence/") and method == "POST":
                    self._auth(h, self.dc_auth)
                    body = self._dc_rpc(path[len("/confluence"):], posted)
                elif path.startswith("/confluence/"):
                    self._auth(h, self.dc_auth)
                    body = self._dc(path[len("/confluence"):], query, multi, parts.query)
                else:
                    raise _Reply(404, {"message": "not found"})
            status, headers = 200, {}
        except _Reply as r:
            status, body, headers = r.status, r.body, r.headers
        if isinstance(body, _File):
            data, content_type = body.data, body.media_type
        elif isinstance(body, _Xml):
            data, content_type = body.text.encode(), "application/xml"
        else:
            data, content_type = json.dumps(body).encode(), "application/json"
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def _auth(h: BaseHTTPRequestHandler, expected: str) -> None:
        got = h.headers.get("Authorization")
        if got is None:
            raise _Reply(401, {"statusCode": 401, "message": "Unauthorized; scope does not match"})
        if got != expected:
            raise _Reply(401, {"statusCode": 401, "message": "Client must be authenticated"})

    def _limit(self, query: dict, default: int = 25) -> int:
        return max(1, min(int(query.get("limit", default)), self.max_limit))

    def _vanish(self, pages: list[FakePage]) -> None:
        for p in pages:
            if p.id in self.vanish_after_listing:
                self.vanish_after_listing.discard(p.id)
                self.model.delete(p.id)

    def _page_of(self, pid: str) -> FakePage:
        try:
            return self.model.pages[int(pid)]
        except (KeyError, ValueError):
            raise _Reply(404, {"statusCode": 404,
                               "message": f"No content found with id: {pid}"}) from None

    # Cloud ------------------------------------------------------------------------------------
    def _cloud(self, path: str, q: dict, raw_query: str) -> dict:
        m = self.model
        if path == "/api/v2/spaces":
            keys = [k for k in q.get("keys", "").split(",") if k]
            spaces = [s for s in m.spaces.values() if not keys or s.key in keys]
            return self._cursor_page("/wiki/api/v2/spaces", q, [self._v2_space(s) for s in spaces])
        if mt := re.fullmatch(r"/api/v2/spaces/(\d+)/permissions", path):
            space = self._space_by_id(mt.group(1))
            items = []
            for i, (kind, who) in enumerate(space.grants):
                principal = ({"type": "group", "id": m.group_ids.get(who, f"gone-{who}")}
                             if kind == "group" else
                             {"type": "user", "id": who} if kind == "user" else
                             {"type": "anonymous", "id": "anonymous"})
                items.append({"id": str(2 * i), "principal": principal,
                              "operation": {"key": "read", "targetType": "space"}})
                items.append({"id": str(2 * i + 1), "principal": principal,
                              "operation": {"key": "create", "targetType": "page"}})
            return self._cursor_page(path, q, items, prefix="/wiki")
        if mt := re.fullmatch(r"/api/v2/spaces/(\d+)/pages", path):
            space = self._space_by_id(mt.group(1))
            pages = [p for p in m.pages.values() if p.space == space.key]
            if q.get("sort") == "-modified-date":
                pages.sort(key=lambda p: (p.modified, p.id), reverse=True)
            else:
                pages.sort(key=lambda p: p.id)
            with_body = q.get("body-format") == "storage"
            reply = self._cursor_page("/wiki" + path, q, pages, keep=("body-format", "sort"))
            shown = reply["results"]
            reply["results"] = [self._v2_page(p, with_body) for p in shown]
            self._vanish(shown)
            return reply
        if mt := re.fullmatch(r"/api/v2/pages/(\d+)", path):
            return self._v2_page(self._page_of(mt.group(1)), q.get("body-format") == "storage")
        if mt := re.fullmatch(r"/api/v2/pages/(\d+)/labels", path):
            page = self._page_of(mt.group(1))
            return {"results": [{"id": f"lbl-{n}", "name": n, "prefix": "global"}
                                for n in page.labels], "_links": {"base": self.cloud_url}}
        if mt := re.fullmatch(r"/api/v2/pages/(\d+)/ancestors", path):
            page = self._page_of(mt.group(1))
            return {"results": [{"id": str(a.id), "type": "page"} for a in m.ancestors(page)],
                    "_links": {"base": self.cloud_url}}
        if mt := re.fullmatch(r"/rest/api/content/(\d+)/restriction/byOperation/read", path):
            page = self._page_of(mt.group(1))
            return self._v1_restriction(page, cloud=True)
        if mt := re.fullmatch(r"/api/v2/pages/(\d+)/attachments", path):
            page = self._page_of(mt.group(1))
            items = [self._v2_attachment(page, a) for a in page.attachments]
            return self._cursor_page(path, q, items, prefix="/wiki", keep=())
        if mt := re.fullmatch(r"/api/v2/attachments/(att\d+)", path):
            page, att = self._attachment_of(mt.group(1))
            return self._v2_attachment(page, att)
        if mt := re.fullmatch(r"/download/attachments/(\d+)/([^/]+)", path):
            return self._download(mt.group(1), mt.group(2))
        if path == "/rest/api/group/by-id":
            for name, gid in m.group_ids.items():
                if gid == q.get("id"):
                    return {"type": "group", "name": name, "id": gid}
            raise _Reply(404, {"statusCode": 404, "message": "group not found"})
        raise _Reply(404, {"statusCode": 404, "message": f"no endpoint {path}"})

    def _attachment_of(self, att_id: str) -> tuple[FakePage, FakeAttachment]:
        found = self.model.attachment(att_id)
        if found is None:
            raise _Reply(404, {"statusCode": 404, "message": f"No attachment {att_id}"})
        return found

    def _download(self, pid: str, quoted_name: str) -> _File:
        page = self._page_of(pid)
        for a in page.attachments:
            if quote(a.file_name) == quoted_name:
                return _File(a.data, a.media_type)
        raise _Reply(404, {"statusCode": 404, "message": "attachment not found"})

    @staticmethod
    def _download_link(page: FakePage, a: FakeAttachment) -> str:
        return (f"/download/attachments/{page.id}/{quote(a.file_name)}?version={a.version}"
                "&modificationDate=1704099600000&api=v2")

    def _v2_attachment(self, page: FakePage, a: FakeAttachment) -> dict:
        return {
            "id": a.id, "status": "current", "title": a.file_name,
            "createdAt": "2024-01-01T09:00:00.000Z", "pageId": str(page.id),
            "mediaType": a.media_type, "mediaTypeDescription": "", "comment": "",
            "fileId": f"file-{a.id}", "fileSize": len(a.data),
            "webuiLink": f"/pages/viewpageattachments.action?pageId={page.id}&preview="
                         f"{quote('/' + str(page.id) + '/' + a.file_name)}",
            "downloadLink": self._download_link(page, a),
            "version": {"number": a.version, "createdAt": "2024-01-01T09:00:00.000Z",
                        "message": "", "minorEdit": False, "authorId": "acc-author"},
            "_links": {"webui": f"/pages/viewpageattachments.action?pageId={page.id}",
                       "download": self._download_link(page, a)},
        }

    def _v1_attachment(self, page: FakePage, a: FakeAttachment, expand: set[str]) -> dict:
        out: dict = {
            "id": a.id, "type": "attachment", "status": "current", "title": a.file_name,
            "metadata": {"mediaType": a.media_type},
            "extensions": {"mediaType": a.media_type, "fileSize": len(a.data),
                           "comment": ""},
            "_links": {"webui": f"/pages/viewpageattachments.action?pageId={page.id}"
                                f"&preview={quote('/' + str(page.id) + '/' + a.file_name)}",
                       "download": self._download_link(page, a),
                       "self": f"{self.dc_url}/rest/api/content/{a.id}"},
        }
        if "version" in expand:
            out["version"] = {"by": {"type": "known", "username": "author"},
                              "when": "2024-01-01T09:00:00.000Z", "number": a.version}
        if "container" in expand:
            out["container"] = {"id": str(page.id), "type": "page", "status": "current",
                                "title": page.title}
        return out

    def _space_by_id(self, sid: str) -> FakeSpace:
        for s in self.model.spaces.values():
            if str(s.id) == sid:
                return s
        raise _Reply(404, {"statusCode": 404, "message": f"space {sid} not found"})

    def _cursor_page(self, path: str, q: dict, items: list, *, prefix: str = "",
                     keep: tuple[str, ...] = ("keys",)) -> dict:
        """v2 cursor pagination: an opaque cursor in ``_links.next``. Like Atlassian's, it
        marks a position in the ordering (the last item's position key), not an offset, so
        items deleted meanwhile do not shift the next page."""
        limit = self._limit(q)
        keys = [self._position(x) for x in items]
        start = 0
        if q.get("cursor"):
            after = json.loads(base64.urlsafe_b64decode(q["cursor"]).decode())
            start = next((i for i, k in enumerate(keys) if k == after), None)
            if start is None:  # the last item is gone: resume after its position
                start = sum(1 for k in keys if self._before(k, after, items))
            else:
                start += 1
        chunk = items[start:start + limit]
        links: dict = {"base": self.cloud_url}
        if start + limit < len(items):
            params = {k: q[k] for k in keep if k in q}
            params["limit"] = str(limit)
            params["cursor"] = base64.urlsafe_b64encode(
                json.dumps(keys[start + limit - 1]).encode()).decode()
            links["next"] = f"{prefix}{path}?{urlencode(params)}"
        return {"results": chunk, "_links": links}

    @staticmethod
    def _position(item) -> list:
        if isinstance(item, FakePage):
            return [_iso(item.modified), item.id]
        return [str(item.get("id"))]

    @staticmethod
    def _before(key: list, after: list, items: list) -> bool:
        """Whether ``key`` sorts at or before ``after`` in the list's order."""
        if len(items) > 1 and isinstance(items[0], FakePage):
            descending = FakeConfluence._position(items[0]) > FakeConfluence._position(items[-1])
            return key >= after if descending else key <= after
        return key <= after

    def _v2_space(self, s: FakeSpace) -> dict:
        return {"id": str(s.id), "key": s.key, "name": s.name, "type": "global",
                "status": "current", "authorId": "acc-admin", "homepageId": None,
                "_links": {"webui": f"/spaces/{s.key}"}}

    def _v2_page(self, p: FakePage, with_body: bool) -> dict:
        out = {
            "id": str(p.id), "status": "current", "title": p.title,
            "spaceId": str(self.model.spaces[p.space].id),
            "parentId": str(p.parent) if p.parent else None,
            "parentType": "page" if p.parent else None, "position": 0,
            "authorId": "acc-author", "ownerId": "acc-author", "lastOwnerId": None,
            "createdAt": "2023-06-01T08:00:00.000Z",
            "version": {"number": p.version, "createdAt": _iso(p.modified), "message": "",
                        "minorEdit": False, "authorId": "acc-author"},
            "_links": {"webui": f"/spaces/{p.space}/pages/{p.id}/{quote_plus(p.title)}",
                       "editui": f"/pages/resumedraft.action?draftId={p.id}",
                       "tinyui": f"/x/{p.id}"},
        }
        if with_body:
            out["body"] = {"storage": {"value": p.body, "representation": "storage"}}
        return out

    def _v1_restriction(self, p: FakePage, *, cloud: bool) -> dict:
        users = [({"type": "known", "accountId": u, "accountType": "atlassian",
                   "displayName": u} if cloud else
                  self._person(u))
                 for u in p.read_users]
        groups = [{"type": "group", "name": g, "id": self.model.group_id(g)}
                  for g in p.read_groups]
        return {
            "operation": "read",
            "restrictions": {
                "user": {"results": users, "start": 0, "limit": 200, "size": len(users)},
                "group": {"results": groups, "start": 0, "limit": 200, "size": len(groups)},
            },
            "_links": {"self": f"/rest/api/content/{p.id}/restriction/byOperation/read"},
        }

    # Data Center ------------------------------------------------------------------------------
    def _dc(self, path: str, q: dict, multi: dict, raw_query: str) -> dict | list:
        m = self.model
        if path == "/rest/api/space":
            spaces = sorted(m.spaces.values(), key=lambda s: s.key)
            return self._offset_page(path, q, [self._dc_space(s) for s in spaces], ("type",))
        if mt := re.fullmatch(r"/rest/api/space/([^/]+)", path):
            space = m.spaces.get(mt.group(1))
            if space is None:
                raise _Reply(404, {"statusCode": 404,
                                   "message": f"No space with key : {mt.group(1)}"})
            return self._dc_space(space)
        if mt := re.fullmatch(r"/rest/api/space/([^/]+)/permissions(/anonymous)?", path):
            return self._dc_space_permissions(mt.group(1), anonymous=bool(mt.group(2)))
        if path == "/rest/api/permissions/anonymous":
            return ([{"operation": {"targetType": "application", "operationKey": "use"},
                      "subject": {"type": "anonymous"}}] if m.anonymous_site_access else [])
        if path == "/rest/api/user":
            user = next((u for u in m.users.values()
                         if u.key == q.get("key") or u.username == q.get("username")), None)
            if user is None:
                raise _Reply(404, {"statusCode": 404, "message": "No user found"})
            return self._person(user.username)
        expand = set((q.get("expand") or "").split(","))
        if path == "/rest/api/content":
            pages = sorted((p for p in m.pages.values() if p.space == q.get("spaceKey")),
                           key=lambda p: p.id)
            reply = self._offset_page(path, q, pages, ("spaceKey", "type", "status", "expand"))
            shown = reply["results"]
            reply["results"] = [self._dc_page(p, expand) for p in shown]
            self._vanish(shown)
            return reply
        if path == "/rest/api/content/search":
            pages = self._cql(q.get("cql", ""))
            reply = self._offset_page(path, q, pages, ("cql", "expand"))
            shown = reply["results"]
            reply["results"] = [self._dc_page(p, expand) for p in shown]
            self._vanish(shown)
            return reply
        if mt := re.fullmatch(r"/rest/api/content/(\d+)", path):
            return self._dc_page(self._page_of(mt.group(1)), expand)
        if mt := re.fullmatch(r"/rest/api/content/(att\d+)", path):
            return self._v1_attachment(*self._attachment_of(mt.group(1)), expand)
        if mt := re.fullmatch(r"/rest/api/content/(\d+)/child/attachment", path):
            page = self._page_of(mt.group(1))
            items = [self._v1_attachment(page, a, expand) for a in page.attachments]
            return self._offset_page(path, q, items, ("expand",))
        if mt := re.fullmatch(r"/download/attachments/(\d+)/([^/]+)", path):
            return self._download(mt.group(1), mt.group(2))
        if mt := re.fullmatch(r"/rest/api/content/(\d+)/restriction/byOperation/read", path):
            return self._v1_restriction(self._page_of(mt.group(1)), cloud=False)
        if mt := re.fullmatch(r"/rest/api/content/(\d+)/label", path):
            page = self._page_of(mt.group(1))
            return {"results": [{"prefix": "global", "name": n, "id": f"lbl-{n}"}
                                for n in page.labels], "start": 0, "limit": 200,
                    "size": len(page.labels)}
        raise _Reply(404, {"statusCode": 404, "message": f"no endpoint {path}"})

    def _person(self, username: str) -> dict:
        """A Data Center Person, as /rest/api/user and restrictions show one: no email."""
        u = self.model.user(username)
        return {"type": "known", "username": u.username, "userKey": u.key,
                "profilePicture": {"path": "/images/icons/profilepics/default.svg",
                                   "width": 48, "height": 48, "isDefault": True},
                "displayName": u.display_name,
                "_links": {"self": f"{self.dc_url}/rest/api/user?key={u.key}"},
                "_expandable": {"status": ""}}

    def _dc_space_permissions(self, key: str, *, anonymous: bool) -> list:
        m = self.model
        if m.dc_version < (9, 1):
            raise _Reply(404, _Xml("<status><status-code>404</status-code><message>null for "
                                   f"uri: {self.dc_url}/rest/api/space/{key}/permissions"
                                   "</message></status>"))
        if not m.space_admin:  # CONFSERVER-99908: a 500, not a 403
            raise _Reply(500, {"statusCode": 500, "message": "java.lang.NullPointerException"})
        space = m.spaces.get(key)
        if space is None:
            raise _Reply(404, {"statusCode": 404, "message": f"No space with key : {key}"})
        out = []
        for kind, who in space.grants:
            if (kind == "anonymous") != anonymous:
                continue
            if kind == "anonymous":
                subject = {"type": "anonymous"}
            elif kind == "user":
                # A purged user keeps its grant, under a key nothing resolves any more.
                key = m.users[who].key if who in m.users else hashlib.md5(b"purged").hexdigest()
                subject = {"type": "user", "userKey": key}
            else:
                subject = {"type": "group", "name": who}
            for op in (("read", "space"), ("create", "page")):
                out.append({"operation": {"targetType": op[1], "operationKey": op[0]},
                            "subject": subject, "spaceKey": space.key, "spaceId": space.id})
        return out

    def _dc_rpc(self, path: str, call) -> dict:
        """The JSON-RPC API of Data Center before 9.1: only getSpacePermissionSets."""
        if path != "/rpc/json-rpc/confluenceservice-v2" or not isinstance(call, dict):
            raise _Reply(404, {"statusCode": 404, "message": f"no endpoint {path}"})
        if call.get("method") != "getSpacePermissionSets":
            return {"jsonrpc": "2.0", "id": call.get("id"),
                    "error": {"code": -32601, "message": "method not found"}}
        m = self.model
        if not m.space_admin:
            return {"jsonrpc": "2.0", "id": call.get("id"), "error": {
                "code": 0, "message": "NotPermittedException: You're not allowed to view "
                                      "permissions for this space"}}
        space = m.spaces.get((call.get("params") or [""])[0])
        if space is None:
            return {"jsonrpc": "2.0", "id": call.get("id"),
                    "error": {"code": 0, "message": "No space found"}}
        entries = [{"type": "VIEWSPACE",
                    "userName": who if kind == "user" else None,
                    "groupName": who if kind == "group" else None}
                   for kind, who in space.grants]
        return {"jsonrpc": "2.0", "id": call.get("id"), "result": [
            {"type": "VIEWSPACE", "spacePermissions": entries},
            {"type": "EDITSPACE", "spacePermissions": []}]}

    def _cql(self, cql: str) -> list[FakePage]:
        space = re.search(r'space\s*=\s*"([^"]+)"', cql)
        since = re.search(r'lastmodified\s*>=\s*"([^"]+)"', cql)
        if not space:
            raise _Reply(400, {"statusCode": 400, "message": "Could not parse cql"})
        pages = [p for p in self.model.pages.values() if p.space == space.group(1)]
        if since:
            # A CQL date has no offset: it is read in the account's zone (the server's here).
            t = _cql_date(since.group(1)).replace(tzinfo=self.model.server_tz)
            pages = [p for p in pages if p.modified >= t]
        return sorted(pages, key=lambda p: (p.modified, p.id), reverse=True)

    def _offset_page(self, path: str, q: dict, items: list, keep: tuple[str, ...]) -> dict:
        """v1 pagination: ``start``/``limit``, ``_links.next`` relative to the context."""
        limit = self._limit(q)
        start = int(q.get("start", 0))
        chunk = items[start:start + limit]
        links = {"base": self.dc_url, "context": "/confluence",
                 "self": f"{self.dc_url}{path}"}
        if start + limit < len(items):
            params = {k: q[k] for k in keep if k in q}
            params.update(start=str(start + limit), limit=str(limit))
            links["next"] = f"{path}?{urlencode(params)}"
        return {"results": chunk, "start": start, "limit": limit, "size": len(chunk),
                "_links": links}

    def _dc_space(self, s: FakeSpace) -> dict:
        return {"id": s.id, "key": s.key, "name": s.name, "type": "global",
                "_links": {"webui": f"/display/{s.key}",
                           "self": f"{self.dc_url}/rest/api/space/{s.key}"},
                "_expandable": {"homepage": "", "description": ""}}

    def _dc_page(self, p: FakePage, expand: set[str]) -> dict:
        space = self.model.spaces[p.space]
        out: dict = {
            "id": str(p.id), "type": "page", "status": "current", "title": p.title,
            "extensions": {"position": "none"},
            "_links": {"webui": f"/display/{p.space}/{quote_plus(p.title)}",
                       "tinyui": f"/x/{p.id}",
                       "self": f"{self.dc_url}/rest/api/content/{p.id}"},
            "_expandable": {"children": f"/rest/api/content/{p.id}/child"},
        }
        if "space" in expand:
            out["space"] = {"id": space.id, "key": space.key, "name": space.name,
                            "type": "global"}
        if "version" in expand:
            out["version"] = {"by": self._person("author"),
                              "when": _dc_time(p.modified, self.model.server_tz),
                              "number": p.version, "minorEdit": False}
        if "ancestors" in expand:
            out["ancestors"] = [{"id": str(a.id), "type": "page", "status": "current",
                                 "title": a.title} for a in self.model.ancestors(p)]
        if "body.storage" in expand:
            out["body"] = {"storage": {"value": p.body, "representation": "storage"}}
        if "metadata.labels" in expand:
            out["metadata"] = {"labels": {
                "results": [{"prefix": "global", "name": n, "id": f"lbl-{n}"} for n in p.labels],
                "start": 0, "limit": 200, "size": len(p.labels)}}
        if any(e.startswith("restrictions.read") for e in expand):
            out["restrictions"] = {"read": self._v1_restriction(p, cloud=False)}
        return out


def _dc_time(t: datetime, zone: tzinfo) -> str:
    """Data Center's form: milliseconds and the server's offset, ``Z`` when it is zero."""
    local = t.astimezone(zone)
    offset = local.utcoffset() or timedelta(0)
    if not offset:
        return local.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return local.strftime("%Y-%m-%dT%H:%M:%S.000") + f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _cql_date(text: str) -> datetime:
    for fmt in ("%Y/%m/%d %H:%M", "%Y-%m-%d %H:%M", "%Y/%m/%d", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise _Reply(400, {"statusCode": 400, "message": f"Could not parse cql date {text!r}"})


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# A small, realistic site ---------------------------------------------------------------------
DEPLOY_GUIDE = """<p>How we ship the <strong>checkout</strong> service.</p>
<ac:structured-macro ac:name="toc" ac:schema-version="1"><ac:parameter ac:name="maxLevel">3</ac:parameter></ac:structured-macro>
<h2>Release train</h2>
<p>Releases leave every Tuesday at 10:00&nbsp;UTC from the <code>release/*</code> branch.</p>
<ac:structured-macro ac:name="info" ac:schema-version="1"><ac:rich-text-body><p>Freeze starts Friday at noon.</p></ac:rich-text-body></ac:structured-macro>
<table><tbody><tr><th>Environment</th><th>Cluster</th></tr><tr><td>staging</td><td>eu-stg-1</td></tr><tr><td>production</td><td>eu-prod-2</td></tr></tbody></table>
<h2>Roll back a release</h2>
<ol><li>Find the last good image tag in Argo CD.</li><li>Run the rollback below.</li></ol>
<ac:structured-macro ac:name="code" ac:schema-version="1"><ac:parameter ac:name="language">bash</ac:parameter><ac:plain-text-body><![CDATA[kubectl -n checkout rollout undo deployment/checkout-api
kubectl -n checkout rollout status deployment/checkout-api]]></ac:plain-text-body></ac:structured-macro>
<ac:structured-macro ac:name="warning" ac:schema-version="1"><ac:rich-text-body><p>Never roll back across a schema migration.</p></ac:rich-text-body></ac:structured-macro>
<p>See <ac:link><ri:page ri:content-title="Database failover" /></ac:link> for the database.</p>"""

FAILOVER = """<h2>Promote the replica</h2>
<p>When the primary Postgres in eu-prod-2 is lost, promote the hot standby with the
<code>pg_ctl promote</code> command and repoint PgBouncer.</p>
<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">sql</ac:parameter><ac:plain-text-body><![CDATA[SELECT pg_is_in_recovery();]]></ac:plain-text-body></ac:structured-macro>"""

KEYS = """<h2>Rotate the Northpay signing key</h2>
<p>Generate the new Northpay signing key in the merchant portal, store it in Vault under
<code>payments/northpay</code>, then revoke the old key after 24 hours.</p>"""

HANDBOOK = """<h1>Expense policy</h1><p>Meals on business trips are reimbursed up to 40 euros a day.</p>
<ac:structured-macro ac:name="children" ac:schema-version="2" />"""


def sample_site(filler: int = 8) -> tuple[ConfluenceModel, dict[str, int]]:
    """Three spaces, nested pages, a restricted subtree, labels, code and tables."""
    m = ConfluenceModel()
    m.add_space("ENG", "Engineering", [("group", "eng")])
    m.add_space("SEC", "Security", [("group", "security")])
    m.add_space("HB", "Handbook", [("anonymous", "")])
    ids: dict[str, int] = {}
    ids["eng_home"] = m.add_page("ENG", "Engineering home", "<p>Welcome to engineering.</p>")
    ids["deploy"] = m.add_page("ENG", "Deploy guide", DEPLOY_GUIDE, parent=ids["eng_home"],
                               labels=("runbook", "deploys"))
    ids["incidents"] = m.add_page("ENG", "Incident response", "<p>Who to page, and how.</p>",
                                  parent=ids["eng_home"], groups=("sre",))
    ids["failover"] = m.add_page("ENG", "Database failover", FAILOVER, parent=ids["incidents"],
                                 labels=("runbook",))
    ids["keys"] = m.add_page("ENG", "Payment key rotation", KEYS, parent=ids["incidents"],
                             users=("alice",), groups=("sre",))
    ids["draft"] = m.add_page("ENG", "Half-written ideas", "<p>Nothing to see yet.</p>",
                              parent=ids["eng_home"], labels=("draft",))
    for i in range(filler):
        ids[f"note{i}"] = m.add_page(
            "ENG", f"Service note {i}",
            f"<h2>Owner</h2><p>Service number {i} is owned by team {i % 3}.</p>",
            parent=ids["eng_home"])
    ids["sec_home"] = m.add_page("SEC", "Security home", "<p>Report incidents to #sec.</p>")
    ids["handbook"] = m.add_page("HB", "Expenses", HANDBOOK)
    return m, ids
