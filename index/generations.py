"""Index generations: the live vector index, and the pointer that names it.

A *generation* is one complete build of the index: its chunk rows in the catalog and its vector
collection (an embedded engine's folder, a collection on a Qdrant server, or pgvector tables).
``citewise reindex`` (``ingest/reindex.py``) builds a new one beside the live one and then
switches the catalog over to it in one SQLite transaction, which also moves the pointer below.
Everything that reads the index goes through ``LiveIndex``, which follows the pointer: the
process that built the new generation, a server in another process, and any other reader of the
same catalog all move on the first call after the switch.

The pointer is the ``index_generation`` row of the catalog's ``meta`` table. Without it (an
index that was never rebuilt) the live generation is ``""``, stored where the settings say
(``<data dir>/qdrant`` or the collection ``CITEWISE_QDRANT_COLLECTION``); generation ``g2`` is
stored in ``<data dir>/qdrant-g2``, the collection ``<collection>-g2`` or the table
``chunk_vectors_g2`` (pgvector's first generation: ``chunk_vectors``), and so on.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from citewise.errors import BackendError
from citewise.index.catalog import DocumentCatalog
from citewise.index.payload import ChunkPayload
from citewise.index.vector_index import (
    ChunkPoint,
    IndexFilter,
    ScoredId,
    SparseVector,
    VectorHit,
    VectorIndex,
)

log = logging.getLogger("citewise.index")

# Rows of the catalog's ``meta`` table.
LIVE = "index_generation"  # the live generation's name ("" or absent: the first one)
BUILDING = "index_generation_building"  # JSON: the generation a reindex is building
SETTINGS = "index_settings"  # JSON: what the live generation was built with (by a reindex)
EMBEDDING_MODEL = "embedding_model"  # the live generation's embedding model
# JSON: where that model comes from, as the reindex that built the generation was configured
# ({"path": folder} or {"url": endpoint, "model": name}; never a key), so that a server started
# with the old model can load the new one at the switch.
EMBEDDING_SOURCE = "embedding_source"
# JSON: generations a switch retired whose storage may not be dropped yet (a server held it).
# Only these are ever dropped by a later reindex: a Qdrant server may hold collections of other
# installations under similar names.
RETIRED = "index_generations_retired"

_NAME = re.compile(r"^g(\d+)$")


def live_generation(catalog: DocumentCatalog) -> str:
    return catalog.meta(LIVE) or ""


def building_generation(catalog: DocumentCatalog) -> dict[str, Any] | None:
    """``{"name", "settings", "started_at"}`` of the generation a reindex is building (or left
    half-built when it was interrupted), else None."""
    text = catalog.meta(BUILDING)
    return json.loads(text) if text else None


def retired_generations(catalog: DocumentCatalog) -> list[str]:
    text = catalog.meta(RETIRED)
    return json.loads(text) if text else []


def live_settings(catalog: DocumentCatalog) -> dict[str, Any] | None:
    """The settings a reindex built the live generation with; None if no reindex did."""
    text = catalog.meta(SETTINGS)
    return json.loads(text) if text else None


def next_generation(*names: str) -> str:
    """A name after all of ``names`` ("" is the first generation, then g2, g3...)."""
    numbers = [int(m.group(1)) for n in names if (m := _NAME.match(n or ""))]
    return f"g{max([1, *numbers]) + 1}"


def is_generation(name: str) -> bool:
    return name == "" or bool(_NAME.match(name))


class IndexStore(Protocol):
    """Where one installation's generations live on one backend (folders or collections)."""

    def open(self, generation: str) -> VectorIndex:
        """The generation's index, created empty if it does not exist."""

    def drop(self, generation: str) -> bool:
        """Delete the generation's storage; False when another process holds it open (the
        embedded engine) and it was left for that process to drop."""

    def names(self) -> list[str]:
        """The generations that have storage now."""

    def describe(self, generation: str) -> str:
        """Where the generation is stored, for messages."""

    def close(self) -> None:
        """Release what the store holds (a server client)."""


@dataclass
class ModelChange:
    """The embedding model of a new generation, loaded beside the current one: ``commit`` makes
    the process embed with it (fast: the slow part, loading, is done)."""

    model_id: str
    dim: int
    commit: Callable[[], None]


@dataclass
class _Held:
    name: str
    index: VectorIndex
    users: int = 0
    retired: bool = False
    refused: tuple[str, str] | None = None  # why this process cannot search it, and a hint


class LiveIndex:
    """``VectorIndex`` over the live generation, switching when the catalog's pointer moves.

    Each call reads the pointer (one indexed row of a small table) and, when it names another
    generation, opens that one and retires the old: closed (and its storage dropped) once the
    last call using it has returned, so a search in flight finishes on the generation it began
    on. ``pinned`` keeps one generation for several calls (search's dense and BM25 queries);
    ``moved`` says whether the pointer has left it since.

    ``expected_model``: the embedding model this process embeds queries with. A generation built
    with another model cannot be searched with it: ``load_model`` (given the model's source
    that the reindex recorded, ``EMBEDDING_SOURCE``) loads that model before the switch, and
    the process embeds with it from the switch on. Without it, or when the model cannot be
    loaded here, calls fail with a message until the process is restarted with the new
    settings.
    """

    def __init__(self, catalog: DocumentCatalog, store: IndexStore, *,
                 expected_model: str | None = None,
                 load_model: Callable[[dict[str, Any]], ModelChange] | None = None) -> None:
        self.catalog = catalog
        self.store = store
        self.expected_model = expected_model
        self.load_model = load_model
        self._lock = threading.Lock()  # the current generation and its users: held briefly
        self._switching = threading.Lock()  # one switch at a time; searches never wait on it
        name = live_generation(catalog)
        self._current = _Held(name, store.open(name))
        self._closed = False

    @property
    def generation(self) -> str:
        """The generation this process serves now (the pointer may have moved since)."""
        return self._current.name

    def moved(self, generation: str | None) -> bool:
        """Whether the catalog's live generation is no longer ``generation``."""
        return generation is not None and live_generation(self.catalog) != generation

    @contextmanager
    def pinned(self, live: str | None = None) -> Iterator[tuple[str, VectorIndex]]:
        """``(generation, index)`` of the live generation, kept open until the block ends.
        ``live``: the pointer as the caller has just read it (``live_generation``), so that it
        is not read twice."""
        if (live_generation(self.catalog) if live is None else live) != self._current.name:
            self.follow()
        with self._lock:
            if self._closed:
                raise BackendError("the vector index is closed")
            held = self._current
            held.users += 1
        try:
            if held.refused is not None:
                raise BackendError(held.refused[0], hint=held.refused[1])
            yield held.name, held.index
        finally:
            with self._lock:
                held.users -= 1
                done = held.retired and held.users == 0
            if done:
                self._release(held)

    def follow(self) -> None:
        """Switch to the generation the pointer names, if it moved. Calls made meanwhile go on
        using the current one: opening the new generation, and closing and dropping the old
        (a folder of gigabytes, a collection on a server), happen outside the lock every call
        takes. ``citewise serve`` also calls this every few seconds (``follow_every``), so an
        idle server moves at once and no other process can take the new embedded folder."""
        with self._switching:
            name = live_generation(self.catalog)
            if self._closed or name == self._current.name:
                return
            refused = self._refusal(name)
            change = None
            if refused is not None:
                change, refused = self._new_model(name, refused)
                if change is not None:
                    self.store.dim = change.dim  # type: ignore[attr-defined]
            opened = self.store.open(name)
            current = _Held(name, opened, refused=refused)
            with self._lock:
                if change is not None:
                    # With the generation, in one step: a search pinned to the old one that
                    # embeds with the new model is asked again (``moved``), never mixed.
                    change.commit()
                    self.expected_model = change.model_id
                    log.warning("embedding questions with %r, the model generation %r was "
                                "built with", change.model_id, name)
                old, self._current = self._current, current
                old.retired = True
                release = old.users == 0  # else the last call using it releases it
            log.info("index generation %r is live (was %r): searching %s", name, old.name,
                     self.store.describe(name))
            if current.refused is not None:
                log.error("%s; %s", *current.refused)
        if release:
            self._release(old)

    def follow_every(self, seconds: float, stop: threading.Event) -> None:
        """Follow the pointer until ``stop`` is set (a thread of ``citewise serve``)."""
        while not stop.wait(seconds):
            try:
                self.follow()
            except Exception:
                log.exception("following the live index generation failed; retrying")

    def _release(self, held: _Held) -> None:
        """Close a retired generation and drop its storage (it can never be live again)."""
        try:
            held.index.close()
        except Exception:
            log.exception("closing the retired index generation %r failed", held.name)
        if held.name == live_generation(self.catalog):
            return  # never the case after a switch; a guard against dropping a live index
        try:
            if self.store.drop(held.name):
                log.info("dropped the retired index generation %r", held.name)
        except Exception:
            # Left for the next `citewise reindex`, which drops the generations switches
            # retired (``RETIRED``).
            log.exception("dropping the retired index generation %r failed", held.name)

    def _refusal(self, name: str) -> tuple[str, str] | None:
        """Why this process cannot search generation ``name``, if it cannot: the pointer and
        the model row move in one transaction, so the model row describes ``name``."""
        if self.expected_model is None:
            return None
        built_with = self.catalog.meta(EMBEDDING_MODEL)
        if built_with is not None and built_with != self.expected_model:
            return (f"the index was rebuilt (generation {name!r}) with the embedding model "
                    f"{built_with!r}, but this process embeds questions with "
                    f"{self.expected_model!r}",
                    "restart it with the settings `citewise reindex` was run with")
        return None

    def _new_model(self, name: str, refused: tuple[str, str]
                   ) -> tuple[ModelChange | None, tuple[str, str] | None]:
        """Load the model generation ``name`` was built with, where the reindex recorded where
        it comes from: (the change, None), or (None, why not)."""
        raw = self.catalog.meta(EMBEDDING_SOURCE)
        if self.load_model is None or not raw:
            return None, refused
        built_with = self.catalog.meta(EMBEDDING_MODEL)
        try:
            change = self.load_model(json.loads(raw))
        except Exception as e:
            log.exception("loading the embedding model of generation %r failed", name)
            return None, (f"{refused[0]}, and loading that model here failed ({e})",
                          refused[1])
        if change.model_id != built_with:
            return None, (f"{refused[0]}; the model its recorded source {raw} gives here is "
                          f"{change.model_id!r}", refused[1])
        log.info("loaded the embedding model %r of generation %r", change.model_id, name)
        return change, None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            current = self._current
        try:
            current.index.close()
        finally:
            self.store.close()

    # VectorIndex, each call on the live generation -------------------------------------------
    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        with self.pinned() as (_, index):
            index.upsert(points)

    def delete_document(self, document_id: str, *, keep_version: str | None = None) -> None:
        with self.pinned() as (_, index):
            index.delete_document(document_id, keep_version=keep_version)

    def set_payload(self, document_id: str, payload: dict[str, Any]) -> None:
        with self.pinned() as (_, index):
            index.set_payload(document_id, payload)

    def search(self, query: list[float] | SparseVector, *, filter: IndexFilter,
               limit: int) -> list[VectorHit]:
        with self.pinned() as (_, index):
            return index.search(query, filter=filter, limit=limit)

    def rank(self, query: list[float] | SparseVector, *, filter: IndexFilter,
             limit: int) -> list[ScoredId]:
        with self.pinned() as (_, index):
            return index.rank(query, filter=filter, limit=limit)

    def payloads(self, ids: Sequence[str]) -> dict[str, ChunkPayload]:
        with self.pinned() as (_, index):
            return index.payloads(ids)

    def count(self, filter: IndexFilter | None = None) -> int:
        with self.pinned() as (_, index):
            return index.count(filter)

    def point_ids(self, filter: IndexFilter) -> list[str]:
        with self.pinned() as (_, index):
            return index.point_ids(filter)

    def missing(self, ids: Sequence[str]) -> set[str]:
        with self.pinned() as (_, index):
            return index.missing(ids)

    def scan(self) -> Iterator[tuple[str, str | None, str | None]]:
        with self.pinned() as (_, index):
            yield from index.scan()

    def scan_payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        with self.pinned() as (_, index):
            yield from index.scan_payloads(keys)

    def delete_points(self, ids: Sequence[str]) -> None:
        with self.pinned() as (_, index):
            index.delete_points(ids)

    def delete_version(self, document_id: str, version: str) -> None:
        with self.pinned() as (_, index):
            index.delete_version(document_id, version)

    def flush(self) -> None:
        with self.pinned() as (_, index):
            index.flush()

    def optimize(self) -> None:
        with self.pinned() as (_, index):
            index.optimize()


@contextmanager
def pinned(index: VectorIndex, live: str | None = None,
           ) -> Iterator[tuple[str | None, VectorIndex]]:
    """``(generation, index)``: one generation for several calls when ``index`` follows a
    pointer (``LiveIndex``); ``(None, index)`` for a plain index. ``live``: the pointer as the
    caller has just read it, if it has."""
    if isinstance(index, LiveIndex):
        with index.pinned(live) as held:
            yield held
    else:
        yield None, index


def moved(index: VectorIndex, generation: str | None) -> bool:
    """Whether the live generation has changed since ``pinned`` gave ``generation``."""
    return isinstance(index, LiveIndex) and index.moved(generation)
