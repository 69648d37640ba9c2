"""Staged catalogs (``index/staging.py``) as SQLite files: ``<folder>/<generation>/catalog.db``,
which the live SQLite catalog ATTACHes to take their rows at the switch."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from citewise.index.sqlite_catalog import SqliteDocumentCatalog
from citewise.index.sqlite_source_store import SqliteSourceStore
from citewise.index.staging import StagedCatalog
from citewise.sqlite import SqliteDatabase


class SqliteCatalogStaging:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)  # <data dir>/reindex

    def _path(self, generation: str) -> Path:
        return self.folder / generation / "catalog.db"

    def open(self, generation: str) -> StagedCatalog:
        database = SqliteDatabase(self._path(generation))
        # The sources first: the documents' rows name theirs.
        sources = SqliteSourceStore(database)
        return StagedCatalog(SqliteDocumentCatalog(database), sources)

    def documents(self, generation: str) -> int:
        path = self._path(generation)
        if not path.exists():
            return 0
        # Read-only and without migrating: a status report changes nothing.
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
        except sqlite3.Error:
            return 0
        finally:
            conn.close()

    def discard(self, keep: str | None = None) -> None:
        if not self.folder.is_dir():
            return
        for folder in self.folder.iterdir():
            if folder.name != keep:
                shutil.rmtree(folder, ignore_errors=True)
        if not any(self.folder.iterdir()):
            self.folder.rmdir()
