"""The semantic cache's entries (``cache_store.py``) in PostgreSQL (``CITEWISE_DATABASE_URL``),
shared by every replica: an answer cached through one is found through all, and dropped by
whichever finds it stale (``SemanticCache`` checks each against the shared catalog first).

One row per entry: the question's embedding as ``bytea`` (little-endian float32, as it is
compared in ``SemanticCache``), the answer and what it cites as ``jsonb``. Least recently used
goes first: ``used`` is a sequence number drawn at every add and touch, so the order holds
across replicas without trusting their clocks; after an add, the rows past ``max_entries``
with the lowest numbers are deleted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from citewise.postgres import PostgresDatabase, PostgresStore, Row
from citewise.retrieval.answering.cache_store import CacheEntry
from citewise.retrieval.answering.model import Answer
from citewise.store_schema import Migration, StoreSchema

SCHEMA = StoreSchema("answer_cache", (
    Migration("""
    CREATE SEQUENCE answer_cache_use;
    CREATE TABLE answer_cache (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope TEXT NOT NULL,
        question TEXT NOT NULL,
        vector BYTEA NOT NULL,
        answer JSONB NOT NULL,
        cited JSONB NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        used BIGINT NOT NULL DEFAULT nextval('answer_cache_use')
    );
    CREATE INDEX answer_cache_scope ON answer_cache (scope, created);
    CREATE INDEX answer_cache_used ON answer_cache (used);
    """),
))

_VECTOR = np.dtype("<f4")


class PostgresAnswerCache(PostgresStore):
    """``AnswerCacheStore`` over ``answer_cache``, bounded to ``max_entries``."""

    schema = SCHEMA

    def __init__(self, database: PostgresDatabase, max_entries: int = 5000) -> None:
        super().__init__(database)
        self.max_entries = max_entries

    def candidates(self, scope: str, not_before: float) -> list[tuple[str, CacheEntry]]:
        self.database.execute("DELETE FROM answer_cache WHERE scope = %s AND created < %s",
                              [scope, not_before])
        return [(str(r["id"]), _entry(r)) for r in self.database.rows(
            "SELECT * FROM answer_cache WHERE scope = %s AND created >= %s ORDER BY id",
            [scope, not_before])]

    def add(self, entry: CacheEntry) -> int:
        cited = {doc: list(seen) for doc, seen in entry.cited.items()}
        with self.database.transaction() as conn:
            conn.execute(
                "INSERT INTO answer_cache (scope, question, vector, answer, cited, created) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                [entry.scope, entry.question, np.asarray(entry.vector, dtype=_VECTOR).tobytes(),
                 Jsonb(entry.answer.model_dump(mode="json")), Jsonb(cited), entry.created])
            # Only the rows past the bound, so that replicas adding at once evict no more than
            # they must (a row another one deleted first is not counted twice).
            evicted = conn.execute(
                "DELETE FROM answer_cache WHERE id IN (SELECT id FROM answer_cache "
                "ORDER BY used LIMIT GREATEST(0, (SELECT count(*) FROM answer_cache) - %s))",
                [self.max_entries]).rowcount
        return max(0, evicted)

    def touch(self, key: str) -> bool:
        return self.database.execute(
            "UPDATE answer_cache SET used = nextval('answer_cache_use') WHERE id = %s",
            [_id(key)]) > 0

    def drop(self, key: str) -> None:
        self.database.execute("DELETE FROM answer_cache WHERE id = %s", [_id(key)])

    def count(self) -> int:
        row = self.database.row("SELECT count(*) AS n FROM answer_cache")
        return int(row["n"]) if row else 0

    def clear(self) -> None:
        self.database.execute("DELETE FROM answer_cache")


def _id(key: str) -> int:
    """A key as the row's id (a key that is none of ours names no row)."""
    return int(key) if key.isdigit() else -1


def _entry(row: Row) -> CacheEntry:
    cited: dict[str, Any] = row["cited"]
    return CacheEntry(
        scope=row["scope"], question=row["question"],
        vector=np.frombuffer(row["vector"], dtype=_VECTOR).astype(np.float32),
        answer=Answer.model_validate(row["answer"]),
        cited={doc: (str(version), str(readers)) for doc, (version, readers) in cited.items()},
        created=float(row["created"]))
