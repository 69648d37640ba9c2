"""API keys (``key_store.py``) in PostgreSQL (``CITEWISE_DATABASE_URL``): the ``api_keys`` table,
shared by every replica, so a key created or revoked through any of them (or the CLI) is
honoured by all at their next request: nothing is cached.

Scopes are ``text[]``, limits ``jsonb``; names and times are ``COLLATE "C"`` (byte order, as
SQLite compares them).
"""

from __future__ import annotations

from psycopg.types.json import Jsonb

from citewise.api.identity.key_store import ApiKey
from citewise.errors import ConflictError, NotFoundError
from citewise.postgres import PostgresStore, Row
from citewise.store_schema import Migration, StoreSchema

SCHEMA = StoreSchema("identity", (
    # Only a hash of the secret is kept.
    Migration("""
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT COLLATE "C" NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        scopes TEXT[] NOT NULL,
        principal TEXT,
        assert_identity BOOLEAN NOT NULL DEFAULT FALSE,
        shares_conversations BOOLEAN NOT NULL DEFAULT FALSE,
        limits JSONB NOT NULL DEFAULT '{}',
        created_at TEXT COLLATE "C" NOT NULL,
        created_by TEXT,
        expires_at TEXT COLLATE "C",
        revoked_at TEXT COLLATE "C",
        last_used_at TEXT COLLATE "C"
    );
    """),
))


class PostgresKeyStore(PostgresStore):
    """``KeyStore`` over ``api_keys``, in ``database``."""

    schema = SCHEMA

    def add(self, key: ApiKey, secret_hash: str) -> None:
        # One statement: two replicas creating the same name at once cannot both succeed.
        added = self.database.row(
            "INSERT INTO api_keys (id, name, secret_hash, scopes, principal, assert_identity, "
            "limits, created_at, created_by, expires_at, shares_conversations) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (name) DO NOTHING RETURNING id",
            [key.id, key.name, secret_hash, sorted(key.scopes), key.principal,
             key.assert_identity, Jsonb(key.limits), key.created_at, key.created_by,
             key.expires_at, key.shares_conversations])
        if added is None:
            taken = self.get(key.name)
            raise ConflictError(
                f"a key named {key.name!r} already exists"
                + (" (revoked)" if taken is not None and taken.revoked_at else ""),
                hint="choose another name; names stay taken after revocation so that usage "
                     "and audit records keep meaning one key")

    def revoke(self, name: str, at: str) -> ApiKey:
        # A key revoked before keeps its first time.
        row = self.database.row(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, %s) WHERE name = %s "
            "RETURNING *", [at, name])
        if row is None:
            raise NotFoundError(f"no key named {name!r}", hint="citewise keys list")
        return _record(row)

    def get(self, name: str) -> ApiKey | None:
        row = self.database.row("SELECT * FROM api_keys WHERE name = %s", [name])
        return _record(row) if row is not None else None

    def by_id(self, key_id: str) -> tuple[ApiKey, str] | None:
        row = self.database.row("SELECT * FROM api_keys WHERE id = %s", [key_id])
        return (_record(row), row["secret_hash"]) if row is not None else None

    def list(self) -> list[ApiKey]:
        return [_record(r) for r in self.database.rows(
            "SELECT * FROM api_keys ORDER BY created_at, name")]

    def active_count(self, at: str) -> int:
        row = self.database.row(
            "SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL AND "
            "(expires_at IS NULL OR expires_at > %s)", [at])
        return int(row["n"]) if row else 0

    def touch(self, used: dict[str, str]) -> None:
        if not used:
            return
        # A statement per key, in name order: two replicas stamping the same keys never wait
        # on each other in opposite orders (a deadlock PostgreSQL would end by failing one).
        with self.database.connection() as conn:
            conn.cursor().executemany(
                "UPDATE api_keys SET last_used_at = %s WHERE name = %s",
                [(used[name], name) for name in sorted(used)])
    def import_key(self, key: ApiKey, secret_hash: str) -> None:
        with self.database.transaction() as conn:
            taken = conn.execute("SELECT id FROM api_keys WHERE name = %s",
                                 [key.name]).fetchone()
            if taken is not None and taken["id"] != key.id:
                raise ConflictError(f"another key is named {key.name!r} here",
                                    hint="names stay taken for good; revoke or keep one of them")
            conn.execute(
                "INSERT INTO api_keys (id, name, secret_hash, scopes, principal, "
                "assert_identity, limits, created_at, created_by, expires_at, revoked_at, "
                "last_used_at, shares_conversations) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                "revoked_at = COALESCE(api_keys.revoked_at, excluded.revoked_at), "
                "last_used_at = GREATEST(api_keys.last_used_at, excluded.last_used_at)",
                [key.id, key.name, secret_hash, sorted(key.scopes), key.principal,
                 key.assert_identity, Jsonb(key.limits), key.created_at, key.created_by,
                 key.expires_at, key.revoked_at, key.last_used_at, key.shares_conversations])


def _record(row: Row) -> ApiKey:
    return ApiKey(
        id=row["id"], name=row["name"], scopes=frozenset(row["scopes"]),
        principal=row["principal"], assert_identity=row["assert_identity"],
        limits=dict(row["limits"]), created_at=row["created_at"],
        created_by=row["created_by"], expires_at=row["expires_at"],
        revoked_at=row["revoked_at"], last_used_at=row["last_used_at"],
        shares_conversations=row["shares_conversations"])
