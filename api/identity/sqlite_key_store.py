"""API keys (``key_store.py``) in the embedded SQLite database: the ``api_keys`` table."""

from __future__ import annotations

import json
import sqlite3

from citewise.api.identity.key_store import ApiKey
from citewise.errors import ConflictError, NotFoundError
from citewise.sqlite import SqliteStore
from citewise.sqlite_schema import Migration, StoreSchema

# ``shipped_as``: the catalog's PRAGMA user_version that first held the change, before the
# stores split (``citewise.sqlite_schema``).
SCHEMA = StoreSchema("identity", (
    # Only a hash of the secret is kept.
    Migration("""
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        scopes TEXT NOT NULL,
        principal TEXT,
        assert_identity INTEGER NOT NULL DEFAULT 0,
        limits TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL,
        created_by TEXT,
        expires_at TEXT,
        revoked_at TEXT,
        last_used_at TEXT
    );
    """, shipped_as=5),
    # A key the operator made one of a person's doors shares that person's conversations
    # (api/conversations.py: otherwise a key's conversations are its own).
    Migration("""
    ALTER TABLE api_keys ADD COLUMN shares_conversations INTEGER NOT NULL DEFAULT 0;
    """, shipped_as=11),
))


class SqliteKeyStore(SqliteStore):
    """``KeyStore`` over ``api_keys``, in ``database``."""

    schema = SCHEMA

    def add(self, key: ApiKey, secret_hash: str) -> None:
        with self.database.transaction():
            taken = self._conn().execute("SELECT revoked_at FROM api_keys WHERE name = ?",
                                         [key.name]).fetchone()
            if taken is not None:
                raise ConflictError(
                    f"a key named {key.name!r} already exists"
                    + (" (revoked)" if taken["revoked_at"] else ""),
                    hint="choose another name; names stay taken after revocation so that usage "
                         "and audit records keep meaning one key")
            self._conn().execute(
                "INSERT INTO api_keys (id, name, secret_hash, scopes, principal, "
                "assert_identity, limits, created_at, created_by, expires_at, "
                "shares_conversations) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [key.id, key.name, secret_hash, ",".join(sorted(key.scopes)), key.principal,
                 int(key.assert_identity), json.dumps(key.limits), key.created_at,
                 key.created_by, key.expires_at, int(key.shares_conversations)])

    def revoke(self, name: str, at: str) -> ApiKey:
        with self.database.transaction():
            key = self.get(name)
            if key is None:
                raise NotFoundError(f"no key named {name!r}", hint="citewise keys list")
            if key.revoked_at is None:
                key.revoked_at = at
                self._conn().execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?",
                                     [at, key.id])
        return key

    def get(self, name: str) -> ApiKey | None:
        row = self._conn().execute("SELECT * FROM api_keys WHERE name = ?", [name]).fetchone()
        return _record(row) if row is not None else None

    def by_id(self, key_id: str) -> tuple[ApiKey, str] | None:
        row = self._conn().execute("SELECT * FROM api_keys WHERE id = ?", [key_id]).fetchone()
        return (_record(row), row["secret_hash"]) if row is not None else None

    def list(self) -> list[ApiKey]:
        return [_record(r) for r in self._conn().execute(
            "SELECT * FROM api_keys ORDER BY created_at, name")]

    def active_count(self, at: str) -> int:
        return self._conn().execute(
            "SELECT count(*) FROM api_keys WHERE revoked_at IS NULL AND "
            "(expires_at IS NULL OR expires_at > ?)", [at]).fetchone()[0]

    def touch(self, used: dict[str, str]) -> None:
        if used:
            self._conn().executemany("UPDATE api_keys SET last_used_at = ? WHERE name = ?",
                                     [(at, name) for name, at in used.items()])

    def import_key(self, key: ApiKey, secret_hash: str) -> None:
        with self.database.transaction():
            taken = self._conn().execute("SELECT id FROM api_keys WHERE name = ?",
                                         [key.name]).fetchone()
            if taken is not None and taken["id"] != key.id:
                raise ConflictError(f"another key is named {key.name!r} here",
                                    hint="names stay taken for good; revoke or keep one of them")
            self._conn().execute(
                "INSERT INTO api_keys (id, name, secret_hash, scopes, principal, "
                "assert_identity, limits, created_at, created_by, expires_at, revoked_at, "
                "last_used_at, shares_conversations) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?) ON CONFLICT(id) DO UPDATE SET "
                "revoked_at = COALESCE(api_keys.revoked_at, excluded.revoked_at), "
                "last_used_at = NULLIF(MAX(COALESCE(api_keys.last_used_at, ''), "
                "COALESCE(excluded.last_used_at, '')), '')",
                [key.id, key.name, secret_hash, ",".join(sorted(key.scopes)), key.principal,
                 int(key.assert_identity), json.dumps(key.limits), key.created_at,
                 key.created_by, key.expires_at, key.revoked_at, key.last_used_at,
                 int(key.shares_conversations)])


def _record(row: sqlite3.Row) -> ApiKey:
    return ApiKey(
        id=row["id"], name=row["name"], scopes=frozenset(row["scopes"].split(",")),
        principal=row["principal"], assert_identity=bool(row["assert_identity"]),
        limits=json.loads(row["limits"] or "{}"), created_at=row["created_at"],
        created_by=row["created_by"], expires_at=row["expires_at"],
        revoked_at=row["revoked_at"], last_used_at=row["last_used_at"],
        shares_conversations=bool(row["shares_conversations"]))
