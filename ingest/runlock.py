"""One ingest run at a time per data folder, whoever starts it.

The server's jobs, its own schedule, an external cron's ``citewise ingest --all``, a repair and
a backup all take this lock, so two of them never overlap (with a Qdrant server, two processes
could otherwise write one index at once). It is an OS lock (``flock``) on
``<data dir>/ingest.lock``: the kernel releases it when its holder exits, however it exits, so
a run killed at 3 a.m. never leaves it stuck. The file also says who holds it, for the message
the next one prints.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from citewise.errors import CitewiseError, RunLockedError


class RunLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
        """Take the lock for ``what`` (e.g. "ingest --all (cron)"), or raise ``RunLockedError``
        naming the holder. Never waits: a cron run that finds another run going exits."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Private like everything in the data folder (``citewise.private_files``); an
            # account that may only read it still takes the lock (flock needs only an open
            # file; the holder's note is written when possible).
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except PermissionError:
                fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            raise CitewiseError(f"cannot open the ingest run lock {self.path}: {e}",
                                hint="the account running citewise must be able to read the "
                                     "data folder") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self.holder()
            who = (f"{holder.get('what')} (pid {holder.get('pid')} on {holder.get('host')}, "
                   f"since {holder.get('since')})") if holder else "another process"
            raise RunLockedError(
                f"another run holds the ingest lock of this data folder: {who}; "
                "this one did nothing",
                hint="it is released when that run ends; try again then (a cron can simply "
                     "run at its next time)") from None
        except OSError as e:
            os.close(fd)
            raise CitewiseError(f"cannot lock {self.path}: {e}") from e
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({
                "what": what, "pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.now(UTC).isoformat(timespec="seconds")}).encode())
        except OSError:  # read-only, or a full disk: the lock holds without the note
            pass

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            os.close(fd)  # closing the descriptor drops the lock

    def holder(self) -> dict[str, Any] | None:
        try:
            holder: dict[str, Any] | None = json.loads(self.path.read_text() or "null")
            return holder
        except (OSError, ValueError):
            return None

    @contextmanager
    def held(self, what: str) -> Iterator[RunLock]:
        self.acquire(what)
        try:
            yield self
        finally:
            self.release()
