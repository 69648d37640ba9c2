"""The vector index contract: one small interface, three backends.

``EdgeVectorIndex`` (``qdrant_edge_index.py``) embeds Qdrant's engine in-process and is the default;
``ServerVectorIndex`` (``qdrant_server_index.py``) talks to a Qdrant server or cluster through
qdrant-client; ``PgvectorIndex`` (``pgvector_index.py``) keeps the points in PostgreSQL tables
with pgvector. The same contract tests (tests/index/test_vector_index_contract.py) run on all three.

Every point is one chunk, with two named vectors (dense, and BM25 term weights to which the
engine applies the IDF) and a ``ChunkPayload`` (``index/payload.py``). A search asks for one of
the two vectors; hybrid search is two of them, fused by ``retrieval.fusion`` so that every
backend ranks the same. It asks each list for ids and scores only (``rank``) and reads the
payloads of the fused page alone (``payloads``): carrying a hundred chunk texts out of the
engine to keep twenty cost more than the BM25 query itself (bench/results/profile-before.md).
The permission filter (``readers``) and every search filter are applied *inside* each engine
query, so a caller can never receive a point it may not read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from citewise.index.payload import ChunkPayload

DENSE = "dense"
SPARSE = "bm25"



@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]


@dataclass
class ChunkPoint:
    """A point to upsert. ``id`` is a UUID string derived from the chunk (deterministic)."""

    id: str
    dense: list[float]
    sparse: SparseVector
    payload: ChunkPayload


@dataclass
class IndexFilter:
    """Conditions ANDed together; each list is "any of". ``readers`` is mandatory for search."""

    readers: list[str] | None = None
    sources: list[str] = field(default_factory=list)
    path_prefix: str | None = None  # matched against payload ``path_prefixes``
    tags: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    document_ids: list[str] = field(default_factory=list)
    # Points that must not come back whatever they match: those of a document swap in progress
    # (see ``catalog.PendingWrite``), so stale versions never take a result's place.
    exclude_ids: list[str] = field(default_factory=list)

    def conditions(self) -> list[tuple[str, str, list[str]]]:
        """The filter as ``(payload key, "any" | "value", values)`` triples, ANDed.

        Both backends build their engine's filter objects from this one list, so a filter means
        the same on each. ``readers=[]`` stays a condition: matching any of nothing matches
        nothing, which is right for a caller without principals.
        """
        out: list[tuple[str, str, list[str]]] = []
        if self.readers is not None:
            out.append(("readers", "any", list(self.readers)))
        if self.sources:
            out.append(("source", "any", list(self.sources)))
        if self.path_prefix:
            # ``path_prefixes`` holds every ancestor folder and the path itself, so matching
            # one element is a prefix match on folder boundaries ("eng/run" misses "eng/runbooks").
            out.append(("path_prefixes", "value", [self.path_prefix]))
        if self.tags:
            out.append(("tags", "any", list(self.tags)))
        if self.services:
            out.append(("service", "any", list(self.services)))
        if self.document_ids:
            out.append(("document_id", "any", list(self.document_ids)))
        return out

    def is_empty(self) -> bool:
        return not (
            self.exclude_ids
            or self.readers is not None
            or self.sources
            or self.path_prefix
            or self.tags
            or self.services
            or self.document_ids
        )


@dataclass(frozen=True)
class ScoredId:
    """A point that matched a query, without its payload (``VectorIndex.rank``)."""

    id: str
    score: float


@dataclass
class VectorHit:
    id: str
    score: float
    payload: ChunkPayload


class VectorIndex(Protocol):
    """What ingest and retrieval need from a vector store. Implementations are thread-safe."""

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        """Insert or overwrite points by id (re-upserting the same chunk never duplicates it)."""

    def delete_document(self, document_id: str, *, keep_version: str | None = None) -> None:
        """Delete the document's points; with ``keep_version``, only those of other versions."""

    def set_payload(self, document_id: str, payload: dict[str, Any]) -> None:
        """Overwrite the given payload keys on every point of the document (readers changes)."""

    def search(
        self, query: list[float] | SparseVector, *, filter: IndexFilter, limit: int
    ) -> list[VectorHit]:
        """Best points first: nearest by the dense vector for a list of floats, by BM25 for a
        ``SparseVector`` (an empty one matches nothing)."""

    def rank(
        self, query: list[float] | SparseVector, *, filter: IndexFilter, limit: int
    ) -> list[ScoredId]:
        """``search`` without the payloads: the same points, scores and order."""

    def payloads(self, ids: Sequence[str]) -> dict[str, ChunkPayload]:
        """The payloads of the points among ``ids``, by id; a point that no longer exists (a
        document deleted since it was ranked) is left out. No filter: the ids come from a
        ``rank`` whose filter held the caller's readers."""

    def count(self, filter: IndexFilter | None = None) -> int:
        """Number of points matching the filter (all points without one)."""

    def point_ids(self, filter: IndexFilter) -> list[str]:
        """Ids of every point matching the filter (scrolls to the end)."""

    def missing(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` have no point."""

    def scan(self) -> Iterator[tuple[str, str | None, str | None]]:
        """Every point as ``(id, document_id, version)``: for checking the index against the
        catalog."""

    def scan_payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every point as ``(id, {key: value})`` for the payload ``keys``: for checking that
        each point says what the catalog says (readers, version, text)."""

    def delete_points(self, ids: Sequence[str]) -> None:
        """Delete points by id (absent ids are ignored)."""

    def delete_version(self, document_id: str, version: str) -> None:
        """Delete the points of one version of a document."""

    def flush(self) -> None:
        """Make every write so far durable on disk (an embedded engine groups its flushes;
        a server makes its writes durable itself)."""

    def optimize(self) -> None:
        """Compact storage after updates and deletes, and bring the engine's statistics (the
        BM25 IDF) up to date with them: deleted points must stop shaping scores."""

    def close(self) -> None:
        """Flush and release the storage (the embedded engine's lock, the client's sockets)."""
