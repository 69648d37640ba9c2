"""Staged catalogs (``index/staging.py``) in PostgreSQL: a schema per generation,
``citewise_reindex_<generation>``, in the live catalog's database.

A generation's catalog is built there by the same stores as the live one (its own ``sources``,
``documents``, ``chunks``..., and ``schema_versions``), through a pool whose connections put
that schema first on their search path. The live catalog then copies its rows in one
transaction (``PostgresDocumentCatalog.switch_generation``), and the schema is dropped.
"""

from __future__ import annotations

import re

from psycopg import sql

from citewise.errors import ConfigError
from citewise.index.postgres_catalog import PostgresDocumentCatalog
from citewise.index.postgres_source_store import PostgresSourceStore
from citewise.index.staging import StagedCatalog
from citewise.postgres import PostgresDatabase

PREFIX = "citewise_reindex_"
_GENERATION = re.compile(r"^[a-z0-9_]{1,40}$")


class PostgresCatalogStaging:
    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database  # the live catalog's

    def namespace(self, generation: str) -> str:
        if not _GENERATION.match(generation):
            raise ConfigError(f"{generation!r} is not a generation name a reindex makes",
                              hint="generations are named g2, g3...")
        return PREFIX + generation

    def open(self, generation: str) -> StagedCatalog:
        namespace = self.namespace(generation)
        self.database.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
            sql.Identifier(namespace)))
        staged = PostgresDatabase(self.database.url, pool_size=self.database.pool.max_size,
                                  connect_timeout=self.database.connect_timeout,
                                  namespace=namespace)
        try:
            # The sources first: the documents' rows name theirs.
            sources = PostgresSourceStore(staged)
            return StagedCatalog(PostgresDocumentCatalog(staged), sources, release=staged.close)
        except BaseException:
            staged.close()
            raise

    def documents(self, generation: str) -> int:
        # Read without making the schema or migrating: a status report changes nothing.
        table = f"{self.namespace(generation)}.documents"
        found = self.database.row("SELECT to_regclass(%s) IS NOT NULL AS found", [table])
        if not found or not found["found"]:
            return 0
        row = self.database.row(sql.SQL("SELECT COUNT(*) AS n FROM {}.documents").format(
            sql.Identifier(self.namespace(generation))))
        return int(row["n"]) if row else 0

    def discard(self, keep: str | None = None) -> None:
        kept = self.namespace(keep) if keep else None
        for row in self.database.rows(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", [PREFIX]):
            if row["nspname"] != kept:
                self.database.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(row["nspname"])))
