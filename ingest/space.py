"""Room on the data folder's disk: a run stops while the stores can still fail cleanly.

SQLite (the catalog, the embedding cache) and the blob folder fail a write on a full disk with
an error, which they raise as ``DiskFullError``. The embedded index cannot: qdrant-edge writes
through memory-mapped files, and a page the disk has no room for ends the process with SIGBUS,
before any error is raised or the run recorded (seen on ext4 and tmpfs, in the middle of an
upsert). So a run checks, before each batch it embeds, each document it writes and the
compaction at its end, that the disk holding the data folder keeps ``min_free_bytes`` free
(``CITEWISE_MIN_FREE_MB``), and stops with ``DiskFullError`` when it does not. A statvfs call
costs microseconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from citewise.errors import DiskFullError


class DiskSpace:
    def __init__(self, folder: Path, min_free_bytes: int) -> None:
        self.folder = Path(folder)
        self.min_free_bytes = min_free_bytes

    def check(self, what: str) -> None:
        """Raise ``DiskFullError`` (naming ``what`` was about to happen) below the reserve."""
        if self.min_free_bytes <= 0:
            return
        try:
            free = shutil.disk_usage(self.folder).free
        except OSError:  # not created yet: nothing of ours is on that disk
            return
        if free < self.min_free_bytes:
            raise DiskFullError(
                f"the data folder {self.folder} is full: {_size(free)} free, under the "
                f"{_size(self.min_free_bytes)} kept free for the index (CITEWISE_MIN_FREE_MB); "
                f"stopped before {what}",
                hint="free space on that disk (or move the data folder to a larger one), then "
                     "run `citewise ingest` again: what was written stays searchable, and the "
                     "next run finishes the rest")


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n // 1024} KB"
