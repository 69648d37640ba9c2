"""`citewise --version`: this citewise's version, and the schema live in the database its
settings name (the data folder's SQLite file, or CITEWISE_DATABASE_URL's PostgreSQL).

Read only, and never created: a version check must not make a data folder, nor migrate a
database that replicas of another version still serve.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from citewise import __version__
from citewise.api.settings import Settings
from citewise.errors import CitewiseError
from citewise.sqlite_schema import file_versions


def version_text(config: str | None, data_dir: str | None) -> str:
    lines = [f"citewise, version {__version__}"]
    try:
        overrides = {"data_dir": Path(data_dir)} if data_dir else {}
        settings = Settings.load(config, **overrides)
    except CitewiseError as e:
        return "\n".join([*lines, f"schema: not read ({e.message})"])
    if settings.database_url:
        # Imported here: an embedded installation never loads the driver.
        import psycopg

        from citewise.postgres import display_url

        where = f"postgresql {display_url(settings.database_url)}"
        try:
            versions = _postgres_versions(settings.database_url, settings.database_timeout)
        except psycopg.Error as e:
            return "\n".join([*lines, f"database: {where}",
                              f"schema: the database cannot be reached: {str(e).strip()}"])
    else:
        path = settings.data.catalog_path
        where = f"sqlite {path}"
        if not path.exists():
            return "\n".join([*lines, f"database: {where}",
                              "schema: none yet (no catalog: the first command that stores "
                              "anything creates it)"])
        try:
            versions = _sqlite_versions(path)
        except sqlite3.Error as e:
            return "\n".join([*lines, f"database: {where}", f"schema: not read ({e})"])
    shown = ", ".join(f"{store} {version}" for store, version in sorted(versions.items()))
    return "\n".join([*lines, f"database: {where}", f"schema: {shown or 'no store yet'}"])


def _sqlite_versions(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return file_versions(conn)
    finally:
        conn.close()


def _postgres_versions(url: str, timeout: float) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, connect_timeout=max(1, int(timeout)),
                         application_name="citewise --version") as conn:
        exists = conn.execute("SELECT to_regclass('schema_versions') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return {}
        rows = conn.execute("SELECT store, version FROM schema_versions").fetchall()
    return {str(store): int(version) for store, version in rows}
