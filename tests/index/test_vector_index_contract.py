"""One contract, three backends: the embedded engine, qdrant-client (local mode for a server)
and pgvector (a real PostgreSQL 16 with pgvector 0.6, ``postgres_url``; its dense queries take
the HNSW path here, whatever the size, so that path is what the contract holds).

Vectors are synthetic and deterministic (seeded, dimension 8), sparse vectors are hand-made term
lists: no embedding model is involved, so a failure here is the index's, not the model's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from citewise.errors import BackendError, ConfigError, IndexLockedError
from citewise.index.payload import ChunkPayload
from citewise.index.pgvector_index import PgvectorIndex
from citewise.index.qdrant_edge_index import EdgeVectorIndex
from citewise.index.qdrant_server_index import ServerIndexStore, ServerVectorIndex
from citewise.index.vector_index import ChunkPoint, IndexFilter, SparseVector, VectorIndex
from citewise.postgres import PostgresDatabase

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    # qdrant-client checks the server version in a background thread, so the warning about the
    # unreachable server can surface during a later test.
    pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning"),
]

DIM = 8
MODES = ("dense", "sparse")
EVERYONE = ["public", "group:sre"]
BOB = ["public", "user:bob"]

# Sparse term ids: COMMON is in every chunk (so a sparse query reaches them all), the others are
# rare and pick out one document each.
COMMON, RARE_DB, RARE_SECRET = 1, 42, 99

OpenIndex = Callable[..., VectorIndex]


@pytest.fixture(params=["edge", "server", "pgvector"])
def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenIndex]:
    """Opens the backend on the same storage each call, so tests can close and reopen it."""
    opened: list[VectorIndex] = []
    # Skips (saying why) where pgserver's PostgreSQL is not installed.
    database_url = request.getfixturevalue("postgres_url") if request.param == "pgvector" \
        else None

    def open_(dim: int = DIM) -> VectorIndex:
        if request.param == "edge":
            index: VectorIndex = EdgeVectorIndex(tmp_path / "edge", dim)
        elif database_url is not None:
            index = PgvectorIndex(PostgresDatabase(database_url), dim, owns_database=True,
                                  exact_below=0)
        else:
            client = QdrantClient(path=str(tmp_path / "qdrant"))
            try:
                index = ServerVectorIndex(client, "chunks", dim)
            except Exception:
                client.close()  # local mode holds a folder lock too
                raise
        opened.append(index)
        return index

    yield open_
    for index in opened:
        index.close()


@pytest.fixture
def vector_index(open_index: OpenIndex) -> VectorIndex:
    return open_index()


# -- synthetic corpus --------------------------------------------------------------------------


def unit(vector: np.ndarray) -> list[float]:
    return (vector / np.linalg.norm(vector)).astype(float).tolist()


BASIS = np.random.default_rng(20240611).normal(size=(16, DIM))


def near(i: int, noise: float = 0.05, seed: int = 0) -> list[float]:
    """A vector close to basis vector ``i`` (distinct basis vectors are far apart)."""
    jitter = np.random.default_rng(seed).normal(scale=noise, size=DIM)
    return unit(BASIS[i] + jitter)


def prefixes(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def chunk(
    document_id: str,
    n: int,
    *,
    dense: list[float],
    terms: list[int],
    version: str = "v1",
    readers: tuple[str, ...] = ("public",),
    source: str = "wiki",
    path: str = "eng/notes.md",
    tags: tuple[str, ...] = (),
    service: str = "none",
) -> ChunkPoint:
    return ChunkPoint(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{document_id}@{version}#{n}")),
        dense=dense,
        sparse=SparseVector(indices=terms, values=[1.0] * len(terms)),
        payload=ChunkPayload(
            document_id=document_id,
            version=version,
            readers=list(readers),
            source=source,
            path_prefixes=prefixes(path),
            tags=list(tags),
            service=service,
            text=f"{document_id} chunk {n}",
            ordinal=n,
        ),
    )


def corpus() -> list[ChunkPoint]:
    """Four documents, two chunks each; basis vector i belongs to document i."""
    docs = [
        ("runbook-db", dict(path="eng/runbooks/db.md", tags=("db", "oncall"), service="postgres")),
        ("runbook-cache", dict(path="eng/runbooks/cache.md", tags=("oncall",), service="redis")),
        ("design-api", dict(source="git", path="eng/design/api.md", tags=("design",))),
        ("sre-secrets", dict(path="ops/secrets.md", tags=("oncall",), readers=("group:sre",))),
    ]
    rare = {"runbook-db": [RARE_DB], "sre-secrets": [RARE_SECRET]}
    return [
        chunk(
            doc,
            n,
            dense=near(i, seed=10 * i + n),
            terms=[COMMON, 10 + i, *rare.get(doc, [])],
            **fields,
        )
        for i, (doc, fields) in enumerate(docs)
        for n in range(2)
    ]


def ids_of(points: list[ChunkPoint], document_id: str) -> set[str]:
    return {p.id for p in points if p.payload.document_id == document_id}


def docs_of(hits) -> set[str]:
    return {h.payload.document_id for h in hits}


def search(index: VectorIndex, mode: str, flt: IndexFilter, *, dense=None, sparse=None, limit=100):
    if mode == "dense":
        query = dense if dense is not None else near(0, noise=0.5, seed=123)
    else:
        query = sparse or SparseVector([COMMON], [1.0])
    return index.search(query, filter=flt, limit=limit)


@pytest.fixture
def loaded(vector_index: VectorIndex) -> tuple[VectorIndex, list[ChunkPoint]]:
    points = corpus()
    vector_index.upsert(points)
    return vector_index, points


# -- writes ------------------------------------------------------------------------------------


def test_upsert_and_count(loaded):
    index, points = loaded
    assert index.count() == len(points)
    assert index.count(IndexFilter(document_ids=["runbook-db"])) == 2


def test_reupsert_overwrites_instead_of_duplicating(loaded):
    index, points = loaded
    points[0].payload.text = "edited"
    index.upsert(points)
    assert index.count() == len(points)
    hits = index.search(points[0].dense, filter=IndexFilter(readers=EVERYONE), limit=1)
    assert hits[0].id == points[0].id
    assert hits[0].payload.text == "edited"


def test_delete_document_removes_all_its_points(loaded):
    index, points = loaded
    index.delete_document("runbook-db")
    assert index.count(IndexFilter(document_ids=["runbook-db"])) == 0
    assert index.count() == len(points) - 2


def test_delete_document_keep_version_keeps_only_that_version(loaded):
    index, points = loaded
    v2 = [
        chunk("runbook-db", n, dense=near(0, seed=n), terms=[COMMON], version="v2") for n in (0, 1)
    ]
    index.upsert(v2)
    assert index.count(IndexFilter(document_ids=["runbook-db"])) == 4

    index.delete_document("runbook-db", keep_version="v2")

    assert set(index.point_ids(IndexFilter(document_ids=["runbook-db"]))) == {p.id for p in v2}
    assert index.count() == len(points)  # v1's two chunks gone, v2's two in, others untouched


def test_set_payload_changes_readers_and_the_filter_follows(loaded):
    index, points = loaded
    bob = IndexFilter(readers=BOB)
    assert "runbook-db" in docs_of(search(index, "dense", bob))

    index.set_payload("runbook-db", {"readers": ["group:sre"]})

    for mode in MODES:
        assert "runbook-db" not in docs_of(search(index, mode, bob))
        assert "runbook-db" in docs_of(search(index, mode, IndexFilter(readers=EVERYONE)))
    # Only the given keys change.
    hit = search(index, "dense", IndexFilter(readers=EVERYONE, document_ids=["runbook-db"]))[0]
    assert hit.payload.service == "postgres"


def test_point_ids_scrolls_past_one_page(vector_index):
    # Enough points for several upsert batches and scroll pages on both backends.
    points = [
        chunk(f"bulk-{n // 10}", n, dense=near(n % 16, seed=n), terms=[COMMON]) for n in range(600)
    ]
    vector_index.upsert(points)
    ids = vector_index.point_ids(IndexFilter())
    assert len(ids) == 600
    assert set(ids) == {p.id for p in points}
    assert set(vector_index.point_ids(IndexFilter(document_ids=["bulk-3"]))) == {
        p.id for p in points[30:40]
    }


def test_scan_payloads_gives_every_point_with_the_keys_asked_for(loaded):
    index, points = loaded
    index.set_payload("runbook-db", {"readers": ["group:sre"]})
    scanned = dict(index.scan_payloads(("document_id", "readers", "version")))
    assert set(scanned) == {p.id for p in points}
    for p in points:
        assert set(scanned[p.id]) == {"document_id", "readers", "version"}
        assert scanned[p.id]["document_id"] == p.payload.document_id
        want = ["group:sre"] if p.payload.document_id == "runbook-db" else p.payload.readers
        assert scanned[p.id]["readers"] == want
    assert {(i, d, v) for i, d, v in index.scan()} == {
        (p.id, p.payload.document_id, p.payload.version) for p in points}


# -- search ------------------------------------------------------------------------------------


def test_dense_search_returns_the_nearest_first(loaded):
    index, points = loaded
    target = points[5]  # design-api, chunk 1
    hits = index.search(target.dense, filter=IndexFilter(readers=EVERYONE), limit=3)
    assert hits[0].id == target.id
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].payload.document_id == "design-api"  # its sibling beats other documents
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_sparse_search_ranks_the_document_sharing_rare_terms_first(loaded):
    index, points = loaded
    hits = index.search(
        SparseVector([COMMON, RARE_DB], [1.0, 1.0]), filter=IndexFilter(readers=EVERYONE), limit=10
    )
    assert {h.id for h in hits[:2]} == ids_of(points, "runbook-db")
    assert len(hits) == len(points)  # the common term reaches every chunk


def test_payload_comes_back_whole(loaded):
    index, points = loaded
    hit = index.search(points[2].dense, filter=IndexFilter(readers=EVERYONE), limit=1)[0]
    assert hit.payload == points[2].payload  # every field of the contract, typed


@pytest.mark.parametrize("mode", MODES)
def test_rank_is_search_without_the_payloads(loaded, mode):
    index, points = loaded
    flt = IndexFilter(readers=BOB)
    query = points[4].dense if mode == "dense" else SparseVector([COMMON, RARE_DB], [1.0, 2.0])
    hits = index.search(query, filter=flt, limit=7)
    ranked = index.rank(query, filter=flt, limit=7)
    assert [(r.id, r.score) for r in ranked] == [(h.id, pytest.approx(h.score)) for h in hits]
    assert not ids_of(points, "sre-secrets") & {r.id for r in ranked}  # BOB may not read it
    assert index.rank(SparseVector([], []), filter=flt, limit=3) == []


def test_payloads_reads_the_points_asked_for_and_leaves_out_missing_ones(loaded):
    index, points = loaded
    gone = "00000000-0000-4000-8000-000000000000"
    found = index.payloads([points[3].id, points[0].id, gone])
    assert found == {points[3].id: points[3].payload, points[0].id: points[0].payload}
    assert index.payloads([]) == {}
    index.delete_document(points[3].payload.document_id)
    assert points[3].id not in index.payloads([points[3].id])


def test_empty_sparse_vector_matches_nothing(loaded):
    index, points = loaded
    flt = IndexFilter(readers=EVERYONE)
    assert index.search(SparseVector([], []), filter=flt, limit=3) == []


@pytest.mark.parametrize("mode", MODES)
def test_readers_filter_hides_points_even_when_they_match_best(loaded, mode):
    index, points = loaded
    secret = ids_of(points, "sre-secrets")
    best = dict(
        dense=near(3, noise=0.0, seed=30), sparse=SparseVector([COMMON, RARE_SECRET], [1.0, 5.0])
    )

    hidden = search(index, mode, IndexFilter(readers=BOB), limit=1000, **best)
    assert hidden  # the rest of the corpus is still there
    assert not secret & {h.id for h in hidden}

    shown = search(index, mode, IndexFilter(readers=EVERYONE), limit=1000, **best)
    assert shown[0].id in secret

    assert search(index, mode, IndexFilter(readers=[]), **best) == []


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (IndexFilter(sources=["git"]), {"design-api"}),
        (IndexFilter(path_prefix="eng/runbooks"), {"runbook-db", "runbook-cache"}),
        (IndexFilter(path_prefix="eng/runbooks/db.md"), {"runbook-db"}),
        (IndexFilter(path_prefix="eng/run"), set()),  # folder boundaries, not string prefixes
        (IndexFilter(tags=["db", "design"]), {"runbook-db", "design-api"}),
        (IndexFilter(services=["redis"]), {"runbook-cache"}),
        (IndexFilter(document_ids=["design-api", "sre-secrets"]), {"design-api", "sre-secrets"}),
        (
            IndexFilter(sources=["wiki"], tags=["oncall"]),
            {"runbook-db", "runbook-cache", "sre-secrets"},
        ),
        (IndexFilter(readers=["public"], tags=["oncall"]), {"runbook-db", "runbook-cache"}),
    ],
    ids=[
        "source",
        "folder",
        "file",
        "partial-name",
        "tags",
        "service",
        "document_ids",
        "source+tags",
        "readers+tags",
    ],
)
def test_filters(loaded, flt, expected):
    index, points = loaded
    expected_ids = set().union(*(ids_of(points, d) for d in expected))
    assert index.count(flt) == len(expected_ids)
    assert set(index.point_ids(flt)) == expected_ids
    readable = flt if flt.readers is not None else replace(flt, readers=EVERYONE)
    for mode in MODES:
        assert docs_of(search(index, mode, readable)) == expected, mode


# -- lifecycle ---------------------------------------------------------------------------------


def test_points_survive_close_and_reopen(open_index):
    index = open_index()
    points = corpus()
    index.upsert(points)
    index.delete_document("design-api")
    index.close()

    reopened = open_index()
    assert reopened.count() == len(points) - 2
    hits = reopened.search(SparseVector([RARE_DB], [1.0]), filter=IndexFilter(readers=EVERYONE),
                           limit=2)
    assert docs_of(hits) == {"runbook-db"}


def test_reopening_with_another_dimension_is_a_config_error(open_index):
    open_index().close()
    with pytest.raises(ConfigError):
        open_index(dim=DIM * 2)


def test_edge_second_opener_is_refused_until_the_first_closes(tmp_path):
    first = EdgeVectorIndex(tmp_path, DIM)
    first.upsert(corpus())
    try:
        with pytest.raises(IndexLockedError) as raised:
            EdgeVectorIndex(tmp_path, DIM)
        assert "citewise serve" in raised.value.message
        assert str(tmp_path) in raised.value.message
        assert "CITEWISE_QDRANT_URL" in (raised.value.hint or "")
    finally:
        first.close()

    second = EdgeVectorIndex(tmp_path, DIM)
    try:
        assert second.count() == len(corpus())
    finally:
        second.close()


CRASHING_WRITER = """
import os, signal, sys
from pathlib import Path
from citewise.index.qdrant_edge_index import EdgeVectorIndex
from citewise.index.payload import ChunkPayload
from citewise.index.vector_index import ChunkPoint, SparseVector

index = EdgeVectorIndex(Path(sys.argv[1]), 8)
payload = ChunkPayload(document_id="d", version="v", source="s", readers=["public"])
point = ChunkPoint(id=sys.argv[2], dense=[1.0] * 8, sparse=SparseVector([1], [1.0]),
                   payload=payload)
gone = ChunkPoint(id=sys.argv[3], dense=[0.5] * 8, sparse=SparseVector([2], [1.0]),
                  payload=payload)
index.upsert([point, gone])
index.delete_points([gone.id])
index.set_payload("d", {"readers": ["group:sre"]})
os.kill(os.getpid(), signal.SIGKILL)  # no close(), no interpreter shutdown, no flush
"""


def test_edge_writes_survive_a_killed_process(tmp_path):
    """Writes are in the engine's write-ahead log when they return: a process killed before
    any segment flush loses none of them (the index groups its flushes on this)."""
    point_id, gone_id = str(uuid.uuid4()), str(uuid.uuid4())
    writer = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, str(tmp_path), point_id, gone_id],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert writer.returncode == -signal.SIGKILL, writer.stderr.decode()

    index = EdgeVectorIndex(tmp_path, DIM)  # the dead process's flock went with it
    try:
        assert index.point_ids(IndexFilter()) == [point_id]
        assert index.point_ids(IndexFilter(readers=["group:sre"])) == [point_id]
        assert index.point_ids(IndexFilter(readers=["public"])) == []
    finally:
        index.close()


def test_server_unreachable_is_a_backend_error():
    with pytest.raises(BackendError, match=r"Qdrant at http://127\.0\.0\.1:9 is unreachable"):
        ServerVectorIndex.from_url("http://127.0.0.1:9", None, "chunks", DIM, timeout=2)


class _CollectionsOnly(BaseHTTPRequestHandler):
    """The two GETs of Qdrant's REST API that listing a store's generations makes, answered
    as its documentation shows them (``GET /`` is the client's version check)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/":
            result = {"title": "qdrant - vector search engine", "version": "1.16.0"}
        else:
            result = {"result": {"collections": [{"name": "chunks"}, {"name": "other"}]},
                      "status": "ok", "time": 0.0001}
        body = json.dumps(result).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_sub_second_timeout_still_reaches_the_server():
    """CITEWISE_QDRANT_TIMEOUT is seconds as a float; qdrant-client takes whole seconds, and
    0.5 once became 0, which failed every request."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CollectionsOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = ServerIndexStore.from_url(f"http://127.0.0.1:{server.server_port}", None,
                                          "chunks", DIM, timeout=0.5)
        assert store.names() == [""]
        store.close()
    finally:
        server.shutdown()
        server.server_close()


def test_edge_is_safe_to_share_between_threads(tmp_path):
    index = EdgeVectorIndex(tmp_path, DIM)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for n in range(10):
                point = chunk(f"t{worker}", n, dense=near(n % 16, seed=n), terms=[COMMON, n])
                index.upsert([point])
                search(index, "dense", IndexFilter(readers=["public"]))
                search(index, "sparse", IndexFilter(readers=["public"]))
                index.count(IndexFilter(document_ids=[f"t{worker}"]))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert index.count() == 8 * 10
    finally:
        index.close()


def test_deleted_restricted_points_stop_shaping_bm25_scores(vector_index):
    """IDF is computed over every point, readable or not (a side channel documented in
    docs/permissions.md); once restricted points are deleted and the index optimized, the
    scores anonymous callers see must be what they were before."""
    vector_index.upsert(corpus())
    anyone = IndexFilter(readers=["public"])
    query = SparseVector([RARE_DB], [1.0])
    before = vector_index.search(query, filter=anyone, limit=1)[0].score
    secret = [chunk(f"s{n}", 0, dense=near(5, seed=n), terms=[RARE_DB], readers=("group:x",))
              for n in range(6)]
    vector_index.upsert(secret)
    during = vector_index.search(query, filter=anyone, limit=1)[0].score
    assert during < before  # the documented side channel: rarer terms weigh more
    for n in range(6):
        vector_index.delete_document(f"s{n}")
    vector_index.optimize()
    after = vector_index.search(query, filter=anyone, limit=1)[0].score
    assert after == pytest.approx(before)
