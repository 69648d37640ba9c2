"""One ingest run at a time per installation, whoever starts it.

The server's jobs, its own schedule, an external cron's ``citewise ingest --all``, a repair and
a backup all take this lock, so two of them never overlap (with a Qdrant server, two processes
could otherwise write one index at once). ``RunLock`` is the contract; the composition root
chooses the implementation: on one machine ``FileRunLock``, an OS lock (``flock``) on
``<data dir>/ingest.lock``; with ``CITEWISE_DATABASE_URL``, ``PostgresRunLock``
(``pg_runlock.py``), an advisory lock of the shared database, which every replica and worker
sees. Both are released by whatever keeps them (the kernel, the database session) when their
holder dies, however it dies, so a run killed at 3 a.m. never leaves the lock stuck, and both
keep a note of who holds it, for the message the next one prints.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from citewise.errors import CitewiseError, RunLockedError


class RunLock(Protocol):
    def acquire(self, what: str) -> None:
        """Take the lock for ``what`` (e.g. "ingest --all (cron)"), or raise ``RunLockedError``
        naming the holder. Never waits: a cron run that finds another run going exits."""
        ...

    def release(self) -> None:
        """Give the lock back (nothing when not held)."""
        ...

    def check(self) -> None:
        """Raise ``RunLockLostError`` when this object took the lock and has lost it since;
        nothing otherwise (also when it holds nothing). The pipeline calls it before each
        document it writes."""
        ...

    def holder(self) -> dict[str, Any] | None:
        """Who holds it: ``what``, ``pid``, ``host`` and ``since``; None when nobody (or
        unknown)."""
        ...

    def held(self, what: str) -> AbstractContextManager[Any]:
        """``with lock.held("citewise backup"):`` acquire, and release however the block
        ends."""
        ...


def holder_text(holder: dict[str, Any] | None) -> str:
    """The holder's note as the refusal says it."""
    if not holder:
        return "another process"
    return (f"{holder.get('what')} (pid {holder.get('pid')} on {holder.get('host')}, "
            f"since {holder.get('since')})")


def holder_note(what: str) -> dict[str, Any]:
    """The note a new holder leaves: what it runs, and which process on which machine."""
    return {"what": what, "pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.now(UTC).isoformat(timespec="seconds")}


class FileRunLock:
    """``RunLock`` as ``flock`` on a file of the data folder: one machine's processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
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
            raise RunLockedError(
                "another run holds the ingest lock of this data folder: "
                f"{holder_text(self.holder())}; "
                "this one did nothing",
                hint="it is released when that run ends; try again then (a cron can simply "
                     "run at its next time)") from None
        except OSError as e:
            os.close(fd)
            raise CitewiseError(f"cannot lock {self.path}: {e}") from e
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(holder_note(what)).encode())
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

    def check(self) -> None:
        """An flock lasts as long as its descriptor, so this process's run never loses it."""

    def holder(self) -> dict[str, Any] | None:
        try:
            holder: dict[str, Any] | None = json.loads(self.path.read_text() or "null")
            return holder
        except (OSError, ValueError):
            return None

    @contextmanager
    def held(self, what: str) -> Iterator[FileRunLock]:
        self.acquire(what)
        try:
            yield self
        finally:
            self.release()
