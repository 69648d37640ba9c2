"""Rebuilding the index beside the live one, then switching to it: ``citewise reindex``.

A new chunk size, embedding model or chunker version changes every document's chunks and
vectors. Re-indexing in place would mix old and new chunks in search for the length of the run
(and a model change would leave queries and documents in different vector spaces). Instead a new
*generation* (``index/generations.py``) is built while the live one keeps serving:

1. ``building``: the generation's name and target settings are recorded in the catalog's
   ``meta``; its chunk rows go to a catalog of its own (``index/staging.py``: with the
   embedded database, ``<data dir>/reindex/<name>/``) and its vectors to its own folder or
   collection.
2. ``build``: every document of the live catalog is chunked, embedded and written again from
   its stored bytes in the blob store (no source is read; the embedding cache answers for
   every chunk text embedded before), by the ingest pipeline itself, with its progress bars.
3. ``verify``: the new catalog holds exactly the live documents, and its vector index exactly
   its chunks, payloads included (``consistency.inspect``). A document that failed, or any
   disagreement, stops here: nothing is switched.
4. ``switch``: one catalog transaction replaces the live catalog's documents, chunks and
   outlines with the new ones and moves the pointer. Every ``LiveIndex`` (this process, a
   server in another) searches the new generation from its next call; a search in flight
   finishes on the old one, or starts again on the new one if it straddled the switch.
5. ``drop``: the old generation's storage is deleted (by the process that holds an embedded
   one open, once it has switched).

The caller holds the ingest run lock for all of it, so no ingest changes the live documents
meanwhile. A reindex killed at any point leaves the live generation serving as it was (nothing
of it changes before step 4, which is one transaction); the next ``citewise reindex`` resumes
the half-built generation when the settings are the same (documents already written are
skipped) and drops it otherwise.

``CITEWISE_TEST_CRASH_AT=reindex-verified`` (before the switch) or ``reindex-switched`` (after
it, before the drop) ends the process there, like the swap's steps (``swap.py``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from citewise.connectors.frontmatter import FrontMatterError, split_front_matter
from citewise.errors import CitewiseError, ConfigError, StoreUnavailableError
from citewise.index.blobs import BlobStore
from citewise.index.catalog import DocumentCatalog, DocumentRecord, now
from citewise.index.dense import DenseEncoder
from citewise.index.generations import (
    BUILDING,
    EMBEDDING_MODEL,
    EMBEDDING_SOURCE,
    LIVE,
    RETIRED,
    SETTINGS,
    IndexStore,
    building_generation,
    live_generation,
    live_settings,
    next_generation,
    retired_generations,
)
from citewise.index.source_store import SourceStore
from citewise.index.sparse import Bm25Encoder
from citewise.index.staging import CatalogStaging, StagedCatalog
from citewise.index.vector_index import VectorIndex
from citewise.ingest.chunking import Chunkers
from citewise.ingest.consistency import inspect
from citewise.ingest.pipeline import IngestPipeline
from citewise.ingest.progress import ProgressSink
from citewise.ingest.state import IndexSignature
from citewise.ingest.swap import crash_point
from citewise.types import SourceDocument

log = logging.getLogger("citewise.ingest")

# The findings of ``consistency.inspect`` about the index; the blob store is not rebuilt.
_INDEX_FINDINGS = ("open_swap", "orphan_point", "missing_point", "stale_payload")


@dataclass
class ReindexReport:
    status: str  # switched | up-to-date | failed
    generation: str  # the live generation afterwards
    previous: str  # the one live before
    built: str | None = None  # the generation built (or left half-built, when failed)
    model: str | None = None  # the embedding model it was built with
    resumed: bool = False  # a half-built generation was finished
    documents: int = 0
    chunks: int = 0
    chunks_embedded: int = 0
    build_seconds: float = 0.0
    switch_ms: float = 0.0  # the switch transaction
    dropped: list[str] = field(default_factory=list)  # generations whose storage was deleted
    # Generations another process still holds open (a server): it drops them once switched.
    left: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # documents that could not be rebuilt
    problems: list[str] = field(default_factory=list)  # what verification found

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Reindexer:
    """Builds a generation with the configured settings and switches to it (see the module)."""

    def __init__(self, *, catalog: DocumentCatalog, sources: SourceStore,
                 staging: CatalogStaging, blobs: BlobStore, dense: DenseEncoder,
                 sparse: Bm25Encoder, store: IndexStore, chunk_max_tokens: int,
                 data_dir: Path, parse_processes: int | None = None, drop_delay: float = 1.0,
                 min_free_bytes: int = 0,
                 embedding_source: dict[str, Any] | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.catalog = catalog
        self.sources = sources
        # Where the new generation's catalog is built (the composition root's choice).
        self.staging = staging
        self.blobs = blobs
        self.dense = dense
        self.sparse = sparse
        self.store = store
        self.chunk_max_tokens = chunk_max_tokens
        self.parse_processes = parse_processes  # as the pipeline's (None = by the model)
        self.data_dir = Path(data_dir)
        # Seconds between the switch and dropping the old generation: a server in another
        # process that is between reading the pointer and querying finishes first.
        self.drop_delay = drop_delay
        # The reserve an ingest run keeps free on the data folder's disk (``ingest/space.py``):
        # a rebuild writes a second index there.
        self.min_free_bytes = min_free_bytes
        # Where the model comes from (a folder, or an endpoint and model name), recorded at the
        # switch: a server started with the old model loads this one then (``LiveIndex``).
        self.embedding_source = embedding_source
        self.signature = IndexSignature(Chunkers(dense.count_tokens, chunk_max_tokens),
                                        dense.model_id, sparse.version)
        # Closes the catalog and sources when they are this reindexer's (their database, which
        # may be a pool that the stores themselves leave open); None: the caller's.
        self._release = release

    def close(self) -> None:
        if self._release is not None:
            self.store.close()
            self._release()

    # What there is to do ---------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The live generation and what it was built with, the configured settings, how many
        documents were indexed with others, and a half-built generation if there is one."""
        building = building_generation(self.catalog)
        if building is not None:
            building["documents_done"] = self.staging.documents(building["name"])
        stored = self.store.names()
        return {
            "live": live_generation(self.catalog),
            "live_settings": live_settings(self.catalog),
            "configured": self.signature.settings,
            "documents": self.catalog.count_documents(),
            "documents_with_other_settings": stale_documents(self.catalog, self.signature),
            "building": building,
            "stored": stored,
            "retired": [n for n in retired_generations(self.catalog) if n in stored],
        }

    def up_to_date(self) -> bool:
        built = live_settings(self.catalog)
        return (stale_documents(self.catalog, self.signature) == 0
                and (built is None or built == self.signature.settings)
                and self.catalog.meta(EMBEDDING_MODEL) in (None, self.dense.model_id))

    # The rebuild -----------------------------------------------------------------------------
    def run(self, *, force: bool = False,
            progress: Callable[[str], ProgressSink] | None = None) -> ReindexReport:
        """Build, verify, switch and drop. The caller holds the ingest run lock. ``force``
        rebuilds even when every document is indexed with the configured settings."""
        catalog = self.catalog
        open_swaps = catalog.pending_writes()
        if open_swaps:
            raise ConfigError(
                f"{len(open_swaps)} document swaps an interrupted ingest left open",
                hint="run `citewise verify --repair` (or the next ingest) first, then reindex")
        live = live_generation(catalog)
        target = self.signature.settings
        building = building_generation(catalog)
        if building is not None and building.get("settings") != target:
            log.warning("reindex: dropping the half-built generation %r (built with other "
                        "settings)", building["name"])
            self._discard(building["name"])
            building = None
        report = ReindexReport(status="up-to-date", generation=live, previous=live)
        if building is None and not force and self.up_to_date():
            self._clean_up(live, None, report)
            return report
        if building is None:
            name = next_generation(live, *self.store.names())
            catalog.set_meta(BUILDING, json.dumps(
                {"name": name, "settings": target, "started_at": now()}))
        else:
            name, report.resumed = building["name"], True
            log.info("reindex: resuming the half-built generation %r", name)
        report.built, report.model = name, self.dense.model_id
        self._clean_up(live, name, report)
        started = time.monotonic()
        staged = self.staging.open(name)
        index = self.store.open(name)
        try:
            self._build(staged, index, report, progress)
            report.build_seconds = round(time.monotonic() - started, 2)
            if report.failures:
                report.status = "failed"
                return report
            report.problems = self._verify(staged, index)
            if report.problems:
                report.status = "failed"
                return report
            crash_point("reindex-verified")
            index.flush()
        finally:
            index.close()
            staged.close()
        switch_started = time.perf_counter()
        retired = sorted({*retired_generations(catalog), live})
        catalog.switch_generation(staged.catalog, {
            LIVE: name, BUILDING: "", EMBEDDING_MODEL: self.dense.model_id,
            EMBEDDING_SOURCE: json.dumps(self.embedding_source or {}),
            SETTINGS: json.dumps(target), RETIRED: json.dumps(retired)})
        report.switch_ms = round((time.perf_counter() - switch_started) * 1000, 1)
        report.status, report.generation = "switched", name
        log.info("reindex: generation %r is live (was %r); switched in %.1f ms", name, live,
                 report.switch_ms)
        crash_point("reindex-switched")
        self.staging.discard()
        if self.drop_delay:
            time.sleep(self.drop_delay)
        self._clean_up(name, None, report)
        return report

    def _build(self, staged: StagedCatalog, index: VectorIndex, report: ReindexReport,
               progress: Callable[[str], ProgressSink] | None) -> None:
        pipeline = IngestPipeline(catalog=staged.catalog, sources=staged.sources, index=index,
                                  blobs=self.blobs,
                                  dense=self.dense, sparse=self.sparse,
                                  chunk_max_tokens=self.chunk_max_tokens,
                                  parse_processes=self.parse_processes, work_dir=self.data_dir,
                                  min_free_bytes=self.min_free_bytes)
        live = self.sources.list_sources()
        known = {source.name for source in live}
        # A source removed since a resumed build began: its staged documents go too.
        gone = [source for source in staged.sources.list_sources() if source.name not in known]
        for source in live + gone:
            records = list(self.catalog.documents_of_source(source.name).values())
            if not records and not staged.catalog.documents_of_source(source.name):
                continue
            # The live catalog is the truth: a resumed build whose source shrank (or emptied)
            # since it began follows it, mass-deletion brake off (``force``).
            run = pipeline.run(
                source.name, source.type, StoredDocuments(records, self.blobs),
                config=source.config, trigger="reindex", force=True,
                progress=progress(source.name) if progress else None)
            report.chunks_embedded += run.counts.chunks_embedded
            report.failures += [f"{source.name}/{ext}: {error}" for ext, error in run.errors]
            if run.status not in ("succeeded", "partial"):
                report.failures.append(f"{source.name}: {run.message or run.status}")
        report.documents = staged.catalog.count_documents()
        report.chunks = staged.catalog.count_chunks()

    def _verify(self, staged: StagedCatalog, index: VectorIndex) -> list[str]:
        """What stops the switch: documents the new catalog lacks or holds in another version
        of their bytes, and any disagreement between it and its vector index."""
        ours = self.catalog.content_hashes()
        theirs = staged.catalog.content_hashes()
        problems = [f"document {d} is not in the rebuilt index" for d in sorted(set(ours) - set(
            theirs))]
        problems += [f"document {d} is in the rebuilt index but no longer live"
                     for d in sorted(set(theirs) - set(ours))]
        problems += [f"document {d} was rebuilt from other bytes than the live version's"
                     for d in sorted(set(ours) & set(theirs)) if ours[d] != theirs[d]]
        problems += [f.text for f in inspect(staged.catalog, index, self.blobs)
                     if f.kind in _INDEX_FINDINGS]
        return problems

    # Storage of other generations ------------------------------------------------------------
    def _clean_up(self, live: str, building: str | None, report: ReindexReport) -> None:
        """Drop the generations switches retired (the one just replaced, one a reindex killed
        after its switch left, one a server held), and staging folders of no build."""
        stored = set(self.store.names())
        left = []
        for name in retired_generations(self.catalog):
            if name in (live, building):
                continue
            if name in stored:
                self._drop(name, report)
                if name in report.left:
                    left.append(name)
            else:  # dropped by the server that held it
                report.dropped.append(name)
        self.catalog.set_meta(RETIRED, json.dumps(left))
        self.staging.discard(keep=building)

    def _drop(self, name: str, report: ReindexReport) -> None:
        try:
            dropped = self.store.drop(name)
        except (CitewiseError, OSError) as e:  # the server may be dropping it at the same time
            log.warning("reindex: could not drop the old generation %r: %s", name, e)
            report.left.append(name)
            return
        (report.dropped if dropped else report.left).append(name)


    def _discard(self, name: str) -> None:
        self.store.drop(name)
        self.staging.discard()
        self.catalog.set_meta(BUILDING, "")


class StoredDocuments:
    """A load connector over catalog documents, read back from the blob store: what the
    pipeline needs to chunk them again without their source."""

    source_type: ClassVar[str] = "stored"  # the run names each source's own type

    def __init__(self, records: list[DocumentRecord], blobs: BlobStore) -> None:
        self.records = records
        self.blobs = blobs

    def count(self) -> int:
        return len(self.records)

    def load(self, batch_size: int = 32) -> Iterator[list[SourceDocument]]:
        for start in range(0, len(self.records), batch_size):
            yield [self.document(r) for r in self.records[start:start + batch_size]]

    def document(self, record: DocumentRecord) -> SourceDocument:
        # Everything but the content comes from the catalog, as the source's last run gave it
        # (the chunks flagged as injections are found again, among the new chunks).
        doc = SourceDocument(
            external_id=record.external_id, title=record.title, content=b"",
            media_type=record.media_type, path=record.path, url=record.url,
            link_template=record.link_template, readers=list(record.readers),
            metadata=dict(record.metadata), tags=list(record.tags),
            updated_at=datetime.fromisoformat(record.updated_at) if record.updated_at else None)
        try:
            doc.content = self.blobs.get(record.blob_key)
        except KeyError:
            doc.error = (f"its stored copy ({record.blob_key}) is missing: run the source's "
                         "ingest (it reads it again), then reindex")
            return doc
        except StoreUnavailableError:
            raise  # the blob store is down: the rebuild stops (and resumes), not each document
        except CitewiseError as e:
            doc.error = f"its stored copy could not be read: {e}"
            return doc
        try:
            doc.body, doc.body_line_offset = stored_body(doc.content, record)
        except UnicodeDecodeError as e:
            doc.error = f"its stored copy is not UTF-8 text (byte {e.start})"
        return doc


def stored_body(content: bytes, record: DocumentRecord) -> tuple[str, int]:
    """The text the connector handed the chunker, and how many lines of the stored bytes
    precede it (front matter): every connector's body is its decoded bytes less those lines.
    Documents written before the catalog recorded the count get the folder connector's
    reading (front matter of Markdown and text files)."""
    text = content.decode("utf-8-sig")
    offset = record.body_line_offset
    if offset is None:
        if record.media_type not in ("text/markdown", "text/plain"):
            return text, 0
        try:
            _, body, offset = split_front_matter(text)
        except FrontMatterError:
            return text, 0
        return body, offset
    if not offset:
        return text, 0
    lines = text.split("\n", offset)
    return (lines[offset] if len(lines) > offset else ""), offset


def stale_documents(catalog: DocumentCatalog, signature: IndexSignature) -> int:
    """How many documents were indexed with settings other than ``signature``'s."""
    return sum(n for media_type, indexed, n in catalog.signature_counts()
               if indexed != signature(media_type))


def check_index_settings(catalog: DocumentCatalog, signature: IndexSignature) -> None:
    """Refuse an ingest run whose settings differ from those `citewise reindex` built the live
    index with: it would re-index every document in place, undoing the rebuild one document at
    a time (a server started before the reindex still has the old settings). An index no
    reindex built keeps the older behaviour: changed documents are re-indexed in place."""
    built = live_settings(catalog)
    if built is None or built == signature.settings:
        return
    changed = ", ".join(f"{key} {built.get(key)!r} -> {value!r}"
                        for key, value in signature.settings.items() if built.get(key) != value)
    raise ConfigError(
        f"the live index (generation {live_generation(catalog)!r}) was built by `citewise "
        f"reindex` with other settings than this process has ({changed}); an ingest now would "
        "re-index every document in place",
        hint="run `citewise reindex` to rebuild with these settings beside the live index, or "
             "restart this process (a server started before the reindex) with the settings "
             "the index was built with")

