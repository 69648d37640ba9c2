"""The default vector index: Qdrant's engine embedded in-process through qdrant-edge.

One folder holds one shard. Only one process may open it (the engine's WAL allows a single
opener), so we take our own ``flock`` first: a second ``citewise`` process then gets an error that
says who holds the index and what to do, instead of the engine's bare "WouldBlock".

qdrant-edge 0.9.0 is beta (pinned) and its API is not qdrant-client's: the comments below mark
where it behaves in ways its stub does not spell out.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import qdrant_edge as qe

from citewise.errors import (
    BackendError,
    CitewiseError,
    ConfigError,
    IndexLockedError,
    write_failure,
)
from citewise.index.edge_hnsw import NO_GRAPH, EdgeHnswPolicy, exact_params
from citewise.index.generations import is_generation
from citewise.index.payload import INDEXED_FIELDS, ChunkPayload
from citewise.index.vector_index import (
    DENSE,
    SPARSE,
    ChunkPoint,
    IndexFilter,
    ScoredId,
    SparseVector,
    VectorHit,
)
from citewise.private_files import FILE_MODE, FOLDER_MODE, make_private

LOCK_FILE = "citewise.lock"
# Written by the engine when a shard is created; its presence means "load, don't create".
_SHARD_MARKER = "edge_config.json"
_UPSERT_BATCH = 512
_SCROLL_PAGE = 100
_SCAN_PAGE = 1000
FLUSH_INTERVAL = 5.0  # seconds between segment flushes while writing (see _written)
# Brute force never misses and costs ~6 ms for a caller who reads a third of 113k points; HNSW
# saved ~5 ms of a ~37 ms search at recall@50 0.99, and its worst question lost a quarter of
# its candidates (bench/results/ann.md, bench/bench_ann.py). From a policy's ``hnsw_from``
# points a graph is built and searched instead (index/edge_hnsw.py, bench/results/ann-1m.md).
_EXACT = exact_params()


class EdgeVectorIndex:
    """``VectorIndex`` over an embedded ``qdrant_edge.EdgeShard`` stored in ``path``."""

    def __init__(self, path: Path, dim: int, policy: EdgeHnswPolicy | None = None) -> None:
        self._path = Path(path)
        self._dim = dim
        self._policy = policy or EdgeHnswPolicy()
        # Whether the shard's config asks for a graph (decided from its size at each open):
        # dense queries then walk it, else they are exact.
        self._graph = False
        # Dense queries the graph left short of their limit, asked again exactly.
        self.exact_fallbacks = 0
        # One lock serialises every shard call: it makes close() safe against calls in flight,
        # and costs nothing measurable since the engine already spreads a query over its own
        # thread pool (8 threads querying together took as long as one thread doing it all).
        self._lock = threading.RLock()
        # Its payloads hold restricted chunk texts: the folder 0700, and left private at close
        # (the engine's files follow the process umask, which a library user may not set).
        self._path.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
        self._lock_file = _acquire_folder_lock(self._path)
        self._shard: qe.EdgeShard | None = None
        self._flushed = time.monotonic()
        try:
            self._shard = self._open_shard()
            self._ensure_payload_indexes()
        except BaseException:
            self.close()
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def _config(self, graph: bool | None) -> qe.EdgeConfig:
        """The shard's config; ``graph`` None leaves its graph and quantization as stored."""
        return qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=self._dim, distance=qe.Distance.Cosine)},
            # Our encoder stores BM25 term frequencies; the engine supplies the IDF at query time
            # so it stays right as the corpus changes.
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
            # Below the policy's ``hnsw_from`` points no HNSW graph (m=0, Qdrant's "no graph"):
            # every dense query is exact, and the engine's default built one at each compaction
            # that nothing read (58 s at 113k points, bench/results/ann.md). From it, the
            # policy's graph (index/edge_hnsw.py). The engine takes a changed graph or
            # quantization config at load and rebuilds segments at the next compaction.
            hnsw_config=None if graph is None else self._policy.hnsw_config(graph),
            quantization_config=None if graph is None
            else self._policy.quantization_config(graph),
            optimizers=self._policy.optimizers(),
        )

    def _open_shard(self) -> qe.EdgeShard:
        path = str(self._path)
        try:
            marker = self._path / _SHARD_MARKER
            if marker.exists():
                # Passing the config makes the engine check it against the stored segments;
                # the graph's part as stored, until the shard's size says which it needs.
                shard = qe.EdgeShard.load(path, self._config(None))
                self._graph = self._policy.wants_graph(shard.info().points_count)
                if _stored_graph(marker) == self._policy.stored_form(self._graph):
                    return shard
                # Another graph config (a threshold crossed, settings changed): the engine
                # takes it at load and builds it at the next compaction (flush or reindex).
                shard.close()
                return qe.EdgeShard.load(path, self._config(self._graph))
            self._graph = self._policy.wants_graph(0)
            return qe.EdgeShard.create(path, self._config(self._graph))
        except BaseException as exc:  # the engine raises bare Exception, or panics
            if not _engine_failure(exc):
                raise
            if "incompatible" in str(exc).lower():
                raise ConfigError(
                    f"The embedded index at {self._path} does not match the configured "
                    f"embedding size {self._dim}: {exc}",
                    hint="use the embedding model the index was built with, "
                    "or rebuild the index into a new folder",
                ) from exc
            raise BackendError(
                f"Could not open the embedded index at {self._path}: {_describe(exc)}",
                hint=DAMAGED_HINT,
            ) from exc

    def _ensure_payload_indexes(self) -> None:
        with self._engine("create payload indexes") as shard:
            existing = shard.info().payload_schema
            missing = [name for name in INDEXED_FIELDS if name not in existing]
            for name in missing:
                shard.update(
                    qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword)
                )
            if missing:
                shard.flush()

    def close(self) -> None:
        with self._lock:
            if self._lock_file.closed:
                return
            shard, self._shard = self._shard, None
            try:
                if shard is not None:
                    try:
                        shard.flush()
                    finally:
                        shard.close()
            except BaseException as exc:
                if not _engine_failure(exc):
                    raise
                raise BackendError(
                    f"Could not close the embedded index at {self._path}: {_describe(exc)}"
                ) from exc
            finally:
                self._release_folder_lock()
                make_private(self._path)

    def _release_folder_lock(self) -> None:
        # Closing the descriptor drops the flock.
        self._lock_file.close()

    @contextmanager
    def _engine(self, action: str) -> Iterator[qe.EdgeShard]:
        """The open shard, under the lock, with engine failures turned into ``BackendError``."""
        with self._lock:
            if self._shard is None:
                raise BackendError(f"The embedded index at {self._path} is closed")
            try:
                yield self._shard
            except CitewiseError:
                raise
            except BaseException as exc:
                if not _engine_failure(exc):
                    raise
                # A full disk the engine reports (it may also crash on one: ingest/space.py).
                full = write_failure(exc, "the embedded index", self._path)
                raise full or BackendError(
                    f"The embedded index at {self._path} failed to {action}: {_describe(exc)}",
                    hint=DAMAGED_HINT if _is_panic(exc) else None,
                ) from exc

    def optimize(self) -> None:
        """Merge segments, drop deleted points and refresh the BM25 statistics.

        The embedded engine compacts only on demand, and keeps counting deleted points in the
        inverse document frequencies it applies to BM25 until the shard is opened again (seen
        with qdrant-edge 0.9.0: a term's score stayed lowered by deleted documents). Those
        statistics are shared by every caller, so restricted documents that were deleted would
        go on shaping the scores anonymous callers see: reopen the shard after compacting.
        """
        with self._engine("optimize") as shard:
            if self._graph != self._policy.wants_graph(shard.info().points_count):
                # The threshold was crossed since the shard was opened: reopened with the
                # config its size calls for, so that this compaction builds (or drops) the graph.
                shard.flush()
                shard.close()
                self._shard = None
                self._shard = shard = self._open_shard()
            shard.optimize()
            shard.flush()
            shard.close()
            self._shard = None
            self._shard = self._open_shard()
        make_private(self._path)  # the compacted segments are new files

    def _graph_due(self) -> bool:
        """Whether the policy's graph is wanted and missing (or a tenth of the points are
        outside it): ``flush`` then compacts, which builds it."""
        with self._engine("inspect the index") as shard:
            info = shard.info()
        graph = self._policy.wants_graph(info.points_count)
        return self._policy.needs_build(graph, _segment_graphs(self._path),
                                        info.points_count, info.indexed_vectors_count)

    @property
    def searches_graph(self) -> bool:
        """Whether dense queries walk an HNSW graph (the shard's size reached the policy's
        ``hnsw_from`` when it was opened or last compacted), else they are exact."""
        return self._graph

    # -- writes ------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the segments; every run ends here. A run that leaves the shard past the
        policy's ``hnsw_from`` without its graph (or a tenth of its points outside it) compacts
        too, which builds the graph: minutes at a million points (bench/results/ann-1m.md)."""
        if self._graph_due():
            self.optimize()
        with self._engine("flush") as shard:
            shard.flush()
            self._flushed = time.monotonic()
        make_private(self._path)  # every run ends here: what the engine wrote, private

    def _written(self, shard: qe.EdgeShard) -> None:
        """After an update: flush the segments if the last flush is FLUSH_INTERVAL old.

        Every update is in the engine's write-ahead log as soon as ``update`` returns, and a
        killed process replays it on the next open (tests/index/test_vector_index_contract.py,
        ``test_edge_writes_survive_a_killed_process``), so a flush is not what makes a write
        survive a crash; it writes the segments and lets the log be truncated. One flush per
        update cost ~30 ms, about as much as embedding the document, so they are grouped;
        every ingest run ends with ``flush``, and ``close``, ``optimize`` and readers changes
        (``set_payload``) flush at once.
        """
        now = time.monotonic()
        if now - self._flushed >= FLUSH_INTERVAL:
            shard.flush()
            self._flushed = now

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        batches = [
            [_edge_point(p) for p in points[start : start + _UPSERT_BATCH]]
            for start in range(0, len(points), _UPSERT_BATCH)
        ]
        with self._engine("upsert points") as shard:
            for batch in batches:
                shard.update(qe.UpdateOperation.upsert_points(batch))
            self._written(shard)

    def delete_document(self, document_id: str, *, keep_version: str | None = None) -> None:
        must_not: list[qe.ConditionType] | None = (
            [_match_value("version", keep_version)] if keep_version is not None else None)
        doc_filter = qe.Filter(must=[_match_value("document_id", document_id)], must_not=must_not)
        with self._engine("delete points") as shard:
            shard.update(qe.UpdateOperation.delete_points_by_filter(doc_filter))
            self._written(shard)

    def delete_version(self, document_id: str, version: str) -> None:
        flt = qe.Filter(must=[_match_value("document_id", document_id),
                              _match_value("version", version)])
        with self._engine("delete points") as shard:
            shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            self._written(shard)

    def delete_points(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._engine("delete points") as shard:
            for start in range(0, len(ids), _UPSERT_BATCH):
                part: list[qe.PointId] = list(ids[start:start + _UPSERT_BATCH])
                shard.update(qe.UpdateOperation.delete_points(part))
            self._written(shard)

    def set_payload(self, document_id: str, payload: dict[str, Any]) -> None:
        doc_filter = qe.Filter(must=[_match_value("document_id", document_id)])
        with self._engine("set payload") as shard:
            shard.update(qe.UpdateOperation.set_payload_by_filter(doc_filter, payload))
            # Readers taken away must stay away, power loss or not: flushed at once.
            shard.flush()
            self._flushed = time.monotonic()

    # -- reads -------------------------------------------------------------------------------

    def search(
        self, query: list[float] | SparseVector, *, filter: IndexFilter, limit: int
    ) -> list[VectorHit]:
        return [_hit(p) for p in self._query(query, filter, limit, with_payload=True)]

    def rank(
        self, query: list[float] | SparseVector, *, filter: IndexFilter, limit: int
    ) -> list[ScoredId]:
        return [ScoredId(str(p.id), p.score)
                for p in self._query(query, filter, limit, with_payload=False)]

    def _query(self, query: list[float] | SparseVector, flt: IndexFilter, limit: int, *,
               with_payload: bool) -> list[qe.ScoredPoint]:
        if isinstance(query, SparseVector):
            if not query.indices:  # a query without terms matches nothing
                return []
            engine_query = qe.Query.Nearest(
                qe.SparseVector(query.indices, query.values), using=SPARSE
            )
            params = _EXACT
        else:
            engine_query = qe.Query.Nearest(list(query), using=DENSE)
            params = self._policy.search_params(self._graph, limit)
        engine_filter = _edge_filter(flt)
        request = qe.QueryRequest(limit=limit, query=engine_query, filter=engine_filter,
                                  params=params, with_payload=with_payload)
        with self._engine("search") as shard:
            hits = shard.query(request)
            if params is _EXACT or len(hits) >= limit:
                return hits
            # The graph's walk ran out before the filter let ``limit`` through (or fewer points
            # exist): asked again exactly, cheap when the filter admits few points.
            self.exact_fallbacks += 1
            return shard.query(qe.QueryRequest(limit=limit, query=engine_query,
                                               filter=engine_filter, params=_EXACT,
                                               with_payload=with_payload))

    def payloads(self, ids: Sequence[str]) -> dict[str, ChunkPayload]:
        if not ids:
            return {}
        wanted: list[qe.PointId] = [str(i) for i in ids]
        with self._engine("read payloads") as shard:
            records = shard.retrieve(wanted, with_payload=True, with_vector=False)
        return {str(r.id): _payload(r.id, r.payload) for r in records}

    def count(self, filter: IndexFilter | None = None) -> int:
        request = qe.CountRequest(exact=True, filter=_edge_filter(filter))
        with self._engine("count points") as shard:
            return shard.count(request)

    def point_ids(self, filter: IndexFilter) -> list[str]:
        flt = _edge_filter(filter)
        ids: list[str] = []
        offset = None
        with self._engine("scroll points") as shard:
            while True:
                records, offset = shard.scroll(
                    qe.ScrollRequest(
                        offset=offset,
                        limit=_SCROLL_PAGE,
                        filter=flt,
                        with_payload=False,
                        with_vector=False,
                    )
                )
                ids.extend(str(r.id) for r in records)
                if offset is None:
                    return ids


    def missing(self, ids: Sequence[str]) -> set[str]:
        wanted = [str(i) for i in ids]
        found: set[str] = set()
        with self._engine("look up points") as shard:
            for start in range(0, len(wanted), _SCROLL_PAGE * 10):
                part: list[qe.PointId] = list(wanted[start:start + _SCROLL_PAGE * 10])
                records = shard.retrieve(part, with_payload=False, with_vector=False)
                found.update(str(r.id) for r in records)
        return set(wanted) - found

    def scan(self) -> Iterator[tuple[str, str | None, str | None]]:
        for point_id, payload in self.scan_payloads(("document_id", "version")):
            yield point_id, payload.get("document_id"), payload.get("version")

    def scan_payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        offset = None
        while True:
            with self._engine("scroll points") as shard:
                records, offset = shard.scroll(qe.ScrollRequest(
                    offset=offset, limit=_SCAN_PAGE, with_payload=list(keys),
                    with_vector=False))
            for r in records:
                yield str(r.id), dict(r.payload or {})
            if offset is None:
                return


class EdgeIndexStore:
    """The generations of an embedded index (``index/generations.py``): the first one in
    ``path`` (``<data dir>/qdrant``), generation ``gN`` in the folder beside it named
    ``qdrant-gN``."""

    def __init__(self, path: Path, dim: int, policy: EdgeHnswPolicy | None = None) -> None:
        self.path = Path(path)
        self.dim = dim
        self.policy = policy

    def folder(self, generation: str) -> Path:
        return self.path if not generation else self.path.with_name(
            f"{self.path.name}-{generation}")

    def open(self, generation: str) -> EdgeVectorIndex:
        return EdgeVectorIndex(self.folder(generation), self.dim, self.policy)

    def drop(self, generation: str) -> bool:
        folder = self.folder(generation)
        if not folder.exists():
            return True
        try:
            # Taking the folder's lock proves that no process has it open.
            handle = _acquire_folder_lock(folder)
        except IndexLockedError:
            return False
        except FileNotFoundError:
            return True  # another process dropped it meanwhile
        try:
            shutil.rmtree(folder)
        except FileNotFoundError:
            pass  # the same, under our feet
        finally:
            handle.close()
        return True

    def names(self) -> list[str]:
        prefix = f"{self.path.name}-"
        found = [""] if self.path.is_dir() else []
        if self.path.parent.is_dir():
            found += sorted(name for p in self.path.parent.iterdir()
                            if p.is_dir() and p.name.startswith(prefix)
                            and is_generation(name := p.name.removeprefix(prefix)) and name)
        return found

    def describe(self, generation: str) -> str:
        return f"the embedded index at {self.folder(generation)}"

    def close(self) -> None:
        pass


DAMAGED_HINT = (
    "the index files are damaged: restore the data folder from a backup, or move the index "
    "folder aside and run `citewise ingest --all --force` to rebuild it (the embedding cache "
    "makes that mostly parsing)"
)


def _is_panic(exc: BaseException) -> bool:
    # pyo3 turns a Rust panic into pyo3_runtime.PanicException, a BaseException: it slips past
    # ``except Exception`` and would end the process with a Rust backtrace.
    return type(exc).__name__ == "PanicException"


def _engine_failure(exc: BaseException) -> bool:
    return isinstance(exc, Exception) or _is_panic(exc)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"the engine panicked ({text})" if _is_panic(exc) else text


def _acquire_folder_lock(path: Path) -> IO[str]:
    lock_path = path / LOCK_FILE
    # Held open: closing it drops the lock.
    handle = open(os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, FILE_MODE), "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        who = f" (pid {holder})" if holder else ""
        raise IndexLockedError(
            f"Another citewise process{who}, probably `citewise serve`, holds the embedded "
            f"index at {path}",
            hint="stop that process, or hand the work to it through its HTTP API, "
            "or run a Qdrant server and point every process at it with CITEWISE_QDRANT_URL",
        ) from None
    # The pid is only for the message above; the flock is what excludes.
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _stored_graph(marker: Path) -> tuple[int, int, int, bool] | None:
    """(m, ef_construct, full_scan_kb, quantized) of the config the engine stored, None if
    unreadable."""
    try:
        stored = json.loads(marker.read_text())
        hnsw = stored.get("hnsw_config") or {}
        return (int(hnsw.get("m", -1)), int(hnsw.get("ef_construct", -1)),
                int(hnsw.get("full_scan_threshold", -1)),
                bool(stored.get("quantization_config")))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def _segment_graphs(path: Path) -> set[tuple[int, bool]]:
    """(m, quantized) of each segment's dense HNSW index (m 0: no graph), from the engine's
    ``segment.json`` files (its info counts an m = 0 segment's vectors as indexed)."""
    found: set[tuple[int, bool]] = set()
    for seg in (path / "segments").glob("*/segment.json"):
        try:
            dense = json.loads(seg.read_text())["config"]["vector_data"][DENSE]
        except (OSError, ValueError, KeyError):
            continue  # a segment being written: the next flush sees it
        index = dense.get("index") or {}
        if index.get("type") == "hnsw":
            found.add((int((index.get("options") or {}).get("m", NO_GRAPH)),
                       bool(dense.get("quantization_config"))))
    return found


def _hit(point: qe.ScoredPoint) -> VectorHit:
    """A search result. The engine hands ids back as uuid.UUID whatever form they went in as."""
    return VectorHit(id=str(point.id), score=point.score,
                     payload=_payload(point.id, point.payload))


def _payload(point_id: object, payload: dict[str, Any] | None) -> ChunkPayload:
    # The engine types the payload optional (a read may leave it out; ours ask for it).
    if payload is None:
        raise BackendError(f"the embedded index returned point {point_id} without its payload")
    return ChunkPayload.from_payload(payload)


def _edge_point(point: ChunkPoint) -> qe.Point:
    vectors: dict[str, qe.NamedVector] = {
        DENSE: point.dense,
        SPARSE: qe.SparseVector(point.sparse.indices, point.sparse.values),
    }
    return qe.Point(id=point.id, vector=vectors, payload=point.payload.to_payload())


def _match_value(key: str, value: str) -> qe.FieldCondition:
    return qe.FieldCondition(key=key, match=qe.MatchValue(value))


def _match_any(key: str, values: list[str]) -> qe.FieldCondition:
    return qe.FieldCondition(key=key, match=qe.MatchAny(list(values)))


def _edge_filter(flt: IndexFilter | None) -> qe.Filter | None:
    """The engine filter for ``flt`` (see ``IndexFilter.conditions``): all in ``must``."""
    if flt is None or flt.is_empty():
        return None
    must: list[qe.ConditionType] = [
        _match_any(key, values) if kind == "any" else _match_value(key, values[0])
        for key, kind, values in flt.conditions()
    ]
    must_not: list[qe.ConditionType] | None = (
        [qe.HasIdCondition(set(flt.exclude_ids))] if flt.exclude_ids else None)
    return qe.Filter(must=must or None, must_not=must_not)
