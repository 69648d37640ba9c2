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
from pathlib import Path
from typing import Any

from citewise.index.blobs import BlobStore
from citewise.index.catalog import DocumentCatalog, chunk_point_id
from citewise.index.payload import ChunkPayload, DocumentPayload
from citewise.index.vector_index import VectorIndex
from citewise.private_files import describe, too_open

SAMPLE = 20

# An index signature no chunker produces: the document is re-read by its source's next run
# (its blob was lost, or its row was rebuilt from the index rather than read from a source).
REREAD = "reread"


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


def check(catalog: DocumentCatalog, index: VectorIndex, sample: int = SAMPLE) -> IndexHealth:
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


def reconcile(catalog: DocumentCatalog, index: VectorIndex) -> Reconciled:
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


# What a point must say exactly as the catalog does: who may read it, which version of which
# document it is, and the passage itself (what search shows and cites).
CHECKED_KEYS = ("document_id", "version", "source", "readers", "title", "path", "url", "tags",
                "service", "ordinal", "text", "heading", "start_line", "end_line")


# A blob write older than this cannot still be under way: it was left by a killed process.
PARTIAL_BLOB_AGE = 3600.0


@dataclass(frozen=True)
class Finding:
    """One disagreement between the stores. ``kind``: open_swap, orphan_point, missing_point,
    stale_payload, missing_blob, orphan_blob, partial_blob, or open_permissions (the data
    folder, not a store: what other accounts may read)."""

    kind: str
    text: str
    document_id: str | None = None
    key: str | None = None  # the point id or blob key concerned

    def __str__(self) -> str:
        return self.text


def inspect(catalog: DocumentCatalog, index: VectorIndex, blobs: BlobStore) -> list[Finding]:
    """Everything that disagrees between the catalog, the vector index and the blob store.

    Every live chunk has exactly one point, of the live version, whose payload says what the
    catalog says (readers above all); every point belongs to a live chunk (a point id names
    document, version and position, so a point of an old version belongs to none); every
    document's blob exists and every blob belongs to a document; no swap is left open.
    """
    found = [Finding("open_swap", f"open {p.kind} of document {p.document_id} ({p.phase})",
                     p.document_id) for p in catalog.pending_writes()]
    live = catalog.live_points()
    owner = {pid: doc for doc, (_, ids) in live.items() for pid in ids}
    # point id -> the payload it must have, filled per document
    expected: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for point_id, payload in index.scan_payloads(CHECKED_KEYS):
        seen.add(point_id)
        document_id = owner.get(point_id)
        if document_id is None:
            found.append(Finding(
                "orphan_point", f"point {point_id} (document {payload.get('document_id')}, "
                f"version {payload.get('version')}) belongs to no live chunk",
                payload.get("document_id"), point_id))
            continue
        if point_id not in expected:
            expected.update(_expected_payloads(catalog, document_id))
        want = expected.get(point_id, {})
        wrong = [k for k in CHECKED_KEYS if _norm(payload.get(k)) != _norm(want.get(k))]
        if wrong:
            found.append(Finding(
                "stale_payload", f"point {point_id} of document {document_id} disagrees with "
                f"the catalog on {', '.join(wrong)}", document_id, point_id))
    for point_id in sorted(set(owner) - seen):
        found.append(Finding("missing_point", f"chunk {point_id} of document "
                             f"{owner[point_id]} has no point", owner[point_id], point_id))
    wanted = catalog.blob_owners()
    stored = set(blobs.keys())
    marked = catalog.documents_with_signature(REREAD)
    for key in sorted(set(wanted) - stored):
        note = (" (its document is marked to be read again by its source's next run, "
                "which stores it again)") if wanted[key] in marked else ""
        found.append(Finding("missing_blob", f"blob {key} of document {wanted[key]} is "
                             f"missing{note}", wanted[key], key))
    found.extend(Finding("orphan_blob", f"blob {key} belongs to no document", None, key)
                 for key in sorted(stored - set(wanted)))
    found.extend(Finding("partial_blob", f"{key} is a blob write a killed process left", None,
                         key) for key in blobs.leftovers(PARTIAL_BLOB_AGE))
    return found


# How a report a person reads shows each kind of finding: whole when there are few, else a
# count with a few examples, so a deleted index folder is a handful of lines rather than one
# per chunk (100k at scale). Machines get every finding (``problems``, ``--json``).
WHOLE = 5
EXAMPLES = 3

KIND_LABELS = {
    "open_swap": "document swaps a crash left open",
    "orphan_point": "points that belong to no live chunk",
    "missing_point": "chunks that have no point in the vector index",
    "stale_payload": "points whose payload disagrees with the catalog",
    "missing_blob": "blobs missing from the blob store",
    "orphan_blob": "blobs that belong to no document",
    "partial_blob": "blob writes a killed process left",
    "open_permissions": "findings of files other accounts may read",
}


@dataclass(frozen=True)
class FindingGroup:
    """The findings of one kind: ``examples`` holds them all when ``count <= WHOLE``; else one
    each of the documents with the most (``documents`` counts them), or the first few."""

    kind: str
    count: int
    documents: int
    headline: str
    examples: list[str]

    @property
    def whole(self) -> bool:
        return self.count <= WHOLE


def summarise(findings: list[Finding]) -> list[FindingGroup]:
    """``findings`` by kind, in the order the kinds first appear."""
    by_kind: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        by_kind[f.kind].append(f)
    groups = []
    for kind, items in by_kind.items():
        by_document: dict[str, list[Finding]] = defaultdict(list)
        for f in items:
            if f.document_id:
                by_document[f.document_id].append(f)
        if len(items) <= WHOLE:
            examples = [f.text for f in items]
        elif by_document:
            most = sorted(by_document.values(), key=len, reverse=True)[:EXAMPLES]
            examples = [fs[0].text + (f" (and {len(fs) - 1} more of this document)"
                                      if len(fs) > 1 else "") for fs in most]
        else:
            examples = [f.text for f in items[:EXAMPLES]]
        headline = f"{len(items)} {KIND_LABELS.get(kind, kind.replace('_', ' '))}"
        if by_document:
            headline += f", in {len(by_document)} documents"
        groups.append(FindingGroup(kind, len(items), len(by_document), headline, examples))
    return groups


def exposed(data_dir: Path) -> list[Finding]:
    """What in the data folder other accounts may read (``citewise.private_files``): one
    finding, naming the first few."""
    loose = too_open(data_dir)
    if not loose:
        return []
    return [Finding("open_permissions",
                    f"{len(loose)} files and folders in the data folder {data_dir} are readable "
                    f"by other accounts (they must be 0600, folders 0700): "
                    f"{describe(loose, data_dir)}", None, str(data_dir))]


# The brake on a repair: when the points and blobs no document owns are more than this share
# of what is stored, and the catalog lists fewer documents than those strays stand for, the
# catalog was lost (emptied, replaced by an old or a new one), not the index. Deleting them
# would finish the loss; a restore or a rebuild of the catalog undoes it.
LOST_SHARE = 0.5


@dataclass(frozen=True)
class LostCatalog:
    documents: int  # what the catalog lists
    points: int  # what the index holds
    stray_points: int
    stray_documents: int  # documents the stray points belong to
    blobs: int
    stray_blobs: int

    def __str__(self) -> str:
        return (f"the catalog lists {self.documents} documents, but {self.stray_points} of the "
                f"index's {self.points} points (of {self.stray_documents} documents) and "
                f"{self.stray_blobs} of the blob store's {self.blobs} blobs belong to none of "
                "them: the catalog was lost or emptied, not the index and the blobs, and a "
                "repair would delete them all")


# What to do about a lost catalog (said by verify, and by the repair that refuses).
RESTORE_OR_REBUILD = ("restore the data folder from a backup (`citewise --data-dir NEW restore "
                      "BACKUP`), or rebuild the catalog's documents from the index and the "
                      "blobs (`citewise verify --rebuild-catalog`, then `citewise ingest "
                      "--all`); if they really are strays, `citewise verify --repair --force` "
                      "deletes them")


def lost_catalog(catalog: DocumentCatalog, index: VectorIndex, blobs: BlobStore,
                 findings: list[Finding]) -> LostCatalog | None:
    """``findings`` (from ``inspect``) seen as a whole: a lost catalog, or ``None``."""
    stray = [f for f in findings if f.kind == "orphan_point"]
    known = catalog.current_versions({f.document_id for f in stray if f.document_id})
    stray_documents = {f.document_id for f in stray if f.document_id not in known}
    stray_blobs = sum(1 for f in findings if f.kind == "orphan_blob")
    if not stray and not stray_blobs:
        return None
    lost = LostCatalog(documents=catalog.count_documents(), points=index.count(),
                       stray_points=len(stray), stray_documents=len(stray_documents),
                       blobs=sum(1 for _ in blobs.keys()), stray_blobs=stray_blobs)
    most = (lost.stray_points > lost.points * LOST_SHARE
            or lost.stray_blobs > lost.blobs * LOST_SHARE)
    few = lost.documents < max(lost.stray_documents, lost.stray_blobs)
    return lost if most and few else None


def verify(catalog: DocumentCatalog, index: VectorIndex, blobs: BlobStore) -> list[str]:
    """``inspect`` in words; empty when the three stores agree."""
    return [str(f) for f in inspect(catalog, index, blobs)]


def _expected_payloads(catalog: DocumentCatalog, document_id: str) -> dict[str, dict[str, Any]]:
    record = catalog.get_document(document_id)
    if record is None:
        return {}
    document = DocumentPayload.for_record(record)
    return {chunk_point_id(record.id, record.version, c.ordinal):
            ChunkPayload.for_chunk(document, c).to_payload()
            for c in catalog.chunks(record.id)}


def _norm(value: object) -> object:
    """Lists compare as sets (readers and tags have no order); None and "" alike."""
    if isinstance(value, list | tuple):
        return tuple(sorted(str(v) for v in value))
    return value if value not in ("", None) else None
