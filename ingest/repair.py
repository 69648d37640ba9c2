"""Putting the index and the blob store back in line with the catalog, without the sources.

The catalog is the source of truth: it holds every live document's version, readers and chunk
texts. So everything ``consistency.inspect`` can find is repaired from it, without reading a
source again:

* an open swap: finished or undone (``VersionSwap.recover``);
* a point of no live chunk: deleted;
* a missing point, or one whose payload disagrees (readers above all): the document's live
  points are rebuilt from its catalog chunks (embedded again, which the embedding cache
  answers without the model) and upserted over the old ones, then other versions' points go;
* a blob of no document, or a blob write a killed process left half done: deleted;
* a missing blob: the one thing the catalog cannot give back. The document stays searchable
  (its chunks and points are intact) and is marked to be read again by its source's next run.

Every step only moves the index and the blob store toward what the catalog says, so a repair
that is interrupted (even killed) is finished by running it again; one that would fill the
data folder's disk stops before the document that would (``ingest/space.py``). Nothing may
write while it runs: callers hold the ingest run lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from citewise.ingest.consistency import Finding, inspect
from citewise.ingest.pipeline import IngestPipeline

log = logging.getLogger("citewise.ingest")

# An index signature no chunker produces: the document is re-read by its source's next run.
REREAD = "reread"
REPAIR_AGAIN = "`citewise verify --repair`"


@dataclass
class RepairReport:
    found: list[Finding] = field(default_factory=list)  # before the repair
    swaps_finished: int = 0
    points_deleted: int = 0
    documents_rebuilt: int = 0
    points_written: int = 0
    blobs_deleted: int = 0
    marked_for_reread: list[str] = field(default_factory=list)  # documents whose blob is gone
    remaining: list[Finding] = field(default_factory=list)  # after the repair

    def to_dict(self) -> dict:
        return {
            "found": [f.text for f in self.found],
            "swaps_finished": self.swaps_finished,
            "points_deleted": self.points_deleted,
            "documents_rebuilt": self.documents_rebuilt,
            "points_written": self.points_written,
            "blobs_deleted": self.blobs_deleted,
            "marked_for_reread": self.marked_for_reread,
            "remaining": [f.text for f in self.remaining],
        }


def repair(pipeline: IngestPipeline, *,
           on_document: Callable[[int, int], None] | None = None) -> RepairReport:
    """Repair what ``inspect`` finds; the report says what was done and what remains (only
    documents whose blob is gone, until their source's next run reads them again)."""
    catalog, index, blobs = pipeline.catalog, pipeline.index, pipeline.blobs
    report = RepairReport(found=inspect(catalog, index, blobs))
    if not report.found:
        return report
    report.swaps_finished = pipeline.swap.recover()
    findings = inspect(catalog, index, blobs) if report.swaps_finished else report.found
    orphans = [f.key for f in findings if f.kind == "orphan_point" and f.key]
    index.delete_points(orphans)
    report.points_deleted = len(orphans)
    rebuild = sorted({f.document_id for f in findings
                      if f.kind in ("missing_point", "stale_payload") and f.document_id})
    for n, document_id in enumerate(rebuild, 1):
        record = catalog.get_document(document_id)
        if record is None:  # deleted meanwhile: its points are orphans for the next pass
            continue
        # The embedded index cannot fail a write cleanly on a full disk (``ingest/space.py``).
        pipeline.space.check(f"rebuilding the points of {record.source}/{record.external_id}",
                             rerun=REPAIR_AGAIN)
        points = pipeline.points_from_catalog(record)
        index.upsert(points)
        index.delete_document(document_id, keep_version=record.version)
        report.documents_rebuilt += 1
        report.points_written += len(points)
        if on_document is not None:
            on_document(n, len(rebuild))
    for f in findings:
        if f.kind == "orphan_blob" and f.key and not catalog.blob_in_use(f.key):
            blobs.delete(f.key)
            report.blobs_deleted += 1
        elif f.kind == "partial_blob" and f.key:
            blobs.delete(f.key)
            report.blobs_deleted += 1
        elif f.kind == "missing_blob":
            for record in catalog.documents_with_blob(f.key):
                catalog.update_document_fields(record.id, index_signature=REREAD)
                report.marked_for_reread.append(f"{record.source}/{record.external_id}")
    if report.points_deleted or report.documents_rebuilt:
        pipeline.space.check("compacting the index", rerun=REPAIR_AGAIN)
        index.optimize()
    report.remaining = inspect(catalog, index, blobs)
    log.info("repair: %d swaps finished, %d stray points deleted, %d documents' points "
             "rebuilt, %d stray blobs deleted, %d documents to read again",
             report.swaps_finished, report.points_deleted, report.documents_rebuilt,
             report.blobs_deleted, len(report.marked_for_reread))
    return report


def verify_index(pipeline: IngestPipeline, *, fix: bool,
                 on_document: Callable[[int, int], None] | None = None) -> dict:
    """What ``citewise verify`` and ``POST /v1/ingest/verify`` answer: ``ok``, the
    ``problems`` (left, after a repair) and, with ``fix``, the ``repair`` report. The caller
    holds the run lock."""
    if not fix:
        found = inspect(pipeline.catalog, pipeline.index, pipeline.blobs)
        return {"ok": not found, "problems": [f.text for f in found], "repair": None}
    report = repair(pipeline, on_document=on_document)
    return {"ok": not report.remaining, "problems": [f.text for f in report.remaining],
            "repair": report.to_dict()}

