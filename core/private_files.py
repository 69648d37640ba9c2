"""The data folder is for the account that runs citewise, and nobody else.

It holds restricted documents (the blobs, the catalog's chunk texts, the embedded index's
payloads and write-ahead log), API key hashes, the audit log and conversations. Anyone who can
read one of those files reads past every permission the service enforces, so every folder in
it is 0700 and every file 0600, whatever the umask of the shell or unit that started us.

Two layers, because one is not enough:

* the entry points that write data (the ``citewise`` command, so ``serve`` too) set a process
  umask of 0o077 (``restrict_umask``): files that libraries create themselves (SQLite's
  ``-wal`` and ``-shm``, the embedded index's segments) are private from their first byte;
* the stores we own create their files and folders private (``private_file``,
  ``private_folder``) and the embedded index closes its folder private
  (``make_private``: the files its engine made), so a process embedding citewise under a
  loose umask does too.

``too_open`` lists what is not (a copy made with ``cp``, a chmod by hand): the server warns
at start and ``citewise verify`` reports it; ``citewise verify --repair`` calls
``make_private``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
FOLDER_MODE = 0o700
FILE_MODE = 0o600


def restrict_umask() -> int:
    """Take group and other bits off everything this process creates from now on (bits the
    umask already removes stay removed); the previous umask."""
    previous = os.umask(PRIVATE_UMASK)
    os.umask(previous | PRIVATE_UMASK)
    return previous


def private_folder(path: Path) -> Path:
    """``path`` made 0700 if absent (parents it needs too: a data folder under /srv keeps
    /srv as it is). One that exists keeps its mode, like ``private_file``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` created empty and 0600 if absent, before a library opens it: SQLite gives a
    database's ``-wal`` and ``-shm`` files the database file's mode. A file that exists keeps
    its mode: one made loose is reported (``too_open``), not changed behind the operator's
    back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass
    return path


def too_open(root: Path) -> list[Path]:
    """``root`` and everything under it that its group or other accounts may use at all;
    links are not followed (what they point to is not ours to judge)."""
    root = Path(root)
    if not root.exists():
        return []
    found = [root] if _loose(root) else []
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder, name)
            if _loose(path):
                found.append(path)
    return found


def make_private(root: Path) -> list[Path]:
    """Every folder under ``root`` (``root`` too) 0700 and every file 0600; what was changed."""
    changed = too_open(root)
    for path in changed:
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode):
            _chmod(path, FOLDER_MODE)
        elif stat.S_ISREG(mode):
            _chmod(path, FILE_MODE)
    return changed


def describe(paths: list[Path], root: Path, limit: int = 8) -> str:
    """``paths`` for a message: relative to ``root``, with their modes, the first ``limit``."""
    shown = [f"{_relative(p, root)} ({stat.S_IMODE(p.lstat().st_mode):o})"
             for p in paths[:limit] if p.exists() or p.is_symlink()]
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(shown) + more


def _loose(path: Path) -> bool:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:  # removed while we walked (a compaction, a swap)
        return False
    if stat.S_ISLNK(mode):
        return False
    return bool(stat.S_IMODE(mode) & 0o077)


def _chmod(path: Path, mode: int) -> None:
    # Never called on a link (``too_open`` leaves them out), so following is harmless.
    try:
        os.chmod(path, mode)
    except FileNotFoundError:  # removed meanwhile
        pass
    except PermissionError:  # another account's file (a read-only mount): ``too_open`` says so
        pass


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix() or "."
    except ValueError:
        return str(path)
