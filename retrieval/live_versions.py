"""Which version of each document is live, remembered between searches.

Every search drops hits whose document version is not the catalog's live one (a re-ingest
writes the new version beside the old: ``ingest/swap.py``), and asking the catalog for the
versions of a page's documents was a tenth of a search's CPU at 113k chunks
(bench/results/profile-before.md). A live version only changes or goes when a swap that
takes one away commits, and the catalog counts those (``DocumentCatalog.swaps_committed``),
which each search already reads to notice a swap that commits while it runs. So the versions
are kept for as long as that count and the index generation stay what they were, and
forgotten together when either moves. A document's first version is not counted (it takes
nothing away): that is why only the versions found are remembered, never a document's absence.

Correctness does not rest on the memory being fresh: a search that sees the count change
while it ran is asked again (``SearchService._fused``), and permissions never depend on
versions at all (the readers filter is inside the index query).
"""

from __future__ import annotations

from collections.abc import Iterable
from threading import Lock

from citewise.index.catalog import DocumentCatalog

# Enough for every document of a large installation (a version id is ~40 bytes: ~20 MB at the
# bound); past it the memory starts again rather than growing.
MAX_DOCUMENTS = 200_000


class LiveVersions:
    def __init__(self, catalog: DocumentCatalog, *, max_documents: int = MAX_DOCUMENTS) -> None:
        self.catalog = catalog
        self.max_documents = max_documents
        self._mark: tuple[str, str | None] | None = None
        self._versions: dict[str, str] = {}
        self._lock = Lock()
        self.reads = 0  # catalog reads made (what the memory saves is searches minus this)

    def of(self, document_ids: Iterable[str], *, committed: str,
           generation: str | None) -> dict[str, str]:
        """The live version of each of ``document_ids`` the catalog holds, as of ``committed``
        (the swap count the caller read before its index queries) in ``generation``."""
        mark = (committed, generation)
        wanted = set(document_ids)
        with self._lock:
            if mark != self._mark:
                self._mark, self._versions = mark, {}
            known = {d: v for d in wanted if (v := self._versions.get(d)) is not None}
        missing = wanted - known.keys()
        if not missing:
            return known
        # Read outside the lock: other searches go on meanwhile. A swap that commits during
        # the read may make what is stored newer than ``mark``; that search sees the count
        # move and asks again, and the next search's new mark starts the memory afresh.
        found = self.catalog.current_versions(missing)
        with self._lock:
            self.reads += 1
            if self._mark == mark:
                if len(self._versions) + len(found) > self.max_documents:
                    self._versions = {}
                self._versions.update(found)
        return {**known, **found}
