"""A lost catalog's documents rebuilt from what the index and the blob store still hold.

When the catalog is emptied, replaced or moved aside while the index and the blobs are intact,
the index's points are the installation: each carries its document's fields and its chunk's
(``index/payload.py``), readers above all. So the documents' rows and chunks can be written
back from them, without a source and without the model, and search answers the same readers
as before. ``repair`` would delete those points as strays instead (``consistency.lost_catalog``
stops it).

What a point carries, and so what is exact: the document id, version, source, title, path,
url, link template, readers, tags, service and the connector's metadata; every chunk's text
(from which the chunks aimed at a model are found again), heading, anchor, lines and symbol.
Found from the blobs: a document's blob (and so its content hash and size) is the blob whose
digest gives the document's version under this process's index signature (``version =
sha256(content_hash | signature)``), which also says whether it was chunked as code. What no
store holds, and is made up:

* the external id, when neither the path nor a metadata value hashes to the document id;
* the media type among those chunked alike (Markdown, HTML, text): from the path's suffix;
* when it was indexed and updated, the count of front-matter lines, each chunk's token count,
  and the outline answers are built from;
* a document whose version matches no blob (indexed with other settings, or its blob lost)
  gets no blob.

So every rebuilt document is marked to be read again (``REREAD``): the next ``citewise
ingest`` of its source reads it, finds the same version (same bytes, same settings, so the
same point ids: nothing is duplicated) and writes the exact row, outline and blob. Until then
search and answers work from the rebuilt rows, with the readers the points carry.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from citewise.connectors.folder import MEDIA_TYPES
from citewise.index.catalog import DocumentRecord, document_id, now
from citewise.index.injection import injected_chunks
from citewise.index.payload import ChunkPayload
from citewise.ingest.consistency import REREAD
from citewise.ingest.pipeline import IngestPipeline
from citewise.types import CODE_MEDIA_TYPE, Chunk

log = logging.getLogger("citewise.ingest")

# Every media type a connector yields; those that share a chunker are told apart by suffix.
KNOWN_MEDIA_TYPES = ("text/markdown", "text/html", "text/plain", CODE_MEDIA_TYPE)
PAYLOAD_KEYS = tuple(f for f in ChunkPayload.__dataclass_fields__)


@dataclass
class RebuildReport:
    documents: int = 0  # rows written back
    chunks: int = 0
    with_blob: int = 0  # of those, whose blob was found
    guessed_external_ids: list[str] = field(default_factory=list)  # document ids
    skipped: int = 0  # documents the catalog already lists

    def to_dict(self) -> dict[str, Any]:
        return {"documents": self.documents, "chunks": self.chunks,
                "with_blob": self.with_blob, "skipped": self.skipped,
                "guessed_external_ids": self.guessed_external_ids}


def rebuild_catalog(pipeline: IngestPipeline, source_types: dict[str, str]) -> RebuildReport:
    """Write back the documents (and chunks) of the index's points that the catalog does not
    list; ``source_types`` names each declared source's connector type (a source the config
    no longer declares is recorded as ``unknown``). The caller holds the run lock."""
    catalog, index, blobs = pipeline.catalog, pipeline.index, pipeline.blobs
    report = RebuildReport()
    pipeline.swap.recover()
    by_document: dict[str, dict[str, list[tuple[str, dict[str, Any]]]]] = defaultdict(
        lambda: defaultdict(list))
    for point_id, payload in index.scan_payloads(PAYLOAD_KEYS):
        if payload.get("document_id") and payload.get("version"):
            by_document[payload["document_id"]][payload["version"]].append((point_id, payload))
    listed = catalog.current_versions(by_document)
    report.skipped = len(listed)
    blob_of = _blobs_by_version(pipeline, blobs.keys())
    for doc_id in sorted(set(by_document) - set(listed)):
        versions = by_document[doc_id]
        # Points of more than one version: the one whose blob is found (the live one when the
        # catalog was lost; the others are strays a repair deletes), else the largest.
        version = next((v for v in versions if v in blob_of),
                       max(versions, key=lambda v: len(versions[v])))
        points = sorted(versions[version], key=lambda p: p[1].get("ordinal") or 0)
        record, chunks, exact_id = _record(doc_id, version, points, blob_of.get(version),
                                           pipeline)
        if not exact_id:
            report.guessed_external_ids.append(doc_id)
        if pipeline.sources.get_source(record.source) is None:
            # Its next run records its settings; no cursor, so it reads the source whole.
            pipeline.sources.ensure_source(
                record.source, source_types.get(record.source, "unknown"), {})
        catalog.save_document(record, chunks, [pid for pid, _ in points])
        report.documents += 1
        report.chunks += len(chunks)
        report.with_blob += record.blob_key != ""
    log.info("catalog rebuilt from the index: %d documents (%d chunks), %d with their blob, "
             "%d external ids guessed", report.documents, report.chunks, report.with_blob,
             len(report.guessed_external_ids))
    return report


def _blobs_by_version(pipeline: IngestPipeline,
                      keys: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``version -> (blob key, media type)`` for every stored blob under every signature this
    process indexes with; a version is a digest of the bytes and the signature, so a match is
    that document's bytes."""
    signatures: dict[str, str] = {}
    for media_type in KNOWN_MEDIA_TYPES:
        signatures.setdefault(pipeline.signature(media_type), media_type)
    found: dict[str, tuple[str, str]] = {}
    for key in keys:
        digest = key.rsplit("/", 1)[-1]
        for signature, media_type in signatures.items():
            version = hashlib.sha256(f"{digest}|{signature}".encode()).hexdigest()[:16]
            found[version] = (key, media_type)
    return found


def _record(doc_id: str, version: str, points: list[tuple[str, dict[str, Any]]],
            blob: tuple[str, str] | None, pipeline: IngestPipeline
            ) -> tuple[DocumentRecord, list[Chunk], bool]:
    first = ChunkPayload.from_payload(points[0][1])
    blob_key, media_type = blob if blob else ("", "")
    if media_type != CODE_MEDIA_TYPE:
        media_type = _media_type(first.path, pipeline, blob_key)
    size = 0
    if blob_key:
        try:
            size = len(pipeline.blobs.get(blob_key))
        except KeyError:
            blob_key = ""
    record = DocumentRecord(
        id=doc_id, source=first.source, external_id="", title=first.title,
        media_type=media_type, content_hash=blob_key.rsplit("/", 1)[-1], version=version,
        # Read again by the next run of its source (see the module's docstring).
        index_signature=REREAD, readers=list(first.readers), blob_key=blob_key,
        indexed_at=now(), path=first.path, url=first.url, tags=list(first.tags),
        service=first.service, metadata=dict(first.meta), chunk_count=len(points),
        size_bytes=size, link_template=first.link_template)
    exact = _external_id_hashing(record, points[0][1])
    record.external_id = exact or first.path or doc_id
    chunks = []
    for _, payload in points:
        p = ChunkPayload.from_payload(payload)
        chunks.append(Chunk(document_id=doc_id, ordinal=p.ordinal, text=p.text,
                            heading=p.heading, anchor=p.anchor, start_line=p.start_line,
                            end_line=p.end_line, symbol=p.symbol))
    record.injection_chunks = injected_chunks(chunks)
    return record, chunks, exact is not None


def _external_id_hashing(record: DocumentRecord, payload: dict[str, Any]) -> str | None:
    """The candidate (the path, a metadata value) whose id is the document's: exact."""
    candidates = [record.path, *(str(v) for v in (payload.get("meta") or {}).values()
                                 if isinstance(v, str | int))]
    return next((c for c in candidates if c and document_id(record.source, c) == record.id),
                None)


def _media_type(path: str | None, pipeline: IngestPipeline, blob_key: str) -> str:
    suffix = PurePosixPath(path or "").suffix.lower()
    if suffix in MEDIA_TYPES:
        return MEDIA_TYPES[suffix]
    if blob_key:
        try:
            if pipeline.blobs.get(blob_key).lstrip()[:1] == b"<":
                return "text/html"
        except KeyError:
            pass
    return "text/plain"
