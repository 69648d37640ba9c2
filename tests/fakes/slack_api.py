"""The Slack Web API on loopback, for the bot's tests: every call recorded, answered in Slack's
documented shapes (api.slack.com/methods/<method>, "Example responses"), with its awkward parts:

* responses are HTTP 200 with ``{"ok": false, "error": ...}`` for failures, except rate limits:
  HTTP 429 with ``Retry-After`` (seconds) and ``{"ok": false, "error": "ratelimited"}``
  (api.slack.com/apis/rate-limits); ``ratelimit`` lists methods to refuse once;
* arguments arrive as a query string, a form or JSON depending on the method (``slack_sdk``
  sends ``chat.postMessage`` as JSON and ``users.info`` as a GET with parameters);
* ``users.info`` carries ``profile.email`` only with the ``users:read.email`` scope: users in
  ``no_email`` come back without it;
* Socket Mode (api.slack.com/apis/socket-mode): ``apps.connections.open`` (with the app-level
  token) returns a ``wss://`` URL; the server says ``hello``, then sends envelopes
  (``{"envelope_id", "type": "events_api", "payload": <the Events API body>}``) which the
  client must acknowledge by sending back ``{"envelope_id"}``; ``disconnect`` asks it to
  reconnect;
* ``files.uploadV2`` is three steps: ``files.getUploadURLExternal``, a POST of the bytes to the
  returned URL, ``files.completeUploadExternal``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlparse

BOT_TOKEN = "xoxb-0000-test"
APP_TOKEN = "xapp-1-A0CITEWISE-0000-test"


class SlackAPI:
    def __init__(self, users: dict[str, str], usergroups: dict[str, list[str]] | None = None):
        self.users = users  # slack id -> email
        self.usergroups = usergroups or {}  # handle -> member ids
        self.no_email: set[str] = set()
        self.ratelimit: set[str] = set()
        self.calls: list[tuple[float, str, dict]] = []
        self.uploads: dict[str, bytes] = {}
        self._ts = 1733230000.0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._ws = None
        self.sockets: list = []
        self.acks: list[str] = []
        self.connections = 0

    # Socket Mode ------------------------------------------------------------------------------
    def start_socket_mode(self) -> None:
        from websockets.sync.server import serve

        def session(ws) -> None:
            self.connections += 1
            self.sockets.append(ws)
            ws.send(json.dumps({"type": "hello", "num_connections": 1,
                                "debug_info": {"host": "applink-fake"},
                                "connection_info": {"app_id": "A0CITEWISE"}}))
            try:
                for message in ws:
                    envelope = json.loads(message)
                    if "envelope_id" in envelope:
                        with self._lock:
                            self.acks.append(envelope["envelope_id"])
            except Exception:
                pass
            finally:
                if ws in self.sockets:
                    self.sockets.remove(ws)

        self._ws = serve(session, "127.0.0.1", 0)
        threading.Thread(target=self._ws.serve_forever, daemon=True).start()

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self._ws.socket.getsockname()[1]}/link"

    def push(self, payload: dict, envelope_id: str) -> None:
        """An Events API body to the connected bot, as Socket Mode delivers it."""
        end = time.monotonic() + 30
        while not self.sockets and time.monotonic() < end:
            time.sleep(0.05)
        self.sockets[-1].send(json.dumps({"envelope_id": envelope_id, "type": "events_api",
                                          "payload": payload, "accepts_response_payload": False,
                                          "retry_attempt": 0, "retry_reason": ""}))

    def drop_connection(self) -> None:
        """Slack's ``disconnect`` message, sent before it cycles a connection."""
        for ws in list(self.sockets):
            ws.send(json.dumps({"type": "disconnect", "reason": "refresh_requested",
                                "debug_info": {"host": "applink-fake"}}))
            ws.close()

    @property
    def response_url(self) -> str:
        return self.url.replace("/api/", "/respond/T0FERNHILL/1234/abcd")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/"

    def start(self) -> SlackAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._ws is not None:
            self._ws.shutdown()

    def called(self, method: str) -> list[dict]:
        with self._lock:
            return [args for _, m, args in self.calls if m == method]

    def wait_for(self, method: str, count: int = 1, timeout: float = 60.0,
                 where=lambda args: True) -> list[dict]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = [a for a in self.called(method) if where(a)]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no {count} {method} calls within {timeout} s: {self.calls}")

    def _next_ts(self) -> str:
        with self._lock:
            self._ts += 0.0001
            return f"{self._ts:.6f}"

    def _answer(self, method: str, args: dict) -> tuple[int, dict, dict]:
        if method in self.ratelimit:
            self.ratelimit.discard(method)
            return 429, {"Retry-After": "1"}, {"ok": False, "error": "ratelimited"}
        if method == "apps.connections.open":
            return 200, {}, {"ok": True, "url": self.ws_url}
        if method == "auth.test":
            return 200, {}, {"ok": True, "url": "https://fernhill.slack.com/", "team": "Fernhill",
                             "user": "citewise", "team_id": "T0FERNHILL", "user_id": "U0BOT",
                             "bot_id": "B0BOT", "is_enterprise_install": False}
        if method == "users.info":
            uid = args.get("user")
            if uid not in self.users:
                return 200, {}, {"ok": False, "error": "user_not_found"}
            profile = {"display_name": uid.lower(), "real_name": uid}
            if uid not in self.no_email:
                profile["email"] = self.users[uid]
            return 200, {}, {"ok": True, "user": {"id": uid, "team_id": "T0FERNHILL",
                                                  "name": uid.lower(), "deleted": False,
                                                  "tz": "Europe/London", "tz_offset": 0,
                                                  "is_bot": False, "profile": profile}}
        if method == "usergroups.list":
            return 200, {}, {"ok": True, "usergroups": [
                {"id": f"S0{handle.upper()[:6]}", "team_id": "T0FERNHILL", "handle": handle,
                 "name": handle, "users": members, "user_count": len(members)}
                for handle, members in self.usergroups.items()]}
        if method in ("chat.postMessage", "chat.postEphemeral"):
            ts = self._next_ts()
            if method == "chat.postEphemeral":
                return 200, {}, {"ok": True, "message_ts": ts}
            return 200, {}, {"ok": True, "channel": args.get("channel"), "ts": ts,
                             "message": {"type": "message", "user": "U0BOT", "bot_id": "B0BOT",
                                         "text": args.get("text"), "ts": ts,
                                         "thread_ts": args.get("thread_ts")}}
        if method in ("reactions.add", "reactions.remove"):
            return 200, {}, {"ok": True}
        if method == "files.getUploadURLExternal":
            file_id = f"F{len(self.uploads):08d}"
            self.uploads[file_id] = b""
            return 200, {}, {"ok": True, "file_id": file_id,
                             "upload_url": self.url.replace("/api/", f"/upload/{file_id}")}
        if method == "files.completeUploadExternal":
            files = json.loads(args.get("files", "[]"))
            return 200, {}, {"ok": True, "files": [{"id": f["id"], "title": f.get("title")}
                                                   for f in files]}
        return 200, {}, {"ok": False, "error": "unknown_method"}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _reply(self, status: int, headers: dict, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if url.path.startswith("/respond/"):  # a slash command's response_url
                    with fake._lock:
                        fake.calls.append((time.monotonic(), "response_url", json.loads(raw)))
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    return
                if url.path.startswith("/upload/"):
                    fake.uploads[url.path.rsplit("/", 1)[1]] = raw
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"OK")
                    return
                token = APP_TOKEN if url.path.endswith("apps.connections.open") else BOT_TOKEN
                if self.headers.get("Authorization") != f"Bearer {token}":
                    self._reply(200, {}, {"ok": False, "error": "not_authed"})
                    return
                args = dict(parse_qsl(url.query))
                kind = self.headers.get("Content-Type", "")
                if raw and "json" in kind:
                    args.update(json.loads(raw))
                elif raw:
                    args.update(dict(parse_qsl(raw.decode())))
                method = url.path.removeprefix("/api/")
                with fake._lock:
                    fake.calls.append((time.monotonic(), method, args))
                self._reply(*fake._answer(method, args))

            do_GET = _handle
            do_POST = _handle

        return Handler
