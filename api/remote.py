"""The CLI talking to a ``citewise serve`` over HTTP: on this machine, or at CITEWISE_URL.

Two ways to get there, one client:

* The embedded index admits one process. When the server holds it, the CLI finds the server
  through ``<data dir>/server.json`` (written by ``citewise serve``) and sends its work there
  with the operator token the file holds (``find_server``).
* ``CITEWISE_URL`` names a server elsewhere (a cron on another machine): the CLI sends every
  command that has a remote form there, with the API key in ``CITEWISE_API_KEY``, and never
  opens a data folder of its own (``named_server``). The same variables as ``citewise mcp``,
  the Slack bot and the retrievers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from citewise.api.auth import OPERATOR_HEADER
from citewise.api.integrations.client import KEY_VARIABLE, URL_VARIABLE
from citewise.errors import CitewiseError, IndexLockedError
from citewise.settings import Settings


def write_server_file(settings: Settings, host: str, port: int, operator_token: str) -> None:
    """Where the server is, and the token that proves a caller is its operator.

    The file is readable by its owner only (the account that owns the data folder): reading it
    is the proof. It is written to a new file and moved into place, never left readable.
    """
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    settings.server_file.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"url": f"http://{connect_host}:{port}", "pid": os.getpid(),
                       "operator_token": operator_token})
    tmp = settings.server_file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.chmod(tmp, 0o600)
    os.replace(tmp, settings.server_file)


def remove_server_file(settings: Settings) -> None:
    try:
        info = json.loads(settings.server_file.read_text())
        if info.get("pid") == os.getpid():
            settings.server_file.unlink()
    except (OSError, ValueError):
        pass


class RemoteServer:
    def __init__(self, url: str, api_key: str | None = None, timeout: float = 30.0,
                 operator_token: str | None = None) -> None:
        self.url = url.rstrip("/")
        # The operator on the server's machine may do anything (name any folder to ingest);
        # a key holder only what the key's scopes allow.
        self.operator = operator_token is not None
        self.api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if operator_token:
            headers[OPERATOR_HEADER] = operator_token
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs) -> dict:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise CitewiseError(f"the server at {self.url} did not answer: {e}",
                                hint=None if self.operator else
                                f"check {URL_VARIABLE}, and that the server runs") from e
        if resp.status_code >= 400:
            try:
                body = resp.json()
                err = CitewiseError(body.get("detail", resp.text), hint=body.get("hint"))
                # The problem's type names its code (urn:citewise:error:run_locked).
                kind = str(body.get("type") or "")
                if kind.startswith("urn:citewise:error:"):
                    err.code = kind.rsplit(":", 1)[1]
            except ValueError:
                err = CitewiseError(f"the server answered {resp.status_code}: {resp.text[:200]}")
            err.status_code = resp.status_code
            raise self._as_key_holder(err)
        return resp.json()

    def _as_key_holder(self, err: CitewiseError) -> CitewiseError:
        """A refusal of the key says which server and which variable, since the person reading
        it set CITEWISE_API_KEY rather than an Authorization header."""
        if self.operator or err.status_code not in (401, 403):
            return err
        if err.status_code == 401 and not self.api_key:
            err.message = (f"the server at {self.url} requires an API key, and {KEY_VARIABLE} "
                           "is not set")
            err.hint = (f"set {KEY_VARIABLE} to a key made on the server's machine with the "
                        "scopes the command needs, e.g. `citewise keys create cron --scopes "
                        "ingest`")
        else:  # a key that is wrong, revoked or expired, or lacks the scope: the server says
            err.message = f"the server at {self.url} refused {KEY_VARIABLE}: {err.message}"
        return err

    def ingest(self, payload: dict, on_update: Callable[[dict], None], poll: float = 1.0) -> dict:
        job = self.request("POST", "/v1/ingest/jobs", json=payload)
        while job["status"] in ("queued", "running"):
            on_update(job)
            time.sleep(poll)
            job = self.request("GET", f"/v1/ingest/jobs/{job['id']}")
        on_update(job)
        return job


def named_server(url: str) -> RemoteServer:
    """The server ``CITEWISE_URL`` names, called with the key in ``CITEWISE_API_KEY`` (its
    scopes and principal apply; no key is sent if it is unset)."""
    return RemoteServer(url, api_key=os.environ.get(KEY_VARIABLE) or None)


def find_server(settings: Settings, locked: IndexLockedError) -> RemoteServer:
    """The server that holds the index, or an error that says exactly what to do."""
    info = _read(settings.server_file)
    if info and info.get("url"):
        server = RemoteServer(info["url"], operator_token=info.get("operator_token"))
        try:
            server.request("GET", "/healthz")
            return server
        except CitewiseError:
            pass
        raise IndexLockedError(
            f"the embedded index in {settings.data_dir} is held by another process, and the "
            f"server recorded in {settings.server_file} ({info['url']}, pid {info.get('pid')}) "
            "does not answer",
            hint="wait for that process to finish, or stop it, then run this command again",
        )
    raise IndexLockedError(
        f"the embedded index in {settings.data_dir} is held by another citewise process "
        "(an ingest, or a server started without writing server.json)",
        hint=f"wait for it to finish, or stop it; details: {locked.message}",
    )


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
