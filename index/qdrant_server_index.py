"""The vector index on a Qdrant server or cluster, through qdrant-client.

Use it when more than one process must reach the index (the embedded engine allows one), or the
corpus outgrows one machine. qdrant-client's local mode (``QdrantClient(path=...)``) speaks the
same API and stands in for a server in tests.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from citewise.errors import BackendError, ConfigError, StoreUnavailableError
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

# Keeps each request well under the server's default 32 MiB body limit.
_UPSERT_BATCH = 256
_SCROLL_PAGE = 100


class ServerVectorIndex:
    """``VectorIndex`` over one collection of a Qdrant server.

    No lock of our own: the HTTP client is thread-safe and the server orders writes, so requests
    from several threads run side by side.
    """

    def __init__(
        self, client: QdrantClient, collection: str, dim: int, *, url: str | None = None,
        owns_client: bool = True,
    ) -> None:
        self._client = client
        self._collection = collection
        self._dim = dim
        # A store's generations share its client (``ServerIndexStore``), which closes it.
        self._owns_client = owns_client
        # Error messages name the server when we know its address.
        self._where = f"Qdrant at {url}" if url else "Qdrant"
        self._ensure_collection()

    @classmethod
    def from_url(
        cls,
        url: str,
        api_key: str | None,
        collection: str,
        dim: int,
        timeout: float | None = None,
    ) -> ServerVectorIndex:
        """Connect to ``url``; ``local:<folder>`` opens qdrant-client's local mode instead.

        Local mode is a pure-Python engine with the server's API: slow beyond ~20k points, but
        it exercises exactly the code path a server deployment uses (the tests rely on it).
        """
        if url.startswith("local:"):
            client = QdrantClient(path=url.removeprefix("local:"))
        else:
            client = QdrantClient(url=url, api_key=api_key, timeout=_whole_seconds(timeout))
        return cls(client, collection, dim, url=url)

    @contextmanager
    def _request(self, action: str) -> Iterator[None]:
        """Turn client and transport failures into ``BackendError``."""
        try:
            yield
        except ResponseHandlingException as exc:
            # The client wraps connection errors and timeouts in this one type. A server that
            # does not answer takes no writes at all: an ingest run stops at once
            # (``StoreUnavailableError``) rather than fail every document in turn.
            raise StoreUnavailableError(
                f"{self._where} is unreachable ({action}): {exc.source}",
                hint="check that the server is running and CITEWISE_QDRANT_URL points at it",
            ) from exc
        except UnexpectedResponse as exc:
            detail = exc.content.decode(errors="replace")[:300]
            raise BackendError(
                f"{self._where} refused to {action} in collection {self._collection!r}: "
                f"HTTP {exc.status_code} {detail}",
                hint="check the Qdrant API key citewise is configured with"
                if exc.status_code in (401, 403)
                else None,
            ) from exc
        except ValueError as exc:
            # qdrant-client's local mode (tests) says so of a collection dropped meanwhile; a
            # server answers 404, above.
            if "not found" not in str(exc):
                raise
            raise BackendError(f"{self._where} could not {action}: {exc}") from exc
        except FileNotFoundError as exc:
            # The same in local mode, when the collection's files go while it reads them.
            raise BackendError(f"{self._where} could not {action}: the collection's storage "
                               f"is gone ({exc})") from exc
        except grpc.RpcError as exc:  # a client built with prefer_grpc=True
            # Only an RpcError that is also a Call (what a failed call raises) has a status
            # code. types-grpcio gives RpcError itself a code() and calls the two classes
            # incompatible, which would make an `if isinstance(...)` unreachable to mypy.
            is_call = isinstance(exc, grpc.Call)
            code = exc.code() if is_call else None
            if code == grpc.StatusCode.UNAVAILABLE:
                raise StoreUnavailableError(f"{self._where} is unreachable ({action}): {exc}",
                                            hint="check that the server is running and "
                                                 "CITEWISE_QDRANT_URL points at it") from exc
            raise BackendError(f"{self._where} failed to {action}: {code} {exc}") from exc

    # -- collection setup --------------------------------------------------------------------

    def _ensure_collection(self) -> None:
        with self._request("open the collection"):
            if not self._client.collection_exists(self._collection):
                self._client.create_collection(
                    self._collection,
                    vectors_config={
                        DENSE: models.VectorParams(size=self._dim, distance=models.Distance.COSINE)
                    },
                    # Our encoder stores BM25 term frequencies; the server applies the IDF.
                    sparse_vectors_config={
                        SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                    },
                )
            info = self._client.get_collection(self._collection)
            self._check_config(info.config.params)
            # Local mode reports no payload schema and ignores these indexes; a server keeps them.
            for name in INDEXED_FIELDS:
                if name not in (info.payload_schema or {}):
                    self._client.create_payload_index(
                        self._collection, name, models.PayloadSchemaType.KEYWORD, wait=True
                    )

    def _check_config(self, params: models.CollectionParams) -> None:
        hint = "use the embedding model the collection was built with, or another collection"
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        dense = vectors.get(DENSE)
        if dense is None:
            raise ConfigError(
                f"Collection {self._collection!r} on {self._where} has no dense vector named "
                f"{DENSE!r}; it was not created by citewise",
                hint=hint,
            )
        if dense.size != self._dim:
            raise ConfigError(
                f"Collection {self._collection!r} on {self._where} stores {dense.size}-dimension "
                f"vectors but the embedding model produces {self._dim}",
                hint=hint,
            )
        sparse = (params.sparse_vectors or {}).get(SPARSE)
        if sparse is None or sparse.modifier != models.Modifier.IDF:
            raise ConfigError(
                f"Collection {self._collection!r} on {self._where} lacks the sparse vector "
                f"{SPARSE!r} with the IDF modifier that BM25 scoring needs",
                hint=hint,
            )

    def optimize(self) -> None:
        """Nothing to do: a Qdrant server runs its optimizers in the background."""

    def close(self) -> None:
        if not self._owns_client:
            return
        with self._request("close the connection"):
            self._client.close()

    # -- writes ------------------------------------------------------------------------------

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        with self._request("upsert points"):
            for start in range(0, len(points), _UPSERT_BATCH):
                batch = [_point_struct(p) for p in points[start : start + _UPSERT_BATCH]]
                self._client.upsert(self._collection, points=batch, wait=True)

    def delete_document(self, document_id: str, *, keep_version: str | None = None) -> None:
        must_not: list[models.Condition] | None = (
            [_match_value("version", keep_version)] if keep_version is not None else None)
        doc_filter = models.Filter(
            must=[_match_value("document_id", document_id)], must_not=must_not
        )
        with self._request("delete points"):
            self._client.delete(
                self._collection,
                points_selector=models.FilterSelector(filter=doc_filter),
                wait=True,
            )

    def delete_version(self, document_id: str, version: str) -> None:
        flt = models.Filter(must=[_match_value("document_id", document_id),
                                  _match_value("version", version)])
        with self._request("delete points"):
            self._client.delete(self._collection,
                                points_selector=models.FilterSelector(filter=flt), wait=True)

    def delete_points(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        with self._request("delete points"):
            for start in range(0, len(ids), _UPSERT_BATCH):
                part: list[models.ExtendedPointId] = list(ids[start:start + _UPSERT_BATCH])
                self._client.delete(self._collection,
                                    points_selector=models.PointIdsList(points=part), wait=True)

    def set_payload(self, document_id: str, payload: dict[str, Any]) -> None:
        doc_filter = models.Filter(must=[_match_value("document_id", document_id)])
        with self._request("set payload"):
            self._client.set_payload(
                self._collection,
                payload=payload,
                points=models.FilterSelector(filter=doc_filter),
                wait=True,
            )

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
               with_payload: bool) -> list[models.ScoredPoint]:
        if isinstance(query, SparseVector):
            if not query.indices:  # a query without terms matches nothing
                return []
            using = SPARSE
            engine_query: list[float] | models.SparseVector = models.SparseVector(
                indices=query.indices, values=query.values
            )
        else:
            using, engine_query = DENSE, list(query)
        with self._request("search"):
            response = self._client.query_points(
                self._collection,
                query=engine_query,
                using=using,
                query_filter=_server_filter(flt),
                limit=limit,
                with_payload=with_payload,
            )
        return response.points

    def payloads(self, ids: Sequence[str]) -> dict[str, ChunkPayload]:
        if not ids:
            return {}
        with self._request("read payloads"):
            records = self._client.retrieve(self._collection, ids=list(ids),
                                            with_payload=True, with_vectors=False)
        return {str(r.id): _payload(r.id, r.payload) for r in records}

    def count(self, filter: IndexFilter | None = None) -> int:
        with self._request("count points"):
            result = self._client.count(
                self._collection, count_filter=_server_filter(filter), exact=True
            )
        return result.count

    def point_ids(self, filter: IndexFilter) -> list[str]:
        flt = _server_filter(filter)
        ids: list[str] = []
        offset: models.ExtendedPointId | None = None
        with self._request("scroll points"):
            while True:
                records, offset = self._client.scroll(
                    self._collection,
                    scroll_filter=flt,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=False,
                    with_vectors=False,
                )
                ids.extend(str(r.id) for r in records)
                if offset is None:
                    return ids


    def missing(self, ids: Sequence[str]) -> set[str]:
        wanted = [str(i) for i in ids]
        found: set[str] = set()
        with self._request("look up points"):
            for start in range(0, len(wanted), 1000):
                records = self._client.retrieve(self._collection, wanted[start:start + 1000],
                                                with_payload=False, with_vectors=False)
                found.update(str(r.id) for r in records)
        return set(wanted) - found

    def flush(self) -> None:
        """The server makes each acknowledged write durable (its own WAL): nothing to do."""

    def scan(self) -> Iterator[tuple[str, str | None, str | None]]:
        for point_id, payload in self.scan_payloads(("document_id", "version")):
            yield point_id, payload.get("document_id"), payload.get("version")

    def scan_payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        offset: models.ExtendedPointId | None = None
        while True:
            with self._request("scroll points"):
                records, offset = self._client.scroll(
                    self._collection, limit=1000, offset=offset,
                    with_payload=list(keys), with_vectors=False)
            for r in records:
                yield str(r.id), dict(r.payload or {})
            if offset is None:
                return


class ServerIndexStore:
    """The generations of an index on a Qdrant server (``index/generations.py``): the first
    one in ``collection``, generation ``gN`` in the collection ``<collection>-gN``. One client
    serves them all (qdrant-client's local mode also admits one client per folder)."""

    def __init__(self, client: QdrantClient, collection: str, dim: int, *,
                 url: str | None = None) -> None:
        self._client = client
        self.collection = collection
        self.dim = dim
        self._url = url
        self._where = f"Qdrant at {url}" if url else "Qdrant"
        # Local mode's bookkeeping (its meta.json, rewritten through one temporary file) is not
        # safe to race: opening a generation (which may create it and its payload indexes) and
        # dropping one take turns in this process. The reindex and the live index that retired
        # a generation may both drop it, while searches open the new one.
        self._meta = threading.Lock()

    @classmethod
    def from_url(cls, url: str, api_key: str | None, collection: str, dim: int,
                 timeout: float | None = None) -> ServerIndexStore:
        """Like ``ServerVectorIndex.from_url`` (``local:<folder>``: qdrant-client's local mode)."""
        if url.startswith("local:"):
            client = QdrantClient(path=url.removeprefix("local:"))
        else:
            client = QdrantClient(url=url, api_key=api_key, timeout=_whole_seconds(timeout))
        return cls(client, collection, dim, url=url)

    def name(self, generation: str) -> str:
        return f"{self.collection}-{generation}" if generation else self.collection

    def open(self, generation: str) -> ServerVectorIndex:
        with self._meta:
            return ServerVectorIndex(self._client, self.name(generation), self.dim,
                                     url=self._url, owns_client=False)

    def drop(self, generation: str) -> bool:
        with self._meta:
            return self._drop(generation)

    def _drop(self, generation: str) -> bool:
        try:
            if self._client.collection_exists(self.name(generation)):
                self._client.delete_collection(self.name(generation))
        except (ResponseHandlingException, UnexpectedResponse, grpc.RpcError) as exc:
            raise BackendError(f"{self._where} refused to delete the collection "
                               f"{self.name(generation)!r}: {exc}") from exc
        return True

    def names(self) -> list[str]:
        try:
            collections = [c.name for c in self._client.get_collections().collections]
        except (ResponseHandlingException, UnexpectedResponse, grpc.RpcError) as exc:
            raise BackendError(f"{self._where} did not list its collections: {exc}") from exc
        prefix = f"{self.collection}-"
        return sorted(("" if c == self.collection else c.removeprefix(prefix))
                      for c in collections
                      if c == self.collection
                      or (c.startswith(prefix) and c != prefix
                          and is_generation(c.removeprefix(prefix))))

    def describe(self, generation: str) -> str:
        return f"collection {self.name(generation)!r} on {self._where}"

    def close(self) -> None:
        try:
            self._client.close()
        except (ResponseHandlingException, UnexpectedResponse, grpc.RpcError):
            pass


def _whole_seconds(timeout: float | None) -> int:
    """qdrant-client's timeout: whole seconds, rounded up (a sub-second setting truncated to 0
    failed every request), 10 when unset."""
    return math.ceil(timeout) if timeout else 10


def _point_struct(point: ChunkPoint) -> models.PointStruct:
    sparse = models.SparseVector(indices=point.sparse.indices, values=point.sparse.values)
    return models.PointStruct(
        id=point.id, vector={DENSE: point.dense, SPARSE: sparse}, payload=point.payload.to_payload()
    )


def _match_value(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_any(key: str, values: list[str]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _hit(point: models.ScoredPoint) -> VectorHit:
    return VectorHit(id=str(point.id), score=point.score,
                     payload=_payload(point.id, point.payload))


def _payload(point_id: object, payload: dict[str, Any] | None) -> ChunkPayload:
    # The client types the payload optional (a read may leave it out; ours ask for it).
    if payload is None:
        raise BackendError(f"the Qdrant server returned point {point_id} without its payload")
    return ChunkPayload.from_payload(payload)


def _server_filter(flt: IndexFilter | None) -> models.Filter | None:
    """The engine filter for ``flt`` (see ``IndexFilter.conditions``): all in ``must``."""
    if flt is None or flt.is_empty():
        return None
    must: list[models.Condition] = [
        _match_any(key, values) if kind == "any" else _match_value(key, values[0])
        for key, kind, values in flt.conditions()
    ]
    must_not: list[models.Condition] | None = (
        [models.HasIdCondition(has_id=list(flt.exclude_ids))] if flt.exclude_ids else None
    )
    return models.Filter(must=must or None, must_not=must_not)
