"""Where ``citewise reindex`` builds a generation's catalog beside the live one.

A rebuild writes its documents, chunks and outlines (and the runs that wrote them) to a catalog
of its own, which the live catalog then takes in one transaction
(``DocumentCatalog.switch_generation``). ``CatalogStaging`` makes, counts and forgets those
catalogs, one per generation; the composition root hands the reindexer the one that goes with
the live catalog's backend (``index/sqlite_staging.py``: a database file per generation;
``index/postgres_staging.py``: a schema per generation in the live database).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from citewise.index.catalog import DocumentCatalog
from citewise.index.source_store import SourceStore


@dataclass
class StagedCatalog:
    """A generation's catalog being built: its documents and the sources they belong to."""

    catalog: DocumentCatalog
    sources: SourceStore
    # What else the staged catalog holds open and its stores do not own (a connection pool).
    release: Callable[[], None] | None = None

    def close(self) -> None:
        self.catalog.close()
        self.sources.close()
        if self.release is not None:
            self.release()


class CatalogStaging(Protocol):
    def open(self, generation: str) -> StagedCatalog:
        """The generation's staged catalog, made empty if there is none yet (a rebuild that
        resumes finds what it wrote before)."""
        ...

    def documents(self, generation: str) -> int:
        """How many documents the generation's staged catalog holds (0 when there is none);
        never makes one."""
        ...

    def discard(self, keep: str | None = None) -> None:
        """Forget every staged catalog but ``keep``'s."""
        ...
