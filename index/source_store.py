"""The sources the catalog's documents come from, and the record of every ingest run.

A source is registered by its first run (its name, connector type and settings) and keeps what
the next run needs: the sync state (``ingest/state.py``) and its healthy size for the
mass-deletion brake. Every run leaves a row, whichever process ran it (the server, a cron's
``citewise ingest``), with its counts, status and the errors of the documents it could not read:
what ``/v1/ingest/runs``, the library's sources and the ingest gauges show. Ingest writes here;
retrieval and the API read (which is why the store lives in ``index/``: both layers may).

``SourceStore`` is the contract; ``index/sqlite_source_store.py`` keeps it in the embedded
database, beside the document catalog, and ``index/postgres_source_store.py`` in PostgreSQL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from citewise.index.catalog import DocumentCatalog


@dataclass
class SourceRecord:
    name: str
    type: str
    config: dict[str, Any] = field(default_factory=dict)  # the connector's options
    state: dict[str, Any] = field(default_factory=dict)  # the sync state (ingest/state.py)
    created_at: str = ""
    updated_at: str = ""
    healthy_documents: int | None = None  # its size after its last healthy run


@dataclass
class RunCounts:
    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0


# A run as ``get_run``, ``list_runs`` and ``export_runs`` give it (``get_run`` adds its errors).
RUN_FIELDS = ("id", "source", "trigger", "status", "started_at", "finished_at",
              *(f.name for f in fields(RunCounts)), "message", "host", "pid")


class SourceStore(Protocol):
    # Sources -----------------------------------------------------------------------------------
    def ensure_source(self, name: str, type: str, config: dict[str, Any]) -> None:
        """Register the source, or update its type and settings (its state stays)."""
        ...

    def get_source(self, name: str) -> SourceRecord | None: ...

    def list_sources(self) -> list[SourceRecord]:
        """Every registered source, by name."""
        ...

    def set_source_state(self, name: str, state: dict[str, Any]) -> None: ...

    def healthy_documents(self, name: str) -> int | None: ...

    def set_healthy_documents(self, name: str, count: int) -> None: ...

    # Runs --------------------------------------------------------------------------------------
    def start_run(self, source: str, trigger: str) -> int:
        """A new run of ``source``, ``running``; its id. A run of the source still marked
        running died with its process: it is marked ``interrupted``."""
        ...

    def update_run(self, run_id: int, counts: RunCounts) -> None: ...

    def finish_run(self, run_id: int, counts: RunCounts, status: str,
                   message: str | None = None) -> None: ...

    def record_error(self, run_id: int, source: str, external_id: str | None,
                     error: str) -> None: ...

    def get_run(self, run_id: int) -> dict[str, Any] | None:
        """The run's row with its ``errors`` (``external_id``, ``error``), in order."""
        ...

    def list_runs(self, source: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """The latest runs (of one source), newest first."""
        ...

    def last_finished(self) -> dict[str, tuple[str | None, str | None]]:
        """Per source, when its last succeeded run ended, and its last run that went through
        the whole source (succeeded or partial)."""
        ...

    def settle_dead_runs(self) -> int:
        """Mark ``interrupted`` the runs still ``running`` whose process is gone (killed, or
        stopped by a second Ctrl-C while it wrote its last batches); how many. Otherwise such
        a row would say ``running`` until the source's next run. Reading runs does this."""
        ...

    def keep_room_for_final_word(self) -> None:
        """Make sure a run stopped by a full disk can still record how it ended (a backend
        whose writes do not need room on this machine's disk does nothing)."""
        ...

    def free_room_for_final_word(self) -> bool:
        """Give that room back to the disk, to write the run's end; False when there was none."""
        ...

    # A copy of the whole store (``citewise migrate-catalog``: another installation's state
    # brought into this one, rerun until the cut-over, so every write here is idempotent) ----
    def import_source(self, record: SourceRecord) -> None:
        """Keep ``record`` whole (its settings, sync state, healthy size and both times),
        replacing the source of that name."""
        ...

    def export_runs(self) -> Iterator[dict[str, Any]]:
        """Every run, lowest id first, as ``RUN_FIELDS`` and its ``errors`` (``external_id``,
        ``error``, ``at``): the same keys from every backend, so that one backend's runs
        import into another's."""
        ...

    def import_runs(self, runs: list[dict[str, Any]]) -> int:
        """Keep these runs (as ``export_runs`` gives them) under their own ids, each with its
        errors, all or none; a run whose id is kept already is left as it is. How many were
        new. A run started later gets an id above every id kept."""
        ...

    def close(self) -> None: ...


def sources_with_counts(sources: SourceStore, catalog: DocumentCatalog,
                        principals: list[str] | None = None) -> list[dict[str, Any]]:
    """Every registered source with its documents and chunks (with ``principals``, only those
    one of them may read) and when its last runs ended: what the library, ``citewise sources``
    and the ingest gauges list."""
    counts = catalog.source_counts(principals)
    finished = sources.last_finished()
    out = []
    for s in sources.list_sources():
        documents, chunks = counts.get(s.name, (0, 0))
        last_success, last_completed = finished.get(s.name, (None, None))
        out.append({"name": s.name, "type": s.type, "created_at": s.created_at,
                    "updated_at": s.updated_at, "documents": documents, "chunks": chunks,
                    "last_success_at": last_success, "last_completed_at": last_completed})
    return out


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one of another account's too): how a
    store tells a run whose process died from one still going (``settle_dead_runs``)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
