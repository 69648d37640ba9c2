"""Does the vector index hold exactly what the catalog says is live? A quick check, and the fix.

The catalog is the source of truth; the index must hold one point per live chunk and nothing
else. Crashes are handled by the swap protocol (``swap.py``), but an index folder deleted or
restored from an old copy, a Qdrant collection dropped by hand, or points left by an older
citewise can still make them disagree. Nothing then looks wrong: runs report "unchanged" and
search quietly misses documents.

* ``check`` is cheap (two counts and a sample of ids) and runs when the server starts, on every
  ``/healthz`` for operators, and at the start of every ingest run.
* ``reconcile`` compares every point with the catalog: points of no live chunk are deleted, and
  the documents whose points are missing are returned, so that the run indexes them again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from citewise.index.blobs import BlobStore
from citewise.index.catalog import Catalog
from citewise.index.vector_index import VectorIndex

SAMPLE = 20


@dataclass
class IndexHealth:
    catalog_chunks: int
    points: int
    sampled: int
    missing: int  # sampled live chunks without a point
    open_swaps: int

    @property
    def ok(self) -> bool:
        return self.missing == 0 and (self.open_swaps > 0 or self.points == self.catalog_chunks)

    def problem(self) -> str | None:
        if self.ok:
            return None
        if self.points == 0 and self.catalog_chunks:
            what = (f"the vector index is empty but the catalog lists {self.catalog_chunks} "
                    "chunks: the index was deleted or replaced")
        elif self.missing:
            what = (f"{self.missing} of {self.sampled} sampled chunks have no point in the "
                    f"vector index ({self.points} points for {self.catalog_chunks} chunks)")
        else:
            what = (f"the vector index holds {self.points} points for the catalog's "
                    f"{self.catalog_chunks} chunks")
        return (f"{what}. Run `citewise ingest --all`: each run puts back the points its "
                "source's documents are missing and removes points nothing refers to")


def check(catalog: Catalog, index: VectorIndex, sample: int = SAMPLE) -> IndexHealth:
    ids = catalog.sample_chunk_ids(sample)
    return IndexHealth(
        catalog_chunks=catalog.count_chunks(),
        points=index.count(),
        sampled=len(ids),
        missing=len(index.missing(ids)) if ids else 0,
        open_swaps=len(catalog.pending_writes()),
    )


@dataclass
class Reconciled:
    orphans_deleted: int = 0
    # Documents (ids) whose live version lacks some of its points in the index.
    incomplete: set[str] = field(default_factory=set)


def reconcile(catalog: Catalog, index: VectorIndex) -> Reconciled:
    """Delete points no live chunk owns; return the documents that lack points.

    Call it with no swap open (after ``VersionSwap.recover``) and no other writer running.
    """
    live = catalog.live_points()
    present: dict[str, set[str]] = defaultdict(set)
    orphans: list[str] = []
    for point_id, document_id, version in index.scan():
        entry = live.get(document_id or "")
        if entry is None or version != entry[0] or point_id not in entry[1]:
            orphans.append(point_id)
        else:
            present[document_id].add(point_id)  # type: ignore[index]
    index.delete_points(orphans)
    incomplete = {doc for doc, (_, ids) in live.items() if ids - present[doc]}
    return Reconciled(orphans_deleted=len(orphans), incomplete=incomplete)


def verify(catalog: Catalog, index: VectorIndex, blobs: BlobStore) -> list[str]:
    """Everything that disagrees between the three stores, in words; empty when they agree.

    Every live chunk has exactly one point (the point id names document, version and
    position, so a point of the wrong version is a point of no live chunk); every point belongs
    to a live chunk; every document's blob exists and every blob belongs to a document; no swap
    is left open.
    """
    problems = []
    for pending in catalog.pending_writes():
        problems.append(f"open {pending.kind} of document {pending.document_id} "
                        f"({pending.phase})")
    live = catalog.live_points()
    owner = {pid: doc for doc, (_, ids) in live.items() for pid in ids}
    seen: set[str] = set()
    for point_id, document_id, version in index.scan():
        if point_id in seen:
            problems.append(f"point {point_id} appears twice")
        seen.add(point_id)
        if owner.get(point_id) is None:
            problems.append(f"point {point_id} (document {document_id}, version {version}) "
                            "belongs to no live chunk")
    for point_id in sorted(set(owner) - seen):
        problems.append(f"chunk {point_id} of document {owner[point_id]} has no point")
    wanted = catalog.all_blob_keys()
    stored = set(blobs.keys())
    problems.extend(f"blob {key} is missing" for key in sorted(wanted - stored))
    problems.extend(f"blob {key} belongs to no document" for key in sorted(stored - wanted))
    return problems
