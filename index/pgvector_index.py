"""The vector index in PostgreSQL with pgvector (``CITEWISE_VECTOR_STORE=pgvector``).

For organisations that run one PostgreSQL for everything (``CITEWISE_DATABASE_URL``), and so
that a whole cluster of replicas can be tested on one machine. It keeps the contract of the two
Qdrant backends (``vector_index.py``; tests/index/test_vector_index_contract.py runs on all
three), with each part of a point kept the way PostgreSQL does it well:

* **Points**: one row of ``chunk_vectors`` each, keyed by the deterministic point id (a UUID).
  The payload keys that filters and deletes read are real columns (``document_id``,
  ``version``, ``source``, ``service``; ``readers``, ``path_prefixes`` and ``tags`` as text
  arrays with GIN indexes), the whole ``ChunkPayload`` is a jsonb column, and the dense vector
  a ``vector(dim)`` column with an HNSW index (cosine distance, ``vector_cosine_ops``).
* **BM25**: pgvector 0.6 has no ``sparsevec`` (0.7 added it), so the term weights our encoder
  computes (saturated term frequencies, ``sparse.py``) are rows of a postings table
  ``chunk_postings (term, point_id, weight)``, and each term's document frequency a row of
  ``chunk_terms (term, df)``, kept exact in the transaction of every write, like ``N``, the
  number of points with at least one term. A query multiplies each of its weights by
  ``ln(1 + (N - df + 0.5) / (df + 0.5))``: what Qdrant's IDF modifier multiplies in at query
  time (``fancy_idf`` in Qdrant's segment crate, whose N counts the indexed sparse vectors, an
  empty one not among them: measured against qdrant-edge), so a BM25 score here equals the
  Qdrant backends' and hybrid search fuses the same lists (``retrieval/fusion.py``).
* **Filters** (``IndexFilter.conditions``) are the WHERE clause of every query, dense and BM25
  alike: a caller never receives a point it may not read, whatever happens after.

**Approximate search under a filter.** pgvector 0.6 walks the HNSW graph for
``hnsw.ef_search`` candidates and only then applies the WHERE clause: a filter that admits a
share s of the points leaves about ``ef_search * s`` rows, possibly fewer than the limit. Each
dense query therefore runs in a transaction of its own that sets ``hnsw.ef_search`` (``SET
LOCAL``) to ``max(ef_search, EF_PER_RESULT * limit)`` (at most pgvector's 1000); when the graph
still yields fewer rows than the limit, the query is asked again exactly (index scans off: the
planner reads the rows the filter admits, through the GIN indexes when it is selective, and
sorts them by distance), so a caller who may read few points still gets every one of them,
and that exact pass is cheap precisely because few rows pass the filter. A small index (under
``EXACT_BELOW`` points) is searched exactly, as Qdrant does below its full-scan threshold.
The larger ``ef_search``, the higher the recall and the slower the query:
bench/results/pgvector.md measures both against exact search at ~100k points, with and without
a readers filter.

Every generation of the index (``generations.py``) has its own three tables: the first one's
are named as above, generation ``g2``'s ``chunk_vectors_g2`` and so on, each with the dimension
of the model it was built with. ``vector_generations`` (this store's migrations, ``SCHEMA``)
lists them with their dimension, their table layout and their number of points.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from citewise.errors import BackendError, ConfigError, StoreUnavailableError
from citewise.index.generations import is_generation
from citewise.index.payload import ChunkPayload
from citewise.index.vector_index import (
    ChunkPoint,
    IndexFilter,
    ScoredId,
    SparseVector,
    VectorHit,
)
from citewise.postgres import PostgresDatabase, Row
from citewise.store_schema import Migration, StoreSchema

log = logging.getLogger("citewise.index")

# The registry of generations, created with their tables in one transaction: each one's vector
# size, table layout, number of points and of points with BM25 terms (the N of the IDF).
SCHEMA = StoreSchema("vector_index", (
    Migration("""
        CREATE TABLE vector_generations (
            generation TEXT PRIMARY KEY,
            dim INTEGER NOT NULL,
            layout INTEGER NOT NULL,
            points BIGINT NOT NULL DEFAULT 0,
            bm25_points BIGINT NOT NULL DEFAULT 0,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )"""),
))
# The shape of a generation's tables (``_create``). Their names and dimension vary, which a
# migration's fixed SQL cannot say, so they are versioned here: a change to them is a new
# layout, with the upgrade of older ones in ``_ensure_tables``.
LAYOUT = 1
# The advisory lock (a fixed 64-bit key) under which generations are created and dropped, so
# that replicas opening the same generation at once create it once.
DDL_LOCK = 0x63697465_00000010

POINTS, POSTINGS, TERMS = "chunk_vectors", "chunk_postings", "chunk_terms"
# Payload keys kept as columns too: every key a filter or a delete reads
# (``IndexFilter.conditions``, ``payload.INDEXED_FIELDS``).
TEXT_COLUMNS = ("document_id", "version", "source", "service")
ARRAY_COLUMNS = ("readers", "path_prefixes", "tags")
COLUMNS = TEXT_COLUMNS + ARRAY_COLUMNS

# The HNSW graph. On bench_pgvector's 113k points (bench/results/pgvector.md), pgvector's
# defaults (m 16, ef_construction 64) reached a mean recall@50 of 0.93 at ef_search 200, with
# single questions at 0.04; m 32, ef_construction 200 reached 0.97 at ef_search 200 and 0.994
# at 400, for a graph three times slower to build (~10 ms a point written with the graph in
# place, still below the time to embed it).
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
EF_SEARCH = 200  # the least ef_search of a dense query
EF_PER_RESULT = 8  # ... and this many candidates per result asked for (400 at hybrid's 50)
EF_MAX = 1000  # pgvector's largest ef_search
# Points: a smaller index is searched exactly. Exact search costs ~0.8 us a point (~8 ms at
# 10k, measured on 2 cores), never misses, and ranks exactly as the embedded engine does.
EXACT_BELOW = 10_000

_WRITE_BATCH = 512
_SCAN_PAGE = 1000


def ensure_vector_extension(database: PostgresDatabase) -> str:
    """Create pgvector's extension in the database if it is missing; its version. Refuses one
    without HNSW (before 0.5.0)."""
    row = database.row("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    if row is None:
        try:
            database.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.InsufficientPrivilege as e:
            raise ConfigError(
                f"the database {database.display} lacks the pgvector extension, and "
                f"citewise's role may not create it ({e.diag.message_primary})",
                hint="have a superuser run `CREATE EXTENSION vector;` in that database once "
                     "(managed services allow it to their admin role)") from e
        except psycopg.Error as e:
            raise ConfigError(
                f"the database {database.display} could not create the pgvector extension: "
                f"{e.diag.message_primary or e}",
                hint="install pgvector (0.5 or later) on the PostgreSQL server, or set "
                     "CITEWISE_VECTOR_STORE=qdrant") from e
        row = database.row("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    version = str(row["extversion"]) if row else "?"
    numbers = tuple(int(n) for n in version.split(".")[:2] if n.isdigit())
    if numbers < (0, 5):
        raise ConfigError(
            f"the database {database.display} has pgvector {version}, which has no HNSW index",
            hint="install pgvector 0.5 or later on the server, then `ALTER EXTENSION vector "
                 "UPDATE;`")
    return version


@dataclass(frozen=True)
class _Tables:
    """The three tables of one generation."""

    generation: str

    def __post_init__(self) -> None:
        if not is_generation(self.generation):  # names go into identifiers
            raise ValueError(f"not an index generation: {self.generation!r}")

    def name(self, base: str) -> str:
        return f"{base}_{self.generation}" if self.generation else base

    @property
    def points(self) -> sql.Identifier:
        return sql.Identifier(self.name(POINTS))

    @property
    def postings(self) -> sql.Identifier:
        return sql.Identifier(self.name(POSTINGS))

    @property
    def terms(self) -> sql.Identifier:
        return sql.Identifier(self.name(TERMS))

    def index(self, what: str) -> sql.Identifier:
        return sql.Identifier(f"{self.name(POINTS)}_{what}")

    def create(self, dim: int) -> list[sql.Composed]:
        """The statements that create the tables (layout ``LAYOUT``)."""
        p = self.points
        out = [sql.SQL("""
            CREATE TABLE {points} (
                id UUID PRIMARY KEY,
                document_id TEXT NOT NULL,
                version TEXT NOT NULL,
                source TEXT NOT NULL,
                service TEXT,
                readers TEXT[] NOT NULL,
                path_prefixes TEXT[] NOT NULL,
                tags TEXT[] NOT NULL,
                payload JSONB NOT NULL,
                dense vector({dim}) NOT NULL
            )""").format(points=p, dim=sql.Literal(dim)),
            # The vector in the row itself whenever it fits (MAIN: moved out only as a last
            # resort): a 384-dimension vector is 1.5 KiB, and beside a chunk's payload the row
            # passes the 2 KiB at which PostgreSQL would otherwise move it to the TOAST table,
            # from which every exact scan would fetch it again (~10 times slower, measured).
            # The payload goes first: it is only read for the hits.
            sql.SQL("ALTER TABLE {} ALTER COLUMN dense SET STORAGE MAIN").format(p),
            sql.SQL("CREATE INDEX {} ON {} (document_id, version)").format(
                self.index("document"), p),
            sql.SQL("CREATE INDEX {} ON {} (source)").format(self.index("source"), p),
            sql.SQL("CREATE INDEX {} ON {} (service)").format(self.index("service"), p)]
        out += [sql.SQL("CREATE INDEX {} ON {} USING gin ({})").format(
            self.index(column), p, sql.Identifier(column)) for column in ARRAY_COLUMNS]
        out += [
            sql.SQL("CREATE INDEX {} ON {} USING hnsw (dense vector_cosine_ops) "
                    "WITH (m = {}, ef_construction = {})").format(
                self.index("dense"), p, sql.Literal(HNSW_M), sql.Literal(HNSW_EF_CONSTRUCTION)),
            # A query reads a term's postings with their weights from the primary key alone;
            # the second index finds a point's postings when it is replaced or deleted. No
            # foreign key: postings are written and deleted with their point, in one
            # transaction, and checking one per posting would double the cost of writing them.
            sql.SQL("""
                CREATE TABLE {postings} (
                    term BIGINT NOT NULL,
                    point_id UUID NOT NULL,
                    weight REAL NOT NULL,
                    PRIMARY KEY (term, point_id) INCLUDE (weight)
                )""").format(postings=self.postings),
            sql.SQL("CREATE INDEX {} ON {} (point_id)").format(
                sql.Identifier(f"{self.name(POSTINGS)}_point"), self.postings),
            sql.SQL("CREATE TABLE {} (term BIGINT PRIMARY KEY, df INTEGER NOT NULL)").format(
                self.terms),
        ]
        return out


class PgvectorIndex:
    """``VectorIndex`` over one generation's tables in a PostgreSQL database with pgvector.

    Thread-safe: each call takes a connection from the database's pool. ``exact`` searches
    every dense query exactly (no HNSW), as does an index of fewer than ``exact_below``
    points; a dense query's ``hnsw.ef_search`` is ``ef_search``, or ``ef_per_result`` times
    its limit when that is more (see the module's docstring).
    """

    def __init__(self, database: PostgresDatabase, dim: int, *, generation: str = "",
                 owns_database: bool = False, ef_search: int = EF_SEARCH,
                 ef_per_result: int = EF_PER_RESULT, exact: bool = False,
                 exact_below: int = EXACT_BELOW) -> None:
        self._db = database
        self._dim = dim
        self.generation = generation
        self._tables = _Tables(generation)
        self._owns_database = owns_database  # else the store (or the caller) closes the pool
        self.ef_search = ef_search
        self.ef_per_result = ef_per_result
        self.exact = exact
        self.exact_below = exact_below
        # Dense queries the graph left short, asked again exactly (the benchmark reports it).
        self.exact_fallbacks = 0
        self._closed = False
        try:
            with self._sql("open the vector tables"):
                ensure_vector_extension(database)
                database.migrate(SCHEMA)
                self._ensure_tables()
        except BaseException:
            self.close()
            raise

    @property
    def where(self) -> str:
        return f"the pgvector table {self._tables.name(POINTS)} in the database " \
               f"{self._db.display}"

    # -- lifecycle ---------------------------------------------------------------------------

    def _ensure_tables(self) -> None:
        """Create this generation's tables, or check the ones there (their dimension, layout)."""
        name = self._tables.name(POINTS)
        with self._db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [DDL_LOCK])
            row = conn.execute("SELECT dim, layout FROM vector_generations "
                               "WHERE generation = %s", [self.generation]).fetchone()
            dim = _column_dim(conn, name)
            if row is not None and row["layout"] > LAYOUT:
                raise ConfigError(
                    f"{self.where} has layout {row['layout']}, newer than this citewise "
                    f"({LAYOUT})", hint="upgrade citewise, or point CITEWISE_DATABASE_URL at "
                                        "another database")
            created = dim is None
            if created:
                for statement in self._tables.create(self._dim):
                    conn.execute(statement)
                dim = self._dim
            if dim != self._dim:
                raise ConfigError(
                    f"{self.where} stores {dim}-dimension vectors but the embedding model "
                    f"produces {self._dim}",
                    hint="use the embedding model the index was built with, or rebuild the "
                         "index with the new one (`citewise reindex` writes a new generation "
                         "into tables of its own)")
            if row is None or created:
                # New tables (a registry row whose tables were dropped by hand starts again),
                # or tables whose registry row was lost: their points counted, not assumed.
                conn.execute("INSERT INTO vector_generations (generation, dim, layout) "
                             "VALUES (%s, %s, %s) ON CONFLICT (generation) DO UPDATE SET "
                             "dim = excluded.dim, layout = excluded.layout",
                             [self.generation, dim, LAYOUT])
                self._recount(conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_database:
            self._db.close()

    @contextmanager
    def _sql(self, action: str) -> Iterator[None]:
        """Failures said as the other backends say them: a database that cannot be reached
        takes no writes at all (``StoreUnavailableError``: an ingest run stops at once, as
        with a Qdrant server that does not answer); anything else is a ``BackendError``."""
        if self._closed:
            raise BackendError(f"{self.where} is closed (asked to {action})")
        try:
            yield
        except StoreUnavailableError:
            raise
        except BackendError as e:
            if type(e) is not BackendError:
                raise
            # ``PostgresDatabase``'s own: the database cannot be reached.
            raise StoreUnavailableError(e.message, hint=e.hint) from e
        except psycopg.errors.UndefinedTable as e:
            raise BackendError(
                f"{self.where} is gone (asked to {action}): {e.diag.message_primary}",
                hint="its generation was dropped (a `citewise reindex` switched to a new one: "
                     "ask again), or the tables were dropped by hand (run `citewise verify "
                     "--repair` to rebuild them from the catalog)") from e
        except psycopg.Error as e:
            raise BackendError(f"{self.where} failed to {action}: "
                               f"{e.diag.message_primary or e}") from e

    def flush(self) -> None:
        """Nothing to do: every write is a committed transaction, durable when it returns."""

    def optimize(self) -> None:
        """Refresh the planner's statistics (the choice between the HNSW index and the GIN
        indexes depends on them) and reclaim the rows that updates and deletes left. The
        BM25 statistics need nothing: they are exact after every write."""
        t = self._tables
        with self._sql("optimize"):
            with self._db.transaction() as conn:
                conn.execute(sql.SQL("DELETE FROM {} WHERE df <= 0").format(t.terms))
                # The counts again from the rows: two writers upserting one new point without
                # terms at once would both have counted it.
                self._recount(conn)
            with self._db.connection() as conn:  # VACUUM runs outside a transaction
                for table in (t.points, t.postings, t.terms):
                    conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(table))

    def _recount(self, conn: psycopg.Connection[Row]) -> None:
        """Count the points, and those with BM25 terms, under the registry row's lock (taken
        first: a writer that has counted its points and not committed is waited for, one that
        has not counted yet counts after this)."""
        t = self._tables
        conn.execute("SELECT 1 FROM vector_generations WHERE generation = %s FOR UPDATE",
                     [self.generation])
        conn.execute(sql.SQL("""
            UPDATE vector_generations SET
                points = (SELECT count(*) FROM {points}),
                bm25_points = (SELECT count(*) FROM {points} v WHERE EXISTS
                               (SELECT 1 FROM {postings} p WHERE p.point_id = v.id))
            WHERE generation = %s""").format(points=t.points, postings=t.postings),
            [self.generation])

    # -- writes ------------------------------------------------------------------------------

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        # The last of one id wins, as in the engines (one statement may not touch a row twice).
        unique = list({p.id: p for p in points}.values())
        if not unique:
            return
        with self._sql("upsert points"), self._db.transaction() as conn:
            for start in range(0, len(unique), _WRITE_BATCH):
                self._upsert(conn, unique[start:start + _WRITE_BATCH])

    def _upsert(self, conn: psycopg.Connection[Row], batch: Sequence[ChunkPoint]) -> None:
        t = self._tables
        ids = [p.id for p in batch]
        # The points that exist already, locked: N grows by the others.
        existing = conn.execute(sql.SQL("SELECT id FROM {} WHERE id = ANY(%s::uuid[]) "
                                        "FOR UPDATE").format(t.points), [ids]).fetchall()
        df, had_terms = self._drop_postings(conn, ids)
        records = [_record(p) for p in batch]
        conn.execute(sql.SQL("""
            INSERT INTO {points} (id, document_id, version, source, service, readers,
                                  path_prefixes, tags, payload, dense)
            SELECT r.id, r.document_id, r.version, r.source, r.service, r.readers,
                   r.path_prefixes, r.tags, r.payload, r.dense::vector
            FROM jsonb_to_recordset(%s::jsonb) AS r(
                id UUID, document_id TEXT, version TEXT, source TEXT, service TEXT,
                readers TEXT[], path_prefixes TEXT[], tags TEXT[], payload JSONB, dense TEXT)
            ON CONFLICT (id) DO UPDATE SET
                document_id = excluded.document_id, version = excluded.version,
                source = excluded.source, service = excluded.service,
                readers = excluded.readers, path_prefixes = excluded.path_prefixes,
                tags = excluded.tags, payload = excluded.payload, dense = excluded.dense
            """).format(points=t.points), [json.dumps(records)])
        terms: list[int] = []
        owners: list[str] = []
        weights: list[float] = []
        with_terms = 0
        for p in batch:
            # One weight per term, the last, as the engines keep it.
            vector = dict(zip(p.sparse.indices, p.sparse.values, strict=True))
            with_terms += bool(vector)
            for term, weight in vector.items():
                terms.append(term)
                owners.append(p.id)
                weights.append(weight)
                df[term] += 1
        if terms:
            conn.execute(sql.SQL(
                "INSERT INTO {} (term, point_id, weight) "
                "SELECT * FROM unnest(%s::bigint[], %s::uuid[], %s::real[])").format(t.postings),
                [terms, owners, weights])
        self._count(conn, df, len(batch) - len(existing), with_terms - had_terms)

    def _drop_postings(self, conn: psycopg.Connection[Row],
                       ids: Sequence[Any]) -> tuple[Counter[int], int]:
        """Delete the postings of points ``ids``: the change to each term's df, and how many
        of the points had terms."""
        gone = conn.execute(sql.SQL("DELETE FROM {} WHERE point_id = ANY(%s::uuid[]) "
                                    "RETURNING term, point_id").format(self._tables.postings),
                            [list(ids)]).fetchall()
        df: Counter[int] = Counter()
        for row in gone:
            df[row["term"]] -= 1
        return df, len({row["point_id"] for row in gone})

    def _count(self, conn: psycopg.Connection[Row], df: Counter[int], points: int,
               bm25_points: int) -> None:
        """Apply changes to the document frequencies and to the counts of points. Terms in
        ascending order: two writers lock the rows of the terms they share in the same order,
        never in a cycle."""
        changed = sorted((term, n) for term, n in df.items() if n)
        if changed:
            conn.execute(sql.SQL(
                "INSERT INTO {terms} AS t (term, df) "
                "SELECT term, n FROM unnest(%s::bigint[], %s::integer[]) AS u(term, n) "
                "ORDER BY term "
                "ON CONFLICT (term) DO UPDATE SET df = t.df + excluded.df").format(
                terms=self._tables.terms),
                [[term for term, _ in changed], [n for _, n in changed]])
        if points or bm25_points:
            conn.execute("UPDATE vector_generations SET points = points + %s, "
                         "bm25_points = bm25_points + %s WHERE generation = %s",
                         [points, bm25_points, self.generation])

    def _delete(self, action: str, where: sql.Composable, params: Sequence[Any]) -> None:
        """Delete the points ``where`` selects, their postings, and their share of the BM25
        statistics, in one transaction."""
        t = self._tables
        with self._sql(action), self._db.transaction() as conn:
            gone = conn.execute(sql.SQL("DELETE FROM {} WHERE {} RETURNING id").format(
                t.points, where), params).fetchall()
            if gone:
                ids = [row["id"] for row in gone]
                df, had_terms = self._drop_postings(conn, ids)
                self._count(conn, df, -len(ids), -had_terms)

    def delete_document(self, document_id: str, *, keep_version: str | None = None) -> None:
        if keep_version is None:
            self._delete("delete points", sql.SQL("document_id = %s"), [document_id])
        else:
            self._delete("delete points", sql.SQL("document_id = %s AND version <> %s"),
                         [document_id, keep_version])

    def delete_version(self, document_id: str, version: str) -> None:
        self._delete("delete points", sql.SQL("document_id = %s AND version = %s"),
                     [document_id, version])

    def delete_points(self, ids: Sequence[str]) -> None:
        # An id that is no UUID names no point (the database would refuse the whole list).
        valid = [c for i in ids if (c := _canonical(str(i))) is not None]
        for start in range(0, len(valid), _WRITE_BATCH * 10):
            self._delete("delete points", sql.SQL("id = ANY(%s::uuid[])"),
                         [valid[start:start + _WRITE_BATCH * 10]])

    def set_payload(self, document_id: str, payload: dict[str, Any]) -> None:
        """The keys given, in the jsonb payload and in their columns, in one statement."""
        sets: list[sql.Composable] = [sql.SQL("payload = payload || %s::jsonb")]
        params: list[Any] = [Jsonb(payload)]
        for key, value in payload.items():
            if key in COLUMNS:
                sets.append(sql.SQL("{} = %s").format(sql.Identifier(key)))
                params.append(list(value or []) if key in ARRAY_COLUMNS else value)
        with self._sql("set payload"):
            with self._db.connection() as conn:
                conn.execute(sql.SQL("UPDATE {} SET {} WHERE document_id = %s").format(
                    self._tables.points, sql.SQL(", ").join(sets)), [*params, document_id])

    # -- reads -------------------------------------------------------------------------------

    def search(
        self, query: list[float] | SparseVector, *, filter: IndexFilter, limit: int
    ) -> list[VectorHit]:
        return [_hit(r) for r in self._query(query, filter, limit, with_payload=True)]

    def rank(
        self, query: list[float] | SparseVector, *, filter: IndexFilter, limit: int
    ) -> list[ScoredId]:
        return [ScoredId(str(r["id"]), float(r["score"]))
                for r in self._query(query, filter, limit, with_payload=False)]

    def payloads(self, ids: Sequence[str]) -> dict[str, ChunkPayload]:
        # Asked as the database writes UUIDs, answered under the ids the caller gave.
        given = {c: str(i) for i in ids if (c := _canonical(str(i))) is not None}
        if not given:
            return {}
        with self._sql("read payloads"), self._db.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT id, payload FROM {} WHERE id = ANY(%s::uuid[])")
                                .format(self._tables.points), [sorted(given)]).fetchall()
        return {given[str(r["id"])]: ChunkPayload.from_payload(r["payload"]) for r in rows}

    def _query(self, query: list[float] | SparseVector, flt: IndexFilter, limit: int, *,
               with_payload: bool) -> list[Row]:
        if limit <= 0:
            return []
        payload = sql.SQL("payload" if with_payload else "NULL AS payload")
        if isinstance(query, SparseVector):
            if not query.indices:  # a query without terms matches nothing
                return []
            return self._bm25(query, flt, limit, payload)
        return self._nearest(query, flt, limit, payload)

    def _nearest(self, query: list[float], flt: IndexFilter, limit: int,
                 payload: sql.SQL) -> list[Row]:
        where, params = _where(flt)
        vector = _vector(query)
        statement = sql.SQL(
            "SELECT id, 1 - (dense <=> %s::vector) AS score, {} FROM {} WHERE {} "
            "ORDER BY dense <=> %s::vector LIMIT %s").format(payload, self._tables.points, where)
        values = [vector, *params, vector, limit]
        with self._sql("search"), self._db.transaction() as conn:
            # A custom plan for every query: a generic one (psycopg prepares a statement run
            # five times) would choose between the HNSW and the GIN indexes without knowing
            # the caller's readers, whose share of the points decides which is right.
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            exact = self.exact or self._points(conn) < self.exact_below
            if not exact:
                ef = min(EF_MAX, max(self.ef_search, self.ef_per_result * limit))
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                rows = conn.execute(statement, values).fetchall()
                if len(rows) >= limit:
                    return rows
                # The graph's candidates ran out before the filter let ``limit`` through.
                self.exact_fallbacks += 1
            conn.execute("SET LOCAL enable_indexscan = off")
            return conn.execute(statement, values).fetchall()

    def _points(self, conn: psycopg.Connection[Row]) -> int:
        row = conn.execute("SELECT points FROM vector_generations WHERE generation = %s",
                           [self.generation]).fetchone()
        return int(row["points"]) if row else 0

    def _bm25(self, query: SparseVector, flt: IndexFilter, limit: int,
              payload: sql.SQL) -> list[Row]:
        where, params = _where(flt)
        t = self._tables
        weights = dict(zip(query.indices, query.values, strict=True))
        # Qdrant's IDF modifier, in float8 (Qdrant computes in float32: the scores agree to
        # about 1e-6 of their value).
        statement = sql.SQL("""
            WITH n AS (SELECT bm25_points AS n FROM vector_generations WHERE generation = %s),
            q AS (
                SELECT t.term,
                       u.weight * ln((n.n - t.df + 0.5::float8) / (t.df + 0.5::float8) + 1) AS w
                FROM unnest(%s::bigint[], %s::float8[]) AS u(term, weight)
                JOIN {terms} t ON t.term = u.term, n
                WHERE t.df > 0
            ),
            scored AS (
                SELECT p.point_id, sum(p.weight * q.w) AS score
                FROM {postings} p JOIN q ON p.term = q.term
                GROUP BY p.point_id
            )
            SELECT v.id, s.score, {payload}
            FROM scored s JOIN {points} v ON v.id = s.point_id
            WHERE {where}
            ORDER BY s.score DESC, v.id
            LIMIT %s""").format(terms=t.terms, postings=t.postings, points=t.points,
                                where=where, payload=payload)
        values = [self.generation, list(weights), list(weights.values()), *params, limit]
        with self._sql("search"), self._db.connection() as conn:
            return conn.execute(statement, values).fetchall()

    def count(self, filter: IndexFilter | None = None) -> int:
        where, params = _where(filter)
        with self._sql("count points"), self._db.connection() as conn:
            row = conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE {}").format(
                self._tables.points, where), params).fetchone()
        return int(row["n"]) if row else 0

    def point_ids(self, filter: IndexFilter) -> list[str]:
        where, params = _where(filter)
        with self._sql("list points"), self._db.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT id FROM {} WHERE {} ORDER BY id").format(
                self._tables.points, where), params).fetchall()
        return [str(r["id"]) for r in rows]

    def missing(self, ids: Sequence[str]) -> set[str]:
        # Compared as the database writes UUIDs; an id that is no UUID has no point.
        wanted = {str(i): _canonical(str(i)) for i in ids}
        asked = sorted({c for c in wanted.values() if c is not None})
        found: set[str] = set()
        with self._sql("look up points"), self._db.connection() as conn:
            for start in range(0, len(asked), _SCAN_PAGE * 10):
                rows = conn.execute(sql.SQL("SELECT id FROM {} WHERE id = ANY(%s::uuid[])").format(
                    self._tables.points), [asked[start:start + _SCAN_PAGE * 10]]).fetchall()
                found.update(str(r["id"]) for r in rows)
        return {i for i, c in wanted.items() if c not in found}

    def scan(self) -> Iterator[tuple[str, str | None, str | None]]:
        for point_id, payload in self.scan_payloads(("document_id", "version")):
            yield point_id, payload.get("document_id"), payload.get("version")

    def scan_payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Pages in id order, each a query of its own (no connection held between pages)."""
        after: Any = None
        while True:
            since = sql.SQL("WHERE id > %s") if after is not None else sql.SQL("")
            params: list[Any] = [list(keys)] + ([after] if after is not None else [])
            with self._sql("scan points"), self._db.connection() as conn:
                rows = conn.execute(sql.SQL("""
                    SELECT id, (SELECT coalesce(jsonb_object_agg(key, value), '{{}}'::jsonb)
                                FROM jsonb_each(payload) WHERE key = ANY(%s::text[])) AS picked
                    FROM {} {} ORDER BY id LIMIT {}""").format(
                    self._tables.points, since, sql.Literal(_SCAN_PAGE)), params).fetchall()
            for r in rows:
                yield str(r["id"]), dict(r["picked"])
            if len(rows) < _SCAN_PAGE:
                return
            after = rows[-1]["id"]


class PgvectorIndexStore:
    """The generations of a pgvector index (``generations.py``): each its own tables in one
    database, listed in ``vector_generations``. ``owns_database``: close the pool with the
    store (one opened for the index alone)."""

    def __init__(self, database: PostgresDatabase, dim: int, *,
                 owns_database: bool = False) -> None:
        self.database = database
        self.dim = dim
        self._owns_database = owns_database
        try:
            ensure_vector_extension(database)
            database.migrate(SCHEMA)
        except BaseException:
            self.close()
            raise

    def open(self, generation: str) -> PgvectorIndex:
        return PgvectorIndex(self.database, self.dim, generation=generation)

    def drop(self, generation: str) -> bool:
        """Drop the generation's tables. A search still reading them (another replica) makes
        the drop wait until its transaction ends, a few milliseconds."""
        tables = _Tables(generation)
        try:
            with self.database.transaction() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [DDL_LOCK])
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}, {}").format(
                    tables.points, tables.postings, tables.terms))
                conn.execute("DELETE FROM vector_generations WHERE generation = %s",
                             [generation])
        except psycopg.Error as e:
            raise BackendError(f"the database {self.database.display} refused to drop the "
                               f"pgvector tables of generation {generation!r}: {e}") from e
        return True

    def names(self) -> list[str]:
        rows = self.database.rows("SELECT generation FROM vector_generations")
        return sorted(name for r in rows if is_generation(name := str(r["generation"])))

    def describe(self, generation: str) -> str:
        return (f"the pgvector table {_Tables(generation).name(POINTS)} in the database "
                f"{self.database.display}")

    def close(self) -> None:
        if self._owns_database:
            self._owns_database = False
            self.database.close()


def _column_dim(conn: psycopg.Connection[Row], table: str) -> int | None:
    """The dimension of the table's ``dense`` column (pgvector keeps it as the type modifier);
    None when there is no such table."""
    row = conn.execute("SELECT a.atttypmod AS dim FROM pg_attribute a "
                       "WHERE a.attrelid = to_regclass(%s) AND a.attname = 'dense'",
                       [table]).fetchone()
    return int(row["dim"]) if row is not None else None


def _where(flt: IndexFilter | None) -> tuple[sql.Composable, list[Any]]:
    """The WHERE clause of ``flt`` (``IndexFilter.conditions``: each condition ANDed) and its
    parameters. Arrays are matched with ``&&`` (any element in common) and ``@>`` (holds the
    value), which their GIN indexes answer; ``&&`` with an empty array matches nothing, as a
    caller without principals must."""
    if flt is None or flt.is_empty():
        return sql.SQL("true"), []
    parts: list[sql.Composable] = []
    params: list[Any] = []
    for key, kind, values in flt.conditions():
        if key not in COLUMNS:
            raise BackendError(f"the pgvector index cannot filter on {key!r}: it is not one of "
                               "its columns (a payload field indexed since needs a new layout)")
        column = sql.Identifier(key)
        if key in ARRAY_COLUMNS:
            op = "&&" if kind == "any" else "@>"
            parts.append(sql.SQL("{} {} %s::text[]").format(column, sql.SQL(op)))
            params.append(list(values))
        elif kind == "any":
            parts.append(sql.SQL("{} = ANY(%s::text[])").format(column))
            params.append(list(values))
        else:
            parts.append(sql.SQL("{} = %s").format(column))
            params.append(values[0])
    if flt.exclude_ids:
        parts.append(sql.SQL("id <> ALL(%s::uuid[])"))
        params.append(list(flt.exclude_ids))
    return sql.SQL(" AND ").join(parts), params


def _record(point: ChunkPoint) -> dict[str, Any]:
    payload = point.payload.to_payload()
    record = {key: payload.get(key) for key in COLUMNS}
    for key in ARRAY_COLUMNS:
        record[key] = list(record[key] or [])
    return {**record, "id": point.id, "payload": payload, "dense": _vector(point.dense)}


def _vector(values: Sequence[float]) -> str:
    """pgvector's text form, ``[0.1,0.2]``: floats as Python writes them back exactly."""
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def _canonical(point_id: str) -> str | None:
    """The id as the database writes a UUID (lowercase, with hyphens); None if it is none."""
    try:
        return str(uuid.UUID(point_id))
    except ValueError:
        return None


def _hit(row: Row) -> VectorHit:
    return VectorHit(id=str(row["id"]), score=float(row["score"]),
                     payload=ChunkPayload.from_payload(row["payload"]))

