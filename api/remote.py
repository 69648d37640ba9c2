"""The CLI talking to a ``citewise serve`` over HTTP: on this machine, or at CITEWISE_URL.

Two ways to get there, one client:

* The embedded index admits one process. When the server holds it, the CLI finds the server
  through ``<data dir>/server.json`` (written by ``citewise serve``) and sends its work there
  with the operator token the file holds (``find_server``).
* ``CITEWISE_URL`` names a server elsewhere (a cron on another machine): the CLI sends every
  command that has a remote form there, with the API key in ``CITEWISE_API_KEY``, and never
  opens a data folder of its own (``named_server``). The same variables as ``citewise mcp``,
  the Slack bot and the retrievers.

Either way the calls go through ``citewise_client`` (the typed client every face of citewise
that calls a server shares); ``RemoteServer`` words its errors for the terminal.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from citewise.api.auth import OPERATOR_HEADER
from citewise.api.settings import Settings
from citewise.errors import CitewiseError, IndexLockedError
from citewise_client import (
    KEY_VARIABLE,
    URL_VARIABLE,
    ActingFor,
    CitewiseClient,
    CitewiseClientError,
    Filters,
    Forbidden,
    IngestJob,
    IngestRequest,
    Refused,
    Unauthorized,
    Unreachable,
)
from citewise_client.models import Mode


def write_server_file(settings: Settings, host: str, port: int, operator_token: str) -> None:
    """Where the server is, and the token that proves a caller is its operator.

    The file is readable by its owner only (the account that owns the data folder): reading it
    is the proof. It is written to a new file and moved into place, never left readable.
    """
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    settings.data.server_file.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"url": f"http://{connect_host}:{port}", "pid": os.getpid(),
                       "operator_token": operator_token})
    tmp = settings.data.server_file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.chmod(tmp, 0o600)
    os.replace(tmp, settings.data.server_file)


def remove_server_file(settings: Settings) -> None:
    try:
        info = json.loads(settings.data.server_file.read_text())
        if info.get("pid") == os.getpid():
            settings.data.server_file.unlink()
    except (OSError, ValueError):
        pass


class RemoteServer:
    """A server's side of the commands with a remote form, through the typed client; what the
    client raises becomes the CLI's ``CitewiseError``, worded for the person at the terminal.
    Replies are plain JSON, as the commands print them (the same as in-process)."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 30.0,
                 operator_token: str | None = None) -> None:
        self.url = url.rstrip("/")
        # The operator on the server's machine may do anything (name any folder to ingest);
        # a key holder only what the key's scopes allow.
        self.operator = operator_token is not None
        self.api_key = api_key
        self.client = CitewiseClient(
            self.url, api_key, timeout=timeout,
            headers={OPERATOR_HEADER: operator_token} if operator_token else None)

    def search(self, query: str, *, top_k: int, mode: Mode, filters: Filters,
               acting_for: ActingFor) -> list[dict[str, Any]]:
        with self._said():
            found = self.client.search(query, top_k=top_k, mode=mode, filters=filters,
                                       acting_for=acting_for)
        return [hit.model_dump() for hit in found.results]

    def answer(self, question: str, *, acting_for: ActingFor) -> dict[str, Any]:
        with self._said():
            return self.client.answer(question, acting_for=acting_for).model_dump()

    def sources(self) -> list[dict[str, Any]]:
        with self._said():
            return [source.model_dump() for source in self.client.sources()]

    def ingest(self, request: IngestRequest,
               on_update: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        def update(job: IngestJob) -> None:
            on_update(job.model_dump())

        with self._said():
            return self.client.ingest(request, on_update=update).model_dump()

    def verify(self, *, repair: bool, force: bool) -> dict[str, Any]:
        with self._said():
            return self.client.verify(repair=repair, force=force).model_dump()

    def usage(self, *, since: str, group_by: str) -> dict[str, Any]:
        with self._said():
            return self.client.usage(since=since, group_by=group_by).model_dump()

    def answers(self) -> bool:
        """Whether the server answers at all (``/healthz``)."""
        try:
            self.client.health()
            return True
        except CitewiseClientError:
            return False

    @contextmanager
    def _said(self) -> Iterator[None]:
        try:
            yield
        except CitewiseClientError as e:
            raise self._as_cli_error(e) from e

    def _as_cli_error(self, e: CitewiseClientError) -> CitewiseError:
        if isinstance(e, Unreachable):
            return CitewiseError(f"the server at {self.url} did not answer: {e.reason}",
                                 hint=None if self.operator else
                                 f"check {URL_VARIABLE}, and that the server runs")
        if not isinstance(e, Refused):  # a reply that is not citewise's (a proxy's page)
            return CitewiseError(str(e))
        said = e.detail if e.code else f"the server answered {e.status}: {e.detail or ''}"
        err = CitewiseError(said or str(e), hint=e.hint)
        # The problem's code (run_locked: another run holds the lock, a skip for a cron).
        if e.code:
            err.code = e.code
        if e.status is not None:
            err.status_code = e.status
        if self.operator:
            return err
        # A refusal of the key says which server and which variable, since the person reading
        # it set CITEWISE_API_KEY rather than an Authorization header.
        if isinstance(e, Unauthorized) and not self.api_key:
            err.message = (f"the server at {self.url} requires an API key, and {KEY_VARIABLE} "
                           "is not set")
            err.hint = (f"set {KEY_VARIABLE} to a key made on the server's machine with the "
                        "scopes the command needs, e.g. `citewise keys create cron --scopes "
                        "ingest`")
        elif isinstance(e, Unauthorized | Forbidden):
            # A key that is wrong, revoked or expired, or lacks the scope: the server says.
            err.message = f"the server at {self.url} refused {KEY_VARIABLE}: {err.message}"
        return err


def named_server(url: str) -> RemoteServer:
    """The server ``CITEWISE_URL`` names, called with the key in ``CITEWISE_API_KEY`` (its
    scopes and principal apply; no key is sent if it is unset)."""
    return RemoteServer(url, api_key=os.environ.get(KEY_VARIABLE) or None)


def find_server(settings: Settings, locked: IndexLockedError) -> RemoteServer:
    """The server that holds the index, or an error that says exactly what to do."""
    info = _read(settings.data.server_file)
    if info and info.get("url"):
        server = RemoteServer(info["url"], operator_token=info.get("operator_token"))
        if server.answers():
            return server
        raise IndexLockedError(
            f"the embedded index in {settings.data_dir} is held by another process, and the "
            f"server recorded in {settings.data.server_file} ({info['url']}, pid "
            f"{info.get('pid')}) does not answer",
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
