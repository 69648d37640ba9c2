"""Typed errors shared by every layer.

Each error says what was wrong and what to do about it. The HTTP edge turns them into one JSON
problem shape (see ``citewise.api.problems``); the CLI prints ``message`` and ``hint``.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from pathlib import Path
from typing import Any


class CitewiseError(Exception):
    """Base class: a message for the user and, where there is one, a hint on what to do."""

    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def problem(self) -> dict[str, Any]:
        """This error as an RFC 9457 problem body (HTTP responses, SSE error events)."""
        return problem_body(self.status_code, self.code, self.message, self.hint)


def problem_body(
    status: int, code: str, detail: str, hint: str | None = None, errors: list[Any] | None = None
) -> dict[str, Any]:
    """The one problem-details shape every door uses."""
    body: dict[str, Any] = {
        "type": f"urn:citewise:error:{code}",
        "title": code.replace("_", " ").capitalize(),
        "status": status,
        "detail": detail,
        "hint": hint,
    }
    if errors:
        body["errors"] = errors
    return body


class ConfigError(CitewiseError):
    """A setting or the config file is invalid."""

    status_code = 500
    code = "config_error"


class ConfigRefusedError(CitewiseError):
    """A config file that a running server was asked to reload is invalid: it keeps the one
    it has, and the caller (the operator) is told what is wrong with the file."""

    status_code = 422
    code = "invalid_config"


class BadRequestError(CitewiseError):
    """The request itself is malformed in a way no schema describes (a repeated header)."""

    status_code = 400
    code = "bad_request"


class NotFoundError(CitewiseError):
    status_code = 404
    code = "not_found"


class InvalidRequestError(CitewiseError):
    status_code = 422
    code = "invalid_request"


class AuthError(CitewiseError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(CitewiseError):
    status_code = 403
    code = "forbidden"


class GuardrailBlocked(CitewiseError):
    """A guardrail policy refused the request or its answer; no content goes back."""

    status_code = 403
    code = "guardrail_blocked"

    def __init__(self, policy: str, detail: str,
                 decisions: list[dict[str, Any]] | None = None) -> None:
        super().__init__(f"the '{policy}' policy does not allow this: {detail}",
                         hint="this service does not answer on that subject here; ask the team "
                              "that owns it")
        self.policy = policy
        self.decisions = decisions or []


class ConflictError(CitewiseError):
    """The operation cannot run now (an ingest of that source is already running, say)."""

    status_code = 409
    code = "conflict"


class CatalogLostError(ConflictError):
    """A repair would delete most of what the index and the blob store hold because the
    catalog lists almost none of it: the catalog was lost or emptied, not the index."""

    code = "catalog_lost"


class RunLockedError(ConflictError):
    """Another ingest run (or a repair, or a backup) of this data folder is under way."""

    code = "run_locked"


class IndexLockedError(CitewiseError):
    """Another process holds the embedded index (only one process may open it)."""

    status_code = 503
    code = "index_locked"


class SourceError(CitewiseError):
    """A source could not be read (missing folder, unreachable server, bad credentials)."""

    status_code = 502
    code = "source_error"


class DocumentError(CitewiseError):
    """One document could not be parsed or processed; the run records it and goes on."""

    status_code = 422
    code = "document_error"


class StoredCopyMissingError(CitewiseError):
    """The catalog lists a document whose stored bytes are gone from the blob store."""

    status_code = 500
    code = "stored_copy_missing"


class BackendError(CitewiseError):
    """A storage backend (Qdrant, S3, SQLite) failed."""

    status_code = 503
    code = "backend_unavailable"


class CatalogDamagedError(BackendError):
    """The catalog file is not a readable SQLite database (truncated, overwritten, a page
    corrupted): nothing the service does can go on, and nothing should try to repair it in
    place."""

    code = "catalog_damaged"

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"the catalog {path} is damaged and cannot be read ({detail})",
            hint=f"stop citewise, move {path.name} aside (with its -wal and -shm files) and "
                 "either restore the data folder from a backup (`citewise --data-dir NEW "
                 "restore BACKUP`), or rebuild the catalog: `citewise verify --rebuild-catalog` "
                 "makes a new one from the index and the blobs (then `citewise ingest --all` "
                 "reads the sources again), or `citewise ingest --all --force` from the "
                 "sources alone")


def catalog_damage(exc: BaseException, path: Path) -> CatalogDamagedError | None:
    """``exc`` as ``CatalogDamagedError`` when SQLite says the file itself is broken
    (SQLITE_CORRUPT, SQLITE_NOTADB); else ``None``."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or \
            any(s in str(exc) for s in ("malformed", "not a database")):
        return CatalogDamagedError(path, str(exc))
    return None


class StoreUnavailableError(BackendError):
    """A store takes no writes at all (its disk is full, its endpoint does not answer): an
    ingest run stops at once, rather than fail every remaining document one by one."""

    code = "store_unavailable"


class RunLockLostError(StoreUnavailableError):
    """The run lock this process took is gone while its run goes on: a lock that lives in a
    database session (PostgreSQL's advisory lock) ends with that session, when the database
    restarts or the connection drops. The run stops rather than write beside the next one."""

    code = "run_lock_lost"


class DiskFullError(StoreUnavailableError):
    """The disk that holds the data folder is full (or a file reached its size limit)."""

    status_code = 507
    code = "disk_full"


# errno values that mean "no room": the disk is full, the quota spent, the file size limit hit.
_NO_ROOM = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is spent",
            errno.EFBIG: "a file reached the size limit"}
_SQLITE_FULL, _SQLITE_IOERR = 13, 10
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def write_failure(exc: BaseException, what: str, path: Path) -> StoreUnavailableError | None:
    """``exc``, raised while writing ``what`` (a store at ``path``, in the data folder), as the
    error that stops an ingest run, when it says the disk can take no more; else ``None``.

    Three shapes say it: an ``OSError`` (a blob's file), SQLite's result code (the catalog, the
    embedding cache: SQLITE_FULL, or an I/O error, which is what SQLite makes of a write past
    the file size limit), and the embedded engine's message, which ends with the OS error.
    """
    number = exc.errno if isinstance(exc, OSError) else None
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == _SQLITE_FULL:
            number = errno.ENOSPC
        elif code == _SQLITE_IOERR:
            return StoreUnavailableError(
                f"{what} ({path}) could not be written or read: {exc}",
                hint=f"check the disk that holds {path.parent}: full, read-only, past a file "
                     "size limit (ulimit -f) or failing; then run `citewise ingest` again")
    elif number is None:
        found = re.search(r"os error (\d+)", str(exc))
        number = int(found.group(1)) if found else None
    if number not in _NO_ROOM:
        return None
    fix = "raise the file size limit (ulimit -f, systemd's LimitFSIZE=)" \
        if number == errno.EFBIG else "free space on that disk (or move the data folder)"
    return DiskFullError(
        f"{_NO_ROOM[number]} ({os.strerror(number)}) while writing {what} ({path})",
        hint=f"{fix}, then run `citewise ingest` again: what was written stays searchable, "
             "and the next run finishes the rest")
