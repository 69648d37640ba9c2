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
* a missing blob: the one thing the catalog cannot give back, and a repair does not pretend
  to. The document stays searchable (its chunks and points are intact) and is marked to be
  read again by its source's next run (`citewise ingest`), which stores its blob again; the
  problem is reported until then;
* files and folders of the data folder that other accounts may read: made private.

A catalog that lists few documents while the index and the blobs hold many more was lost, and
its "strays" are the installation: the repair refuses to delete them (``lost_catalog``, like
the ingest pipeline's mass-deletion brake) unless forced, and says how to restore or rebuild
the catalog (``ingest/rebuild_catalog.py``).

Every step only moves the index and the blob store toward what the catalog says, so a repair
that is interrupted (even killed) is finished by running it again; one that would fill the
data folder's disk stops before the document that would (``ingest/space.py``). Nothing may
write while it runs: callers hold the ingest run lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from citewise.errors import CatalogLostError
from citewise.ingest.consistency import (
    REREAD,
    RESTORE_OR_REBUILD,
    Finding,
    exposed,
    inspect,
    lost_catalog,
    summarise,
)
from citewise.ingest.pipeline import IngestPipeline
from citewise.private_files import make_private

log = logging.getLogger("citewise.ingest")

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
    made_private: int = 0  # files and folders of the data folder
    remaining: list[Finding] = field(default_factory=list)  # after the repair

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": [f.text for f in self.found],
            "found_summary": [asdict(g) for g in summarise(self.found)],
            "swaps_finished": self.swaps_finished,
            "points_deleted": self.points_deleted,
            "documents_rebuilt": self.documents_rebuilt,
            "points_written": self.points_written,
            "blobs_deleted": self.blobs_deleted,
            "marked_for_reread": self.marked_for_reread,
            "made_private": self.made_private,
            "remaining": [f.text for f in self.remaining],
        }


def repair(pipeline: IngestPipeline, *, force: bool = False,
           on_document: Callable[[int, int], None] | None = None) -> RepairReport:
    """Repair what ``inspect`` finds; the report says what was done and what remains (only
    documents whose blob is gone, until their source's next run reads them again).

    Raises ``CatalogLostError``, having changed nothing, when the catalog looks lost, unless
    ``force``."""
    catalog, index, blobs = pipeline.catalog, pipeline.index, pipeline.blobs
    stores = inspect(catalog, index, blobs)
    lost = lost_catalog(catalog, index, blobs, stores)
    if lost is not None and not force:
        raise CatalogLostError(f"{lost}; refusing to repair", hint=RESTORE_OR_REBUILD)
    report = RepairReport(found=stores + exposed(pipeline.work_dir))
    if not report.found:
        return report
    if not stores:
        report.made_private = len(make_private(pipeline.work_dir))
        report.remaining = exposed(pipeline.work_dir)
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
        elif f.kind == "missing_blob" and f.key:
            for record in catalog.documents_with_blob(f.key):
                catalog.update_document_fields(record.id, index_signature=REREAD)
                report.marked_for_reread.append(f"{record.source}/{record.external_id}")
    if report.points_deleted or report.documents_rebuilt:
        pipeline.space.check("compacting the index", rerun=REPAIR_AGAIN)
        index.optimize()
    # Last: compacting wrote new segment files, under this process's umask.
    report.made_private = len(make_private(pipeline.work_dir))
    report.remaining = inspect(catalog, index, blobs) + exposed(pipeline.work_dir)
    log.info("repair: %d swaps finished, %d stray points deleted, %d documents' points "
             "rebuilt, %d stray blobs deleted, %d documents to read again, %d files made "
             "private", report.swaps_finished, report.points_deleted, report.documents_rebuilt,
             report.blobs_deleted, len(report.marked_for_reread), report.made_private)
    return report


def plan(findings: list[Finding]) -> list[str]:
    """What ``repair`` would do about ``findings``, and what it cannot: said before it runs,
    so that nobody expects a repair to bring back what only a source has."""
    count = {kind: sum(1 for f in findings if f.kind == kind) for kind in
             {f.kind for f in findings}}
    rebuilt = len({f.document_id for f in findings
                   if f.kind in ("missing_point", "stale_payload")})
    lines = []
    if count.get("open_swap"):
        lines.append(f"finish or undo {count['open_swap']} document swaps a crash left open")
    if count.get("orphan_point"):
        lines.append(f"delete {count['orphan_point']} points that belong to no live chunk")
    if rebuilt:
        lines.append(f"rebuild the points of {rebuilt} documents from the catalog's chunks")
    strays = count.get("orphan_blob", 0) + count.get("partial_blob", 0)
    if strays:
        lines.append(f"delete {strays} blobs (or half-written blob files) no document uses")
    if count.get("open_permissions"):
        lines.append("make the data folder's files 0600 and its folders 0700")
    if count.get("missing_blob"):
        lines.append(f"NOT bring back {count['missing_blob']} missing blobs (only their "
                     "sources have those bytes): it marks their documents to be read again, "
                     "and the next `citewise ingest` of their sources stores them again; "
                     "until then those documents stay searchable and verify reports them")
    return lines


def verify_index(pipeline: IngestPipeline, *, fix: bool, force: bool = False,
                 on_document: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """What ``citewise verify`` and ``POST /v1/ingest/verify`` answer: ``ok``, the
    ``problems`` (left, after a repair: every one), their ``summary`` by kind (what a person
    reads: ``consistency.summarise``), ``lost_catalog`` (why a repair would refuse, or
    ``None``), ``plan`` (what a repair would do and not do) and, with ``fix``, the ``repair``
    report. The caller holds the run lock."""
    catalog, index, blobs = pipeline.catalog, pipeline.index, pipeline.blobs
    if not fix:
        stores = inspect(catalog, index, blobs)
        found = stores + exposed(pipeline.work_dir)
        lost = lost_catalog(catalog, index, blobs, stores)
        return {"ok": not found, "problems": [f.text for f in found],
                "summary": [asdict(g) for g in summarise(found)],
                "lost_catalog": f"{lost}; `citewise verify --repair` refuses to. What to do: "
                                f"{RESTORE_OR_REBUILD}" if lost else None,
                "plan": plan(found),
                "repair": None}
    report = repair(pipeline, force=force, on_document=on_document)
    return {"ok": not report.remaining, "problems": [f.text for f in report.remaining],
            "summary": [asdict(g) for g in summarise(report.remaining)],
            "lost_catalog": None, "plan": plan(report.remaining), "repair": report.to_dict()}

