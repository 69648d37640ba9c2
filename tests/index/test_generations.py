"""The live index follows the catalog's pointer (index/generations.py), on every backend's store.

No model: synthetic vectors of dimension 4. What `citewise reindex` does around it is tested in
tests/ingest/test_reindex.py.
"""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient

from citewise.errors import BackendError
from citewise.index.generations import (
    EMBEDDING_MODEL,
    EMBEDDING_SOURCE,
    LIVE,
    LiveIndex,
    ModelChange,
    moved,
    next_generation,
    pinned,
)
from citewise.index.payload import ChunkPayload
from citewise.index.pgvector_index import PgvectorIndexStore
from citewise.index.qdrant_edge_index import EdgeIndexStore
from citewise.index.qdrant_server_index import ServerIndexStore
from citewise.index.sqlite_catalog import SqliteDocumentCatalog
from citewise.index.vector_index import ChunkPoint, IndexFilter, SparseVector
from citewise.postgres import PostgresDatabase
from citewise.sqlite import SqliteDatabase

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
DIM = 4


def _point(n: int, document: str) -> ChunkPoint:
    return ChunkPoint(id=f"00000000-0000-0000-0000-{n:012d}", dense=[1.0, 0.0, 0.0, float(n)],
                      sparse=SparseVector([1], [1.0]),
                      payload=ChunkPayload(document_id=document, version="v", source="s",
                                           readers=["public"]))


@pytest.fixture(params=["edge", "server", "pgvector"])
def store(request, tmp_path):
    if request.param == "edge":
        return EdgeIndexStore(tmp_path / "data" / "qdrant", DIM)
    if request.param == "pgvector":
        url = request.getfixturevalue("postgres_url")  # skips where pgserver is absent
        return PgvectorIndexStore(PostgresDatabase(url), DIM, owns_database=True)
    return ServerIndexStore(QdrantClient(path=str(tmp_path / "qdrant-server")), "citewise", DIM)


def test_the_live_index_follows_the_pointer_and_drops_the_old_generation(tmp_path, store):
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    live = LiveIndex(catalog, store)
    live.upsert([_point(1, "old")])
    new = store.open("g2")
    new.upsert([_point(2, "new"), _point(3, "new")])
    new.close()
    assert sorted(store.names()) == ["", "g2"]

    with pinned(live) as (generation, index):
        assert generation == ""
        catalog.set_meta(LIVE, "g2")  # what the switch transaction does, among other things
        assert moved(live, generation)
        # Another call moves to the new generation; this one keeps the old until it is done.
        assert live.count() == 2 and live.generation == "g2"
        assert index.count() == 1
        assert "" in store.names()
    assert store.names() == ["g2"]  # closed and dropped once its last call returned
    hits = live.search([1.0, 0.0, 0.0, 0.0], filter=IndexFilter(readers=["public"]), limit=5)
    assert {h.payload.document_id for h in hits} == {"new"}
    live.close()
    catalog.close()


def test_a_generation_of_another_model_is_refused_with_what_to_do(tmp_path, store):
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    catalog.set_meta(EMBEDDING_MODEL, "model-a")
    live = LiveIndex(catalog, store, expected_model="model-a")
    assert live.count() == 0
    store.open("g2").close()
    with catalog.database.transaction():
        catalog.set_meta(LIVE, "g2")
        catalog.set_meta(EMBEDDING_MODEL, "model-b")
    with pytest.raises(BackendError, match="model-b") as raised:
        live.count()
    assert "restart" in raised.value.hint
    live.close()
    catalog.close()


def _switch_to_model(catalog: SqliteDocumentCatalog, model: str, source: str) -> None:
    """What the switch transaction of a reindex with another model writes."""
    with catalog.database.transaction():
        catalog.set_meta(LIVE, "g2")
        catalog.set_meta(EMBEDDING_MODEL, model)
        catalog.set_meta(EMBEDDING_SOURCE, source)


def test_a_generation_of_another_model_is_searched_with_that_model_once_loaded(tmp_path, store):
    """The reindex recorded where its model comes from; the process loads it before it moves,
    and starts embedding with it in the same step as it moves to the generation."""
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    catalog.set_meta(EMBEDDING_MODEL, "model-a")
    asked, committed = [], []

    def load(source: dict) -> ModelChange:
        asked.append(source)
        return ModelChange("model-b", DIM, lambda: committed.append(live.generation))

    live = LiveIndex(catalog, store, expected_model="model-a", load_model=load)
    new = store.open("g2")
    new.upsert([_point(2, "new")])
    new.close()
    _switch_to_model(catalog, "model-b", '{"path": "/models/b"}')
    assert live.count() == 1 and live.generation == "g2"
    assert asked == [{"path": "/models/b"}]
    assert committed == [""]  # made current while the old generation was still the current one
    assert live.expected_model == "model-b"
    live.close()
    catalog.close()


def test_a_model_that_cannot_be_loaded_is_refused_with_why(tmp_path, store):
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    catalog.set_meta(EMBEDDING_MODEL, "model-a")

    def load(source: dict) -> ModelChange:
        raise ConnectionError("the endpoint did not answer")

    live = LiveIndex(catalog, store, expected_model="model-a", load_model=load)
    store.open("g2").close()
    _switch_to_model(catalog, "model-b", '{"url": "http://127.0.0.1:9/v1", "model": "b"}')
    with pytest.raises(BackendError, match="loading that model here failed") as raised:
        live.count()
    assert "endpoint did not answer" in str(raised.value) and "restart" in raised.value.hint
    live.close()
    catalog.close()


def test_a_recorded_source_that_gives_another_model_is_refused(tmp_path, store):
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    catalog.set_meta(EMBEDDING_MODEL, "model-a")
    live = LiveIndex(catalog, store, expected_model="model-a",
                     load_model=lambda source: ModelChange("model-c", DIM, lambda: None))
    store.open("g2").close()
    _switch_to_model(catalog, "model-b", '{"path": "/models/b"}')
    with pytest.raises(BackendError, match="model-c"):
        live.count()
    assert live.expected_model == "model-a"
    live.close()
    catalog.close()


def test_generation_names():
    assert next_generation("") == "g2"
    assert next_generation("g2", "", "g7") == "g8"
    assert next_generation("g3", "other") == "g4"


def test_the_edge_store_leaves_a_folder_another_opener_holds(tmp_path):
    store = EdgeIndexStore(tmp_path / "qdrant", DIM)
    held = store.open("g2")
    assert store.drop("g2") is False and (tmp_path / "qdrant-g2").is_dir()
    held.close()
    assert store.drop("g2") is True and not (tmp_path / "qdrant-g2").exists()
    (tmp_path / "qdrant-local").mkdir()  # not a generation: never listed, never dropped
    assert store.names() == []


def test_an_idle_server_follows_the_pointer_without_a_request(tmp_path):
    """``citewise serve`` runs ``follow_every``: the new generation is opened (and, on the
    embedded engine, locked) by the server within seconds of the switch, not at the next
    request, and the old one is dropped; while it opens, calls go on with the old one."""
    import threading
    import time

    store = EdgeIndexStore(tmp_path / "data" / "qdrant", DIM)
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    live = LiveIndex(catalog, store)
    live.upsert([_point(1, "old")])
    new = store.open("g2")
    new.upsert([_point(2, "new")])
    new.close()
    stop = threading.Event()
    follower = threading.Thread(target=live.follow_every, args=(0.05, stop), daemon=True)
    follower.start()
    try:
        catalog.set_meta(LIVE, "g2")
        deadline = time.monotonic() + 5
        while live.generation != "g2" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert live.generation == "g2"
        # The new folder is the server's now: another opener is refused, as a CLI would be.
        with pytest.raises(Exception, match="holds the embedded index"):
            EdgeIndexStore(tmp_path / "data" / "qdrant", DIM).open("g2")
        deadline = time.monotonic() + 5
        while "" in store.names() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.names() == ["g2"]
    finally:
        stop.set()
        follower.join(5)
        live.close()
