"""A store's tables, as a list of versioned migrations: the one migration mechanism of both
databases (``citewise.sqlite_schema`` applies it to the embedded SQLite file,
``citewise.postgres`` to PostgreSQL). Each store keeps one list per database, since the two
dialects differ (JSON, upserts, arrays), numbered on its own: version n of a store's tables is
"its first n migrations have run", recorded as a row of ``schema_versions (store, version)``.

Never edit a migration that has shipped; append a new one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    sql: str
    # The PRAGMA user_version that first held this change, for changes made before the stores
    # split (None for every later one): a file written then already has it.
    shipped_as: int | None = None


@dataclass(frozen=True)
class StoreSchema:
    """A store's tables: ``store`` names its row in ``schema_versions``; migration i moves
    them from version i to i + 1."""

    store: str
    migrations: tuple[Migration, ...]

    @property
    def latest(self) -> int:
        return len(self.migrations)

    def held_by_legacy(self, user_version: int) -> int:
        """How many of the migrations a pre-split file at ``user_version`` already holds."""
        return sum(1 for m in self.migrations
                   if m.shipped_as is not None and m.shipped_as <= user_version)
