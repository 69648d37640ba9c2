"""Data folders as citewise wrote them before the stores split, for the tests of their upgrade.

``fixtures/catalog_v11.sql`` is a catalog as the last single-catalog release wrote it (PRAGMA
user_version 11, its 16 tables, rows in each), made with that code itself before the split.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "catalog_v11.sql"

# The single catalog's migration 12, as it shipped (after the v11 release, before the split).
MIGRATION_12 = """
    ALTER TABLE documents ADD COLUMN injection_chunks TEXT NOT NULL DEFAULT '[]';
    UPDATE documents SET injection_chunks = json_extract(metadata, '$.injection_chunks'),
        metadata = json_remove(metadata, '$.injection_chunks')
        WHERE json_type(metadata, '$.injection_chunks') = 'array';
"""


def write_v11(data: Path, *extra_sql: str) -> Path:
    """``data/catalog.db`` as the v11 release left it (and ``extra_sql`` run on it after); its
    path."""
    data.mkdir(parents=True, exist_ok=True)
    path = data / "catalog.db"
    conn = sqlite3.connect(path)
    try:
        conn.executescript(FIXTURE.read_text())
        for sql in extra_sql:
            conn.executescript(sql)
        conn.commit()
    finally:
        conn.close()
    return path


def fixture_secret() -> str:
    """The secret of the API key ``ci-bot`` the fixture's catalog holds (written beside it)."""
    return next(line.split(": ", 1)[1] for line in FIXTURE.read_text().splitlines()
                if line.startswith("-- The API key ci-bot's secret: "))
