"""The ingestion pipeline: source documents in, live chunks out. Incremental and crash-safe.

For each document the connector yields:

* **unchanged** (same content hash, same index signature): nothing is parsed or embedded; a
  readers-only change is written to the index payload, then to the catalog.
* **new or changed**: parse, chunk, embed (the chunks of a window of documents together,
  length-sorted, through the embedding cache), then swap versions in three steps:

  1. upsert the new version's points (ids derive from document, version and position);
  2. flip the catalog row to the new version (one SQLite transaction);
  3. delete the points of every other version.

  Retrieval drops hits whose version is not the catalog's current one, so between any two
  steps a reader sees the old chunks or the new ones, never both and never none. A crash
  between steps leaves stale points that retrieval ignores; the next run after an interrupted
  one sweeps them.
* **gone from the source** (only decided after a complete listing): points, then catalog row,
  then the blob if no other document shares it.

A document that fails (unreadable, unparseable) is recorded with its error; its previously
indexed version stays live, and the run goes on.

What changed is decided by ``ingest/state.py``: whether a document is the version already
indexed, and, for connectors that can say what changed (``SyncConnector``: git, Confluence), the
``SyncRequest`` built from the source's stored state (the cursor of the last finished run, the
checkpoint of an unfinished one, the ids that failed last time). Checkpoints are stored after
each batch is written; the cursor only when the run finishes, so a failed run is retried from
where the last good one ended, never skipped.

Every document goes through secret redaction before it is hashed, stored or chunked.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np

from citewise import metrics
from citewise.connectors.base import LoadConnector, SyncConnector, SyncError
from citewise.errors import (
    CitewiseError,
    DiskFullError,
    SourceError,
    StoreUnavailableError,
)
from citewise.index.blobs import BlobStore, blob_key
from citewise.index.catalog import (
    DocumentCatalog,
    DocumentRecord,
    chunk_point_id,
    document_id,
    now,
)
from citewise.index.dense import DenseEncoder, embedding_text
from citewise.index.outline import Outline
from citewise.index.payload import ChunkPayload, DocumentPayload
from citewise.index.source_store import RunCounts, SourceStore
from citewise.index.sparse import Bm25Encoder
from citewise.index.vector_index import ChunkPoint, SparseVector, VectorIndex
from citewise.ingest.chunking import Chunkers
from citewise.ingest.consistency import check, reconcile
from citewise.ingest.cutting import (
    AUTO_MAX_PROCESSES,
    PARSE_START_AFTER,
    Cut,
    CutQueue,
    available_cores,
)
from citewise.ingest.overlap import Inline, Writer
from citewise.ingest.pacing import Pacer
from citewise.ingest.progress import ProgressSink, SilentProgress
from citewise.ingest.space import DiskSpace
from citewise.ingest.state import IndexSignature, SourceState, definition_digest
from citewise.ingest.swap import VersionSwap
from citewise.types import Chunk, SourceDocument

log = logging.getLogger("citewise.ingest")

# A run may delete at most this share of a source's documents without --force...
MASS_DELETION_SHARE = 0.5
# ...once the source has at least this many (small sources churn legitimately).
MASS_DELETION_MIN_DOCUMENTS = 10
# Chunks embedded together, across the connector's document batches. The model's cost follows
# the longest text of each of its batches of 32, so a window's texts are sorted by length
# first; sorting only a few documents' chunks leaves long and short ones in one batch. Over the
# two bench corpora (2,118 chunks), batches cut from 32 documents' chunks at a time (~170) pad
# to 229.6k word-pieces, windows of 512 to 209.7k, 1,024 to 204.3k and 2,048 to 201.4k, as
# low as one sort of each whole corpus. Memory is a few megabytes; a window is written before
# each sync checkpoint, at the end of a run, and when a run is interrupted.
EMBED_WINDOW = 2048
# A batch's vectors, a row per text: the encoder's array, or an empty list when there is no text.
Vectors = np.ndarray | list[np.ndarray]


@dataclass
class RunReport:
    run_id: int
    source: str
    status: str  # succeeded | partial (some documents failed) | failed | interrupted
    counts: RunCounts
    seconds: float
    errors: list[tuple[str, str]] = field(default_factory=list)  # (external id, error)
    message: str | None = None
    # Problems of the run beyond one document (a space that cannot be listed), and warnings
    # that do not make it partial.
    run_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Syncing connectors: the cursor to keep, and ids to read again next run besides failures.
    cursor: dict[str, Any] | None = None
    retry: list[str] = field(default_factory=list)

    def summary(self) -> str:
        c = self.counts
        line = (
            f"{self.source}: {c.added} added, {c.updated} updated, {c.unchanged} unchanged, "
            f"{c.deleted} deleted, {c.failed} failed; {c.chunks_written} chunks written, "
            f"{c.chunks_embedded} embedded, in {self.seconds:.1f}s ({self.status})"
        )
        return line + (f": {self.message}" if self.message else "")


@dataclass
class _Admitted:
    """A document to cut, as the source gave it, with the catalog's record of it."""

    doc: SourceDocument
    doc_id: str
    previous: DocumentRecord | None
    # Its redacted bytes' hash at which it needs no work (``SourceState.unchanged_hash``).
    unchanged_hash: str | None


@dataclass
class _Checkpoint:
    """A sync checkpoint's save, waiting in the cut queue for the documents read before it."""

    task: Callable[[], None]


@dataclass
class _Prepared:
    doc: SourceDocument
    doc_id: str
    previous: DocumentRecord | None
    chunks: list[Chunk]
    outline: Outline | None = None
    injected: list[int] = field(default_factory=list)  # ordinals of chunks aimed at a model
    sparse: list[SparseVector] = field(default_factory=list)  # the chunks' BM25 vectors

    @property
    def emptied(self) -> bool:
        """A document that had content and has none now: it counts toward the deletion brake,
        because a truncated checkout looks exactly like this."""
        return not self.chunks and bool(self.previous and self.previous.chunk_count)


class IngestPipeline:
    def __init__(
        self,
        *,
        catalog: DocumentCatalog,
        sources: SourceStore,
        index: VectorIndex,
        blobs: BlobStore,
        dense: DenseEncoder,
        sparse: Bm25Encoder,
        chunk_max_tokens: int = 200,
        work_dir: Path | None = None,
        min_free_bytes: int = 0,
        embed_window: int = EMBED_WINDOW,
        pacer: Pacer | None = None,
        parse_processes: int | None = None,
    ) -> None:
        self.catalog = catalog
        self.sources = sources
        self.index = index
        self.blobs = blobs
        self.dense = dense
        self.sparse = sparse
        # Where connectors may keep working files (a git clone); the data folder in production.
        self.work_dir = work_dir or Path("data")
        # Room kept free on the data folder's disk (space.py: the index cannot fail cleanly).
        self.space = DiskSpace(self.work_dir, min_free_bytes)
        self.chunkers = Chunkers(dense.count_tokens, chunk_max_tokens, dense.count_tokens_many)
        self._signature = IndexSignature(self.chunkers, dense.model_id, sparse.version)
        self.swap = VersionSwap(catalog, index, blobs)
        self.embed_window = embed_window
        # Worker processes that parse and chunk beside the run (cutting.py); None = chosen by
        # the embedding model (``parse_processes``).
        self._parse_processes = parse_processes
        # Documents a run cuts itself before it starts its workers (cutting.py: small runs
        # never pay for starting them).
        self.parse_start_after = PARSE_START_AFTER
        # Pauses a run while the same process answers requests (pacing.py).
        self.pacer = pacer or Pacer()
        self._failing = threading.Lock()
        # The run lock's ``check``, set by the composition root with the lock it builds: it
        # raises (``RunLockLostError``) when the lock of the run under way went with its
        # database session, and is called before each document is written, so that a run that
        # lost its lock stops before it writes beside the next holder's.
        self.fence: Callable[[], None] = lambda: None

    @property
    def signature(self) -> IndexSignature:
        """What chunks depend on besides their bytes, with the model this process embeds with
        now: a server moves to the model a reindex switched to (``index/generations.py``)."""
        if self._signature.settings["embedding_model"] != self.dense.model_id:
            self._signature = IndexSignature(self.chunkers, self.dense.model_id,
                                             self.sparse.version)
        return self._signature

    def prepare_index(self) -> tuple[int, set[str]]:
        """Before a run: finish what a crash left open, and when the index and the catalog
        disagree, remove stray points and return the documents whose points are missing (the
        run indexes them again). Returns (swaps recovered, incomplete document ids)."""
        recovered = self.swap.recover()
        health = check(self.catalog, self.index)
        if not recovered and health.ok:
            return 0, set()
        if not health.ok:
            log.warning("index check: %s", health.problem())
        fixed = reconcile(self.catalog, self.index)
        if fixed.orphans_deleted or fixed.incomplete:
            log.warning("index check: removed %d stray points; %d documents lack points and "
                        "will be indexed again", fixed.orphans_deleted, len(fixed.incomplete))
        return recovered, fixed.incomplete

    def run(
        self,
        source: str,
        source_type: str,
        connector: LoadConnector | SyncConnector,
        *,
        config: dict[str, Any] | None = None,
        trigger: str = "cli",
        force: bool = False,
        progress: ProgressSink | None = None,
        on_counts: Callable[[RunCounts], None] | None = None,
        batch_size: int = 32,
    ) -> RunReport:
        """Bring the index in line with the source. Never raises for one bad document.

        ``force`` re-processes unchanged documents and lifts the mass-deletion brake.
        """
        progress = progress or SilentProgress()
        started = time.monotonic()
        self.sources.ensure_source(source, source_type, config or {})
        run_id = self.sources.start_run(source, trigger)
        counts = RunCounts()
        report = RunReport(run_id, source, "running", counts, 0.0)
        metrics.INGEST_RUNNING.inc()
        try:
            _, incomplete = self.prepare_index()
        except BaseException as e:
            metrics.INGEST_RUNNING.dec()
            return self._not_started(report, started, e)
        self.sources.keep_room_for_final_word()
        definition = None if config is None else definition_digest(
            config, getattr(connector, "reach_options", frozenset()))
        state = SourceState(self.catalog, self.sources, source, self.signature,
                            incomplete=incomplete, definition=definition)
        held: list[_Prepared] = []  # emptied documents, written only if the brake allows

        # Three stages (overlap.py), in order: read and parse, embed, write. With a remote model
        # they run at once (this thread parses window n+2 while ``embedder`` embeds window n+1
        # and ``storer`` writes window n); with the local model, in turn (``_stages``). Parsing
        # and chunking go to worker processes when there are cores to spare (cutting.py);
        # their cuts come back in the order the documents were read.
        embedder, storer = self._stages()
        cutter: CutQueue[_Admitted | _Checkpoint] = CutQueue(
            self.chunkers, self.sparse, self.dense.model_path, processes=self.parse_processes,
            start_after=self.parse_start_after)
        self.pacer.begin()
        # Documents read and parsed, waiting until their chunks fill a window (EMBED_WINDOW).
        window: list[_Prepared] = []
        window_docs = window_chunks = 0

        def process(batch: list[SourceDocument]) -> None:
            nonlocal window_docs
            for doc in batch:
                counts.seen += 1
                admitted = self._admit(source, doc, state, force, report)
                self.pacer.tick()
                if admitted is None:
                    window_docs += 1
                else:
                    take(cutter.put(admitted, admitted.doc_id, admitted.doc,
                                    admitted.unchanged_hash))
            if window_chunks >= self.embed_window:
                flush()

        def take(cuts: Iterable[tuple[_Admitted | _Checkpoint, Cut]], *,
                 checkpoints: bool = True) -> None:
            """Documents whose cuts came back (in the order read) join the window; a
            checkpoint's turn closes it and follows its writes (``checkpoints``: not while a
            run is closing after an error, when documents before it may have been lost)."""
            nonlocal window_docs, window_chunks
            for admitted, cut in cuts:
                if isinstance(admitted, _Checkpoint):
                    if not checkpoints:
                        continue
                    # Every document before it is in the window: the window goes first, or
                    # the checkpoint would pass documents not yet written.
                    flush()
                    embedder.submit(functools.partial(storer.submit, admitted.task))
                    continue
                window_docs += 1
                item = self._prepared(source, admitted, cut, report)
                if item is None:
                    continue
                if item.emptied:
                    held.append(item)
                else:
                    window.append(item)
                    window_chunks += len(item.chunks)

        def flush() -> None:
            """Hand the window to the embedder; its writes follow in order."""
            nonlocal window, window_docs, window_chunks
            if not window_docs:  # counts every document in the window, and those it passed
                return
            prepared, docs = window, window_docs
            window, window_docs, window_chunks = [], 0, 0

            def embed() -> None:
                texts, vectors = self._embed_batch(prepared, counts, progress)

                def store() -> None:
                    self._store_batch(source, prepared, texts, vectors, counts, report)
                    progress.documents(docs)
                    self.sources.update_run(run_id, counts)
                    if on_counts:
                        on_counts(counts)

                storer.submit(store)

            embedder.submit(embed)

        def after_writes(task: Callable[[], None]) -> None:
            """Run ``task`` once every document given so far is written (a sync checkpoint).
            It waits its turn behind their cuts, so the workers go on cutting past it."""
            take(cutter.mark(_Checkpoint(task)))

        def drain() -> None:
            take(cutter.drain())
            flush()
            embedder.drain()
            storer.drain()

        closed = False

        def close() -> None:
            # A run that fails or is interrupted still writes what it had read, as when each
            # batch was written before the next was read; an error of the writers themselves
            # is already on its way up. Cuts still owed are waited for (the workers ignore
            # Ctrl-C); those taken before an error or a second Ctrl-C are written anyway.
            nonlocal closed
            if closed:
                return
            closed = True
            try:
                # No checkpoint is saved from here: whatever interrupted the run may have
                # dropped documents read before one (a window whose hand-off to the embedder
                # was interrupted), and a resumed run must read them again.
                take(cutter.drain(), checkpoints=False)
            except BaseException:
                log.debug("documents whose cuts had not come back dropped", exc_info=True)
            try:
                flush()
            except BaseException:
                log.debug("documents of an unwritten window dropped", exc_info=True)
            cutter.close()
            embedder.close()
            storer.close()

        try:
            if isinstance(connector, SyncConnector):
                gone = self._sync(connector, state, process, after_writes, report, force,
                                  progress, batch_size)
            else:
                # Connectors that can count cheaply (a folder listing) give the bar its total.
                count = getattr(connector, "count", None)
                progress.start(count() if callable(count) else None)
                for batch in connector.load(batch_size=batch_size):
                    process(batch)
                # Only a complete listing may delete: a source that failed half-way raised.
                gone = state.gone_after_load()
            drain()
            self._check_mass_deletion(source, state, len(gone) + len(held), counts.added, force)
            self._write_batch(source, held, counts, report, progress)
            for record in gone:
                self.swap.delete(record)
                self.pacer.tick()
                counts.deleted += 1
                metrics.INGEST_DOCUMENTS.labels(source, "deleted").inc()
            self._note_healthy_size(source, state, force)
            report.status = "partial" if counts.failed or report.run_errors else "succeeded"
            if isinstance(connector, SyncConnector):
                # Documents that failed are read again next run, whatever the source says changed.
                state.finish_sync(report.cursor or {},
                                  [e for e, _ in report.errors if e] + report.retry)
            self._settle_index(counts)
        except (SourceError, StoreUnavailableError) as e:  # said in full: no traceback
            report.status, report.message = "failed", str(e)
            log.error("ingest of %s failed: %s", source, e)
        except CitewiseError as e:
            report.status, report.message = "failed", str(e)
            log.exception("ingest of %s failed", source)
        except BaseException as e:  # KeyboardInterrupt, crash: record, then let it propagate
            # The documents already read are written, as before the interruption came (at
            # most a few windows); nothing is written once the run is recorded.
            close()
            report.status = "interrupted"
            report.message = f"{type(e).__name__}: {e}"
            self._finish(report, started)
            raise
        finally:
            close()
            metrics.INGEST_RUNNING.dec()
            progress.close()
        self._finish(report, started)
        return report

    @property
    def parse_processes(self) -> int:
        """Worker processes a run parses and chunks in: as configured, else as many as the
        cores (at most ``AUTO_MAX_PROCESSES``; none on one core) when the model is remote, and
        none with the local model, which computes on every core itself (``_stages`` says what
        work beside it costs).

        As many as the cores, not one fewer: cutting is about 60% of a remote-model run's CPU,
        so one worker is the bottleneck, and the run's own process mostly waits. Through
        ``bench/bench_remote_embedding.py`` on two cores, alternating in one sitting: no
        workers 885-896 chunks/s of pipeline work, one 724-787, two 1,011-1,033 (bench/results/
        remote-embedding.md)."""
        if self._parse_processes is not None:
            return self._parse_processes
        cores = available_cores()
        if self.dense.remote is None or cores < 2:
            return 0
        return min(AUTO_MAX_PROCESSES, cores)

    def _stages(self) -> tuple[Writer | Inline, Writer | Inline]:
        """The embedding and writing stages of a run: threads of their own beside reading and
        parsing when the model is remote (its requests wait on the network), in turn with them
        when the model is local: it already uses every core, and work beside it slowed it more
        than the work took (GIL hand-offs, its threads preempted). Over the bench corpora on two
        cores, four rounds alternating in one process took 36.1/32.6/31.8/33.8 s overlapped
        against 31.9/34.2/30.7/29.3 s in turn (bare embedding 26.4/24.5/28.6/25.0 s;
        docs/operations.md has what make bench measures)."""
        if self.dense.remote is not None:
            return Writer(), Writer()
        return Inline(), Inline()

    def _sync(
        self,
        connector: SyncConnector,
        state: SourceState,
        process: Callable[[list[SourceDocument]], None],
        after_writes: Callable[[Callable[[], None]], None],
        report: RunReport,
        force: bool,
        progress: ProgressSink,
        batch_size: int,
    ) -> list[DocumentRecord]:
        """Run a syncing connector; return the documents to delete. The cursor to keep goes
        into ``report.cursor``, run-level errors into ``report.run_errors``."""
        request = state.sync_request(force)
        report.cursor = request.state
        deleted: set[str] = set()
        live: set[str] | None = None
        progress.start(None)
        for batch in connector.sync(request, batch_size=batch_size):
            if batch.total is not None:
                progress.start(batch.total)
            if batch.documents:
                process(batch.documents)
            for error in batch.errors:
                self._run_error(state.source, report, error)
            deleted.update(batch.deleted)
            if batch.live_ids is not None:
                live = set(batch.live_ids)
            if batch.state is not None:
                report.cursor = batch.state
            if batch.checkpoint is not None:
                # Saved once the batch is written, never before: a crash resumes after it.
                after_writes(functools.partial(state.save_checkpoint, batch.checkpoint))
        return state.gone_after_sync(deleted, live)

    def _check_mass_deletion(self, source: str, state: SourceState, losing: int, added: int,
                             force: bool) -> None:
        """Refuse a run that would delete most of a sizeable source, unless forced: a run that
        would leave it with less than half of its healthy size.

        An emptied checkout, an unmounted share, a truncated sync or a revoked credential looks
        exactly like "everything was deleted"; emptying the index on that evidence loses more
        than it saves. ``losing`` counts deletions and documents that became empty. The
        comparison is with the source's healthy size (the largest it has been since the last
        forced run), not only the last run's, so a loss spread over several runs trips it too.
        """
        existing = len(state.existing)
        healthy = max(existing, self.sources.healthy_documents(source) or 0)
        if force or healthy < MASS_DELETION_MIN_DOCUMENTS or not losing:
            return
        remaining = existing + added - losing
        if healthy - remaining > healthy * MASS_DELETION_SHARE:
            raise SourceError(
                f"this run would leave {remaining} of the {healthy} documents {source!r} had "
                f"when it was last healthy ({losing} deleted or emptied now); refusing, in "
                "case the source is only temporarily empty or unreadable",
                hint="if the deletions are real, run again with --force",
            )

    def _settle_index(self, counts: RunCounts) -> None:
        if counts.updated or counts.deleted:
            # Replaced and deleted points are only tombstoned until the engine compacts, which
            # rewrites segments: only with room on the disk.
            self.space.check("compacting the index")
            self.index.optimize()
        else:
            self.index.flush()  # a finished run is on disk, not only in the engine's log

    def _not_started(self, report: RunReport, started: float, e: BaseException) -> RunReport:
        """A run whose recovery of the last one failed (its blob store down, its disk full):
        recorded as failed, and said; anything else goes on up."""
        if not isinstance(e, StoreUnavailableError):
            raise e
        report.status, report.message = "failed", str(e)
        log.error("ingest of %s failed: %s", report.source, e)
        self._finish(report, started)
        return report

    def _note_healthy_size(self, source: str, state: SourceState, force: bool) -> None:
        """A source's healthy size grows with it, and is reset by a forced run."""
        now_count = self.catalog.count_documents(source, with_content=True)
        healthy = self.sources.healthy_documents(source)
        if force or healthy is None or now_count > healthy:
            self.sources.set_healthy_documents(source, now_count)

    def _finish(self, report: RunReport, started: float) -> None:
        report.seconds = time.monotonic() - started
        try:
            try:
                self.sources.finish_run(report.run_id, report.counts, report.status,
                                        report.message)
            except DiskFullError:
                # The room kept for this (``SourceStore.keep_room_for_final_word``), given
                # back to the disk.
                if not self.sources.free_room_for_final_word():
                    raise
                self.sources.finish_run(report.run_id, report.counts, report.status,
                                        report.message)
        except StoreUnavailableError as e:
            # A full disk may refuse even this; the next run marks this one interrupted.
            log.error("could not record the end of ingest run %d: %s", report.run_id, e)
        metrics.INGEST_RUNS.labels(report.source, report.status).inc()

    # Per document --------------------------------------------------------------------------
    def _fail(self, source: str, report: RunReport, external_id: str, error: str) -> None:
        with self._failing:  # parsing and writing fail documents from two threads
            report.counts.failed += 1
        report.errors.append((external_id, error))
        self.sources.record_error(report.run_id, source, external_id, error)
        metrics.INGEST_DOCUMENTS.labels(source, "failed").inc()
        log.warning("%s: %s: %s", source, external_id, error)

    def _run_error(self, source: str, report: RunReport, error: SyncError) -> None:
        message = f"{error.scope}: {error.message}"
        if error.warning:
            report.warnings.append(message)
            self.sources.record_error(report.run_id, source, None, f"warning: {message}")
            log.warning("%s: %s", source, message)
            return
        report.run_errors.append(message)
        if error.retry:
            report.retry.append(error.retry)
        self.sources.record_error(report.run_id, source, None, message)
        log.warning("%s: %s", source, message)

    def _admit(self, source: str, doc: SourceDocument, state: SourceState, force: bool,
               report: RunReport) -> _Admitted | None:
        """A document read: the catalog's record of it, and the hash at which it is unchanged.
        None (its failure recorded) when the source could not read it."""
        previous = state.see(doc)
        if doc.error:
            self._fail(source, report, doc.external_id, doc.error)
            return None
        return _Admitted(doc, document_id(source, doc.external_id), previous,
                         None if force else state.unchanged_hash(doc, previous))

    def _prepared(self, source: str, admitted: _Admitted, cut: Cut,
                  report: RunReport) -> _Prepared | None:
        """A document and its cut, ready to embed; None when there is nothing to write (it is
        unchanged, or failed: then its failure is recorded)."""
        external_id = admitted.doc.external_id
        if cut.error is not None:
            if cut.unexpected:
                log.error("unexpected error preparing %s\n%s", external_id, cut.unexpected)
            self._fail(source, report, external_id, cut.error)
            return None
        assert cut.doc is not None  # redacted, since it did not fail
        if cut.unchanged:
            assert admitted.previous is not None
            self._refresh_unchanged(cut.doc, admitted.previous)
            report.counts.unchanged += 1
            metrics.INGEST_DOCUMENTS.labels(source, "unchanged").inc()
            return None
        if cut.injected:
            log.warning("%s: chunks %s carry instructions aimed at a model",
                        external_id, cut.injected)
        return _Prepared(cut.doc, admitted.doc_id, admitted.previous, cut.chunks, cut.outline,
                         cut.injected, cut.sparse)

    def _refresh_unchanged(self, doc: SourceDocument, previous: DocumentRecord) -> None:
        if sorted(doc.readers) != sorted(previous.readers):
            # Index first: a reader removed here must lose access before the catalog says so.
            self.index.set_payload(previous.id, {"readers": doc.readers})
            self.catalog.update_document_fields(previous.id, readers=doc.readers)

    def _write_batch(self, source: str, prepared: list[_Prepared], counts: RunCounts,
                     report: RunReport, progress: ProgressSink) -> None:
        texts, vectors = self._embed_batch(prepared, counts, progress)
        self._store_batch(source, prepared, texts, vectors, counts, report)

    def _embed_batch(self, prepared: list[_Prepared], counts: RunCounts,
                     progress: ProgressSink) -> tuple[list[str], Vectors]:
        texts = [
            embedding_text(p.doc.title, c.heading, c.text) for p in prepared for c in p.chunks
        ]
        if not texts:
            return texts, []
        self.space.check("caching embeddings")
        before = self.dense.embedded_count

        def on_progress(n: int) -> None:
            progress.chunks_embedded(n)
            self.pacer.tick()

        vectors = self.dense.embed_documents(texts, on_progress=on_progress)
        embedded = self.dense.embedded_count - before
        counts.chunks_embedded += embedded
        metrics.INGEST_CHUNKS_EMBEDDED.inc(embedded)
        return texts, vectors

    def _store_batch(self, source: str, prepared: list[_Prepared], texts: list[str],
                     vectors: Vectors, counts: RunCounts, report: RunReport) -> None:
        offset = 0
        for p in prepared:
            n = len(p.chunks)
            self.space.check(f"writing {p.doc.external_id}")
            self.fence()
            live = False

            def counted(p: _Prepared = p, n: int = n) -> None:
                # Counted when the catalog switches to the new version: a store that fails
                # after that (the old points' pruning) stops or warns, but the document is
                # written, and the run's counts must say so.
                nonlocal live
                live = True
                counts.chunks_written += n
                outcome = "updated" if p.previous else "added"
                setattr(counts, outcome, getattr(counts, outcome) + 1)
                metrics.INGEST_DOCUMENTS.labels(source, outcome).inc()

            try:
                self._write_document(source, p, texts[offset : offset + n],
                                     vectors[offset : offset + n], counted)
            except StoreUnavailableError:
                raise  # every other document would fail alike: the run stops
            except CitewiseError as e:
                if live:
                    # Written; the cleanup of its old version waits for the next run's
                    # recovery, and search never shows a replaced version meanwhile.
                    message = (f"{p.doc.external_id}: written, but removing its old version "
                               f"failed ({e}); the next run finishes it")
                    report.warnings.append(message)
                    log.warning("%s: %s", source, message)
                else:
                    # A backend error on one document: keep its old version, go on.
                    self._fail(source, report, p.doc.external_id, str(e))
            offset += n
            self.pacer.tick()

    def _write_document(self, source: str, p: _Prepared, texts: list[str], vectors: Vectors,
                        on_live: Callable[[], None] | None = None) -> None:
        doc = p.doc
        signature = self.signature(doc.media_type)
        version = hashlib.sha256(f"{doc.content_hash}|{signature}".encode()).hexdigest()[:16]
        service = doc.metadata.get("service")
        service = str(service) if service else None
        record = DocumentRecord(
            id=p.doc_id,
            source=source,
            external_id=doc.external_id,
            title=doc.title,
            media_type=doc.media_type,
            content_hash=doc.content_hash,
            version=version,
            index_signature=signature,
            readers=doc.readers,
            blob_key=blob_key(doc.content),
            indexed_at=now(),
            path=doc.path,
            url=doc.url,
            tags=doc.tags,
            service=service,
            metadata=doc.metadata,
            chunk_count=len(p.chunks),
            size_bytes=len(doc.content),
            updated_at=doc.updated_at.astimezone(UTC).isoformat() if doc.updated_at else None,
            link_template=doc.link_template,
            body_line_offset=doc.body_line_offset,
            injection_chunks=p.injected,
        )
        points = self._points(record, p.chunks, texts, vectors, p.sparse)
        self.swap.write(record, p.chunks, points, doc.content, p.previous, p.outline, on_live)

    def _points(self, record: DocumentRecord, chunks: list[Chunk], texts: list[str],
                vectors: Vectors, sparse: list[SparseVector] | None = None) -> list[ChunkPoint]:
        """The index points of a document version: the one definition of what a point holds,
        for a new version and for one rebuilt from the catalog. ``sparse``: the BM25 vectors of
        ``texts`` when the cut made them already (in a worker process, cutting.py)."""
        document = DocumentPayload.for_record(record)
        if sparse is None:
            sparse = [self.sparse.embed_document(text) for text in texts]
        return [
            ChunkPoint(id=chunk_point_id(record.id, record.version, c.ordinal),
                       dense=vec.tolist(), sparse=bm25,
                       payload=ChunkPayload.for_chunk(document, c))
            for c, vec, bm25 in zip(chunks, vectors, sparse, strict=True)
        ]

    def points_from_catalog(self, record: DocumentRecord) -> list[ChunkPoint]:
        """The live version's points rebuilt from the catalog alone (no source, no parsing):
        the chunks as stored, embedded again, which the embedding cache answers."""
        chunks = self.catalog.chunks(record.id)
        texts = [embedding_text(record.title, c.heading, c.text) for c in chunks]
        vectors: Vectors = self.dense.embed_documents(texts) if texts else []
        return self._points(record, chunks, texts, vectors)

