"""What one ingest asks for: a declared source, every declared source, or a folder by path.

A folder given by path becomes a ``folder`` source. Whoever asks, the path must be a real
folder (symbolic links resolved) that is not the data folder, not inside it or around it, and
not a kernel pseudo-filesystem (``/proc``, ``/sys``, ``/dev``, ``/run``). Over HTTP, it must
also lie under a folder the operator allows (``CITEWISE_INGEST_ALLOWED_PATHS``, none by default),
unless the caller is the operator on the server's own machine (``citewise ingest PATH``, which
proves it with the operator token the server writes to its data folder).

Its documents' readers: those the request names (the operator's CLI sends ``--readers``), else
the settings' ``default_readers``; with neither, the request is refused, since a folder handed
in by path must never become public by default.
"""

from __future__ import annotations

import re
from pathlib import Path

from citewise.errors import (
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
)
from citewise.index.source_store import SourceStore
from citewise.settings import SourceConfig, find_source
from citewise.types import normalise_readers

MAX_PATH_CHARS = 4096
SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"), Path("/run"))


def source_name_for(path: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", path.name.lower()).strip("-._")
    return name[:63] or "folder"


def ingest_folder(path: str, *, data_dir: Path, allowed: list[Path] | None) -> Path:
    """The folder ``path`` names, checked. ``allowed`` None: any folder (the operator);
    otherwise only folders under one of ``allowed``."""
    if "\0" in path:
        raise InvalidRequestError("the path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise InvalidRequestError(f"the path is longer than {MAX_PATH_CHARS} characters")
    raw = Path(path).expanduser() if allowed is None else Path(path)
    if allowed is not None and not raw.is_absolute():
        raise InvalidRequestError(f"{path!r} is not an absolute path",
                                  hint="give the folder's full path on the server")
    try:
        folder = raw.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidRequestError(f"{raw} does not exist", hint="pass a folder of documents") \
            from None
    if not folder.is_dir():
        raise InvalidRequestError(f"{folder} is not a folder", hint="pass a folder of documents")
    for system in SYSTEM_ROOTS:
        if folder == system or folder.is_relative_to(system):
            raise ForbiddenError(f"{folder} is a system folder; it cannot be ingested")
    data = data_dir.resolve()
    if folder.is_relative_to(data) or data.is_relative_to(folder):
        raise ForbiddenError(
            f"{folder} holds or is inside citewise's data folder ({data}); it cannot be ingested",
            hint="ingest the folder your documents are in",
        )
    if allowed is not None:
        if not allowed:
            raise ForbiddenError(
                "ingesting a folder by path is turned off for HTTP callers",
                hint="declare the folder as a source in the config file, or allow its parent "
                     "with CITEWISE_INGEST_ALLOWED_PATHS (run `citewise ingest PATH` on the "
                     "server itself to ingest any folder as the operator)",
            )
        if not any(folder.is_relative_to(root) for root in allowed):
            raise ForbiddenError(
                f"{folder} is not under a folder allowed for ingest over HTTP",
                hint=f"allowed: {', '.join(str(a) for a in allowed)} "
                     "(CITEWISE_INGEST_ALLOWED_PATHS)",
            )
    return folder


def resolve_sources(
    declared: list[SourceConfig],
    registered: SourceStore | None,
    *,
    data_dir: Path,
    default_readers: list[str] | None,
    path: str | None = None,
    name: str | None = None,
    source: str | None = None,
    all_sources: bool = False,
    readers: list[str] | None = None,
    allowed: list[Path] | None = None,
) -> list[SourceConfig]:
    """The sources one ingest runs, of those ``declared`` in the config file or a folder by
    path (``data_dir`` and ``allowed`` as in ``ingest_folder``; its readers ``readers``, else
    ``default_readers``)."""
    chosen = sum(bool(x) for x in (path, source, all_sources))
    if chosen != 1:
        raise InvalidRequestError(
            "say what to ingest: a folder PATH, --source NAME or --all (exactly one)"
        )
    if all_sources:
        if not declared:
            # Not a server fault: the request asks for sources this configuration lacks.
            raise NotFoundError(
                "no sources are declared",
                hint="add [[sources]] to citewise.toml (or set CITEWISE_CONFIG_FILE)",
            )
        return list(declared)
    if source:
        return [find_source(declared, source)]
    folder = ingest_folder(path or "", data_dir=data_dir, allowed=allowed)
    source_name = name or source_name_for(folder)
    same_name = next((s for s in declared if s.name == source_name), None)
    if same_name is not None:
        if Path(same_name.options().get("path", "")).resolve() != folder:
            raise ConflictError(
                f"source {source_name!r} is declared in the config file with another path",
                hint="pick another name with --name",
            )
        return [same_name]
    if registered is not None:
        known = registered.get_source(source_name)
        if known is not None:
            old = known.config.get("path")
            if old and Path(old).resolve() != folder:
                # Re-using the name would treat every document of the old folder as deleted.
                raise ConflictError(
                    f"source {source_name!r} already holds documents from {old}",
                    hint="pick another name with --name, or ingest that folder again",
                )
    try:
        chosen_readers = normalise_readers(readers) if readers else default_readers
    except ValueError as e:
        raise InvalidRequestError(f"readers: {e}") from None
    if not chosen_readers:
        raise InvalidRequestError(
            f"say who may read the documents of {folder}",
            hint="pass readers (the CLI: --readers group:eng, or --readers public for everyone),"
                 " or set CITEWISE_DEFAULT_READERS on the server",
        )
    try:
        return [SourceConfig(name=source_name, type="folder", path=str(folder),
                             readers=chosen_readers)]
    except ValueError as e:
        raise InvalidRequestError(str(e), hint="pass --name with a valid source name") from e
