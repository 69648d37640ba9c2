"""Room on the data folder's disk: a run stops while the stores can still fail cleanly.

SQLite (the catalog, the embedding cache) and the blob folder fail a write on a full disk with
an error, which they raise as ``DiskFullError``. The embedded index cannot: qdrant-edge writes
through memory-mapped files, and a page the disk has no room for ends the process with SIGBUS,
before any error is raised or the run recorded (seen on ext4 and tmpfs, in the middle of an
upsert). So a run checks, before each batch it embeds, each document it writes and the
compaction at its end, that the disk holding the data folder keeps ``min_free_bytes`` free
(``CITEWISE_MIN_FREE_MB``), and stops with ``DiskFullError`` when it does not. A statvfs call
costs microseconds. ``citewise verify --repair`` checks the same before each document whose
points it rebuilds, and ``citewise restore`` before it writes anything, that the backup's
files fit with the reserve to spare.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from citewise.errors import DiskFullError


class DiskSpace:
    def __init__(self, folder: Path, min_free_bytes: int) -> None:
        self.folder = Path(folder)
        self.min_free_bytes = min_free_bytes

    def check(self, what: str, *, rerun: str = "`citewise ingest`", needs: int = 0) -> None:
        """Raise ``DiskFullError`` (naming ``what`` was about to happen) when the disk would keep
        less than the reserve after writing ``needs`` more bytes. ``rerun``: the command that
        finishes the work once there is room (every writer here is safe to run again)."""
        if self.min_free_bytes <= 0 and needs <= 0:
            return
        try:
            free = shutil.disk_usage(_existing(self.folder)).free
        except OSError:  # no folder of ours, nor above it: nothing to measure
            return
        if free - needs < self.min_free_bytes:
            room = (f"is too full: {_size(free)} free, {_size(needs)} needed beside" if needs
                    else f"is full: {_size(free)} free, under")
            raise DiskFullError(
                f"the data folder {self.folder} {room} the {_size(self.min_free_bytes)} kept "
                f"free for the index (CITEWISE_MIN_FREE_MB); stopped before {what}",
                hint=f"free space on that disk (or move the data folder to a larger one), then "
                     f"run {rerun} again: " + ("nothing was written" if needs else
                                               "what was written stays, and the next run "
                                               "finishes the rest"))


def _existing(folder: Path) -> Path:
    """The folder, or its nearest existing parent: the disk a folder not made yet will be on."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate
    return folder


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{max(n, 0) // 1024} KB"
