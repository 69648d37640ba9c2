"""Each store's own schema, versioned on its own, in the one SQLite file they share.

A store declares its tables as a list of migrations (``StoreSchema``); the version of each
store's tables is a row of ``schema_versions (store, version)``, and opening a store runs the
migrations it has not seen yet, in one transaction. So a store's tables change without asking
any other store, and a second backend of a store (PostgreSQL) keeps the same list of versions.

``PRAGMA user_version`` says which layout the file has:

* 1 to 12: written before the stores split, when one list of migrations (``index/catalog.py``'s
  ``MIGRATIONS``) numbered the whole file. Such a file is upgraded in place on open, with no
  data moved: the old number is kept as the ``legacy_catalog`` row, and each migration of a
  store that shipped in that list says which number it had (``Migration.shipped_as``), so a
  store knows which of its migrations the file already holds and runs only the rest;
* ``LAYOUT`` (13): per-store versions. A citewise from before the split refuses such a file as
  newer than itself, rather than migrate it wrongly;
* above ``LAYOUT``: a newer citewise's layout, refused.

Never edit a migration that has shipped; append a new one.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from citewise.errors import ConfigError
from citewise.store_schema import Migration, StoreSchema

if TYPE_CHECKING:
    from citewise.sqlite import SqliteDatabase

LAYOUT = 13
LEGACY = "legacy_catalog"  # the row that keeps a pre-split file's PRAGMA user_version
__all__ = ["Migration", "StoreSchema", "check_layout", "file_versions", "migrate",
           "store_versions"]

UPGRADE_HINT = "upgrade citewise, or point CITEWISE_DATA_DIR at another folder"


def check_layout(db: SqliteDatabase) -> None:
    """Refuse a file of a newer citewise; give a fresh or pre-split one the per-store layout."""
    conn = db.connection()
    version = _user_version(conn)
    if version == LAYOUT:
        return
    _refuse_newer(db, version)
    with db.transaction():
        version = _user_version(conn)  # another process may have done it meanwhile
        if version == LAYOUT:
            return
        conn.execute("CREATE TABLE IF NOT EXISTS schema_versions ("
                     "store TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        if version > 0:
            conn.execute("INSERT INTO schema_versions (store, version) VALUES (?, ?) "
                         "ON CONFLICT(store) DO NOTHING", [LEGACY, version])
        conn.execute(f"PRAGMA user_version = {LAYOUT}")


def _refuse_newer(db: SqliteDatabase, version: int) -> None:
    if version > LAYOUT:
        raise ConfigError(
            f"catalog {db.path} has schema version {version}, newer than this citewise "
            f"({LAYOUT})", hint=UPGRADE_HINT)


def migrate(db: SqliteDatabase, schema: StoreSchema) -> None:
    """Run the migrations of ``schema`` that its tables in ``db`` have not had yet."""
    conn = db.connection()
    if _recorded(conn, schema) == schema.latest:
        return
    with db.transaction():
        current = _checked_version(db, schema)  # another process may have migrated meanwhile
        for migration in schema.migrations[current:]:
            for statement in statements(migration.sql):
                conn.execute(statement)
        conn.execute("INSERT INTO schema_versions (store, version) VALUES (?, ?) "
                     "ON CONFLICT(store) DO UPDATE SET version = excluded.version",
                     [schema.store, schema.latest])


def _checked_version(db: SqliteDatabase, schema: StoreSchema) -> int:
    current = _store_version(db.connection(), schema)
    if current > schema.latest:
        raise ConfigError(
            f"the {schema.store} tables of catalog {db.path} have schema version {current}, "
            f"newer than this citewise ({schema.latest})", hint=UPGRADE_HINT)
    return current


def store_versions(db: SqliteDatabase) -> dict[str, int]:
    """Each store's version in ``db`` (a store not opened since the file was made is absent)."""
    return file_versions(db.connection())


def file_versions(conn: sqlite3.Connection) -> dict[str, int]:
    """Each store's version in the file ``conn`` reads, opened or not by ``SqliteDatabase``
    (a copy read as it is); a file no store has opened since the split says its old number as
    ``legacy_catalog``."""
    if _user_version(conn) < LAYOUT:
        version = _user_version(conn)
        return {LEGACY: version} if version else {}
    rows = conn.execute(
        "SELECT store, version FROM schema_versions WHERE store != ? ORDER BY store", [LEGACY])
    return {store: version for store, version in rows}


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _recorded(conn: sqlite3.Connection, schema: StoreSchema) -> int | None:
    row = conn.execute("SELECT version FROM schema_versions WHERE store = ?",
                       [schema.store]).fetchone()
    return int(row[0]) if row is not None else None


def _store_version(conn: sqlite3.Connection, schema: StoreSchema) -> int:
    recorded = _recorded(conn, schema)
    if recorded is not None:
        return recorded
    legacy = conn.execute("SELECT version FROM schema_versions WHERE store = ?",
                          [LEGACY]).fetchone()
    return schema.held_by_legacy(int(legacy[0])) if legacy is not None else 0


def statements(script: str) -> list[str]:
    """The script's statements; a trigger's body (``BEGIN ...; END``) stays whole."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending.strip().rstrip(";"))
            pending = ""
    return out
