"""What the catalog remembers of a source between runs, and what changed since: change detection.

The pipeline runs; this module decides. For every document a connector yields it answers "is
this the version already indexed?" (same bytes, same index signature); for syncing connectors it
builds the ``SyncRequest`` from the stored state and stores checkpoints and the final cursor; at
the end of a run it says which catalog documents are gone from the source.

Stored per source (its ``state`` in the ``SourceStore``), as the sync contract describes it
(``connectors/base.py``):

* ``cursor``: what the connector returned when the last run finished (a commit, a time);
* ``checkpoint``: written after each batch, handed back only if the run did not finish;
* ``retry``: external ids that failed last time, read again whatever the source says changed;
* ``definition``: a digest of the source's settings when that cursor was taken; a run under
  other settings reads the whole source (``definition_digest``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from citewise.connectors.base import SyncRequest
from citewise.index.catalog import DocumentCatalog, DocumentRecord
from citewise.index.source_store import SourceStore
from citewise.ingest.chunking import Chunkers
from citewise.types import PRINCIPAL_SPELLING, SourceDocument

log = logging.getLogger("citewise.ingest")


class IndexSignature:
    """What a document's chunks and vectors depend on besides its bytes.

    The chunker's version, the chunk size, the dense model and the BM25 encoder. The chunker goes
    in per kind of document, so a new code chunker re-chunks code, not every page. ``settings``
    says the same as data: what `citewise reindex` records for the index it builds
    (``ingest/reindex.py``).
    """

    def __init__(self, chunkers: Chunkers, dense_model_id: str, sparse_version: str) -> None:
        self._chunkers = chunkers
        self._base = "|".join([str(chunkers.max_tokens), dense_model_id, sparse_version])
        self.settings = {
            "chunk_max_tokens": chunkers.max_tokens,
            "embedding_model": dense_model_id,
            "bm25": sparse_version,
            "chunkers": sorted({chunkers.default.version,
                                *(c.version for c in chunkers.by_media_type.values())}),
        }

    def __call__(self, media_type: str) -> str:
        return f"{self._chunkers.for_media_type(media_type).version}|{self._base}"


def definition_digest(config: dict[str, Any], reach_options: frozenset[str] = frozenset()) -> str:
    """What a source's settings say about which documents it holds and how they read.

    The settings in ``reach_options`` (credentials, timeouts, rates: ``connectors/base.py``) are
    left out, so rotating a token or slowing the client down does not cost a full pass. How
    readers are spelled (``PRINCIPAL_SPELLING``) is part of it: a new spelling must reach the
    documents a syncing source did not change, or their old readers would match nobody.
    """
    kept = {k: v for k, v in config.items() if k not in reach_options}
    kept["principal spelling"] = PRINCIPAL_SPELLING
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SourceState:
    """One source during one run: its indexed documents, its stored sync state, what was seen."""

    def __init__(self, catalog: DocumentCatalog, sources: SourceStore, source: str,
                 signature: IndexSignature, *, incomplete: set[str] | None = None,
                 definition: str | None = None) -> None:
        self.sources = sources
        self.source = source
        self.signature = signature
        self.existing: dict[str, DocumentRecord] = catalog.documents_of_source(source)
        registered = sources.get_source(source)
        self.stored: dict[str, Any] = registered.state if registered is not None else {}
        self.seen: set[str] = set()
        # Documents whose points the index lacks (``consistency.reconcile``): indexed again even
        # though their bytes did not change.
        self.incomplete = {r.external_id for r in self.existing.values()
                           if r.id in (incomplete or set())}
        # ``definition_digest`` of the settings this run reads the source with (None: unknown,
        # never a reason for a full pass).
        self.definition = definition

    # Per document ----------------------------------------------------------------------------
    def see(self, doc: SourceDocument) -> DocumentRecord | None:
        """Note that the source still has ``doc`` (even one that failed to read: it is kept,
        not deleted) and return its indexed record, if any."""
        self.seen.add(doc.external_id)
        return self.existing.get(doc.external_id)

    def unchanged_hash(self, doc: SourceDocument, previous: DocumentRecord | None) -> str | None:
        """The content hash (of the bytes after redaction) at which ``doc`` has nothing to
        redo: its indexed version's, when that was indexed under today's signature and
        completely; None when it is to be indexed whatever its bytes."""
        if (previous is None or previous.index_signature != self.signature(doc.media_type)
                or doc.external_id in self.incomplete):
            return None
        return previous.content_hash

    # Syncing connectors ----------------------------------------------------------------------
    def sync_request(self, force: bool) -> SyncRequest:
        """The request for this run: from the stored cursor, or a resumed checkpoint.

        Documents indexed under another signature (a new chunker, model or chunk size) must be
        re-read though the source did not change them: then the request asks for everything.
        Unchanged ones under the current signature are still skipped by content hash.
        """
        stale = sum(
            1 for r in self.existing.values() if r.index_signature != self.signature(r.media_type)
        )
        if stale and not force:
            log.info("%s: %d documents were indexed with other settings; reading the whole "
                     "source", self.source, stale)
        # A new filter or new readers must reach the documents the source did not change too:
        # an exclude that drops them, readers that narrow who sees them. A cursor kept by a
        # version that recorded no definition counts as changed (one full pass, no embedding).
        redefined = (self.definition is not None and bool(self.stored.get("cursor"))
                     and self.stored.get("definition") != self.definition)
        if redefined and not force:
            log.info("%s: the source's settings changed since its last run; reading the whole "
                     "source so that they apply to every document", self.source)
        return SyncRequest(
            state=dict(self.stored.get("cursor") or {}),
            checkpoint=self.stored.get("checkpoint"),
            retry=list(self.stored.get("retry") or []),
            # A repaired index needs the incomplete documents read again as well.
            full=force or bool(stale) or bool(self.incomplete) or redefined,
        )

    def save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """After a batch is written: a crash from here on resumes after it."""
        self.sources.set_source_state(self.source, {**self.stored, "checkpoint": checkpoint})

    def finish_sync(self, cursor: dict[str, Any], retry: list[str]) -> None:
        """The run finished (succeeded or partial): the next one starts from ``cursor``."""
        self.sources.set_source_state(
            self.source, {"cursor": cursor, "checkpoint": None, "retry": sorted(set(retry)),
                          "definition": self.definition}
        )

    # Deletions -------------------------------------------------------------------------------
    def gone_after_load(self) -> list[DocumentRecord]:
        """After a complete load: every indexed document the run did not see."""
        return [r for ext, r in self.existing.items() if ext not in self.seen]

    def gone_after_sync(self, deleted: set[str], live: set[str] | None) -> list[DocumentRecord]:
        """After a sync: ids the source reported deleted, and, when it gave a complete listing,
        indexed ids missing from it. A document seen in this run is never gone."""
        gone = {e for e in deleted if e not in self.seen}
        if live is not None:
            gone |= {e for e in self.existing if e not in live and e not in self.seen}
        return [self.existing[e] for e in sorted(gone) if e in self.existing]
