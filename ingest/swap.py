"""Writing and deleting a document so that a crash at any moment loses and strands nothing.

A document lives in three stores (catalog, vector index, blob store) that cannot share one
transaction. So every change first writes its intent to the catalog (``PendingWrite``), then takes
its steps in an order where each intermediate state is safe to serve, and only then clears the
intent. After a crash, ``recover()`` finds every intent left behind and finishes or undoes it.

A new version of a document (``write``):

1. ``pending``: the intent, naming the old and the new version and their point counts;
2. ``blob``: the raw bytes into the blob store (content-addressed: idempotent);
3. ``upsert``: the new version's points (their ids differ from the old version's);
4. ``commit``: the catalog row and chunks switch to the new version, and the intent is marked
   committed, in one SQLite transaction;
5. ``prune``: the points of every other version are deleted;
6. ``release``: the old blob is deleted if no document uses it any more;
7. the intent is cleared.

Search excludes the points of open intents inside its index query (the new version's until step
4, the old version's after it: ``PendingWrite.stale_point_ids``), and checks each hit's version
against the catalog, so a reader sees the old version or the new one, never both and never
none. Recovery of a ``started`` write deletes the new version's points (and its blob if unused);
of a ``committed`` one, prunes the other versions and releases the old blob.

A write of the version already live (a forced run, new readers on the same text) keeps the
points' ids, so step 3 overwrites them where they stand: it hides nothing while it runs and its
commit is not counted as a swap (``PendingWrite.in_place``), since no search can miss the
document because of it. Nor is a document's first version (``takes_a_version_away``): a search
that straddles its commit finds the new document whole or not at all.

Deleting a document (``delete``): ``pending``; ``points`` (all of them); ``commit`` (catalog row
and chunks gone, intent committed); ``release`` (the blob); the intent cleared. Recovery of a
``started`` delete finishes it, since the decision to delete was taken on a complete listing of
the source; if the document comes back, the next run adds it again.

``CITEWISE_TEST_CRASH_AT=<step>[:<n>]`` makes the process exit at once (``os._exit``, no
cleanup, like a kill) when it reaches ``<step>`` for the n-th time. It exists for the crash tests
(tests/ingest/test_crash.py) and does nothing unless set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from citewise.index.blobs import BlobStore
from citewise.index.catalog import DocumentCatalog, DocumentRecord, PendingWrite
from citewise.index.outline import Outline
from citewise.index.vector_index import ChunkPoint, VectorIndex
from citewise.types import Chunk

log = logging.getLogger("citewise.ingest")

CRASH_ENV = "CITEWISE_TEST_CRASH_AT"
WRITE_STEPS = ("pending", "blob", "upsert", "commit", "prune", "release")
DELETE_STEPS = ("delete-pending", "delete-points", "delete-commit", "delete-release")
_UPSERT_BATCH = 256


class _CrashHook:
    def __init__(self) -> None:
        spec = os.environ.get(CRASH_ENV, "")
        step, _, nth = spec.partition(":")
        self.step = step or None
        self.nth = int(nth) if nth.isdigit() else 1
        self.seen = 0

    def reached(self, step: str) -> None:
        if step != self.step:
            return
        self.seen += 1
        if self.seen == self.nth:
            log.error("test crash hook: exiting at step %s (%d)", step, self.seen)
            os._exit(137)


_hook = _CrashHook()


def crash_point(step: str) -> None:
    """A step boundary: the test hook may end the process here."""
    if _hook.step is not None:
        _hook.reached(step)


class VersionSwap:
    def __init__(self, catalog: DocumentCatalog, index: VectorIndex, blobs: BlobStore) -> None:
        self.catalog = catalog
        self.index = index
        self.blobs = blobs

    def write(
        self,
        record: DocumentRecord,
        chunks: list[Chunk],
        points: Sequence[ChunkPoint],
        content: bytes,
        previous: DocumentRecord | None,
        outline: Outline | None = None,
        on_live: Callable[[], None] | None = None,
    ) -> None:
        """Make ``record`` (with its chunks and points) the live version of its document.

        ``on_live`` is called as soon as the catalog has switched to the new version: what
        fails after that (pruning the old points, releasing the old blob) leaves the write
        open for ``recover`` to finish, but the document is already written.
        """
        pending = PendingWrite(
            document_id=record.id, source=record.source, kind="write",
            new_version=record.version, new_points=len(points),
            old_version=previous.version if previous else None,
            old_points=previous.chunk_count if previous else 0,
            blob_key=record.blob_key,
            old_blob_key=previous.blob_key if previous else None,
        )
        self.catalog.begin_pending(pending)
        crash_point("pending")
        record.blob_key = self.blobs.put(content)
        crash_point("blob")
        for start in range(0, len(points), _UPSERT_BATCH):
            self.index.upsert(points[start:start + _UPSERT_BATCH])
        crash_point("upsert")
        self.catalog.commit_write(pending, record, chunks, [p.id for p in points], outline)
        if on_live is not None:
            on_live()
        crash_point("commit")
        self._finish_write(pending)

    def _finish_write(self, pending: PendingWrite) -> None:
        self.index.delete_document(pending.document_id, keep_version=pending.new_version)
        crash_point("prune")
        if pending.old_blob_key and pending.old_blob_key != pending.blob_key:
            self._release_blob(pending.old_blob_key)
        crash_point("release")
        self.catalog.end_pending(pending.document_id)

    def delete(self, record: DocumentRecord) -> None:
        """Remove the document from the index, the catalog and (if unshared) the blob store."""
        pending = PendingWrite(document_id=record.id, source=record.source, kind="delete",
                               old_version=record.version, old_points=record.chunk_count,
                               old_blob_key=record.blob_key)
        self.catalog.begin_pending(pending)
        crash_point("delete-pending")
        self._finish_delete(pending)

    def _finish_delete(self, pending: PendingWrite) -> None:
        if pending.phase == "started":
            self.index.delete_document(pending.document_id)
            crash_point("delete-points")
            self.catalog.commit_delete(pending)
            crash_point("delete-commit")
        if pending.old_blob_key:
            self._release_blob(pending.old_blob_key)
        crash_point("delete-release")
        self.catalog.end_pending(pending.document_id)

    def recover(self, source: str | None = None) -> int:
        """Finish or undo every swap a crash left open (of one source, or all); how many."""
        open_swaps = self.catalog.pending_writes(source)
        for pending in open_swaps:
            log.warning("%s: finishing a %s of document %s that was interrupted (%s)",
                        pending.source, pending.kind, pending.document_id, pending.phase)
            if pending.kind == "delete":
                self._finish_delete(pending)
            elif pending.phase == "committed":
                self._finish_write(pending)
            else:
                # The catalog never switched: the new version's points and blob go.
                if pending.new_version and pending.new_version != pending.old_version:
                    self.index.delete_version(pending.document_id, pending.new_version)
                if pending.blob_key and pending.blob_key != pending.old_blob_key:
                    self._release_blob(pending.blob_key)
                self.catalog.end_pending(pending.document_id)
        return len(open_swaps)

    def _release_blob(self, key: str) -> None:
        if not self.catalog.blob_in_use(key):
            self.blobs.delete(key)
