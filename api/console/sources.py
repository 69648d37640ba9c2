"""The console's sources view: each source's size, readers, schedule, last runs and the
documents its last run could not ingest, read from the catalog's sources and runs (every
process's runs: the server's, a worker's, a cron's ``citewise ingest``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from citewise.index.catalog import DocumentCatalog
from citewise.index.source_store import SourceStore, sources_with_counts
from citewise.ingest.schedule import schedule_of
from citewise.settings import SourceConfig

HISTORY = 30  # runs per source in the history (the sparklines)

# What to do about a document's error, by what the error says (the connectors' own wording,
# connectors/); the first match wins. An error that names its own remedy keeps it in its text.
_HINTS = (
    ("over the limit", "raise max_file_bytes for this source, or exclude the file"),
    ("symbolic link", "link to a file inside the source folder, or copy the file in"),
    ("submodule", "declare the submodule's repository as a source of its own"),
    ("cannot read file", "check the file's permissions for the account citewise runs as"),
    ("could not download", "the next run retries; check the credentials and the network if "
                           "it fails again"),
    ("without a", "check the page in its source; the next run reads it again"),
    ("not valid utf-8", "save the file as UTF-8 text"),
    ("decode", "save the file as UTF-8 text"),
)
_DEFAULT_HINT = ("fix the document in its source and run the source again (Run now, or "
                 "citewise ingest --source {source})")
_RUN_HINT = "a problem of the whole run; the run's page lists what it met"


def hint_for(error: str, source: str, external_id: str | None) -> str:
    """What an operator can do about one recorded error."""
    if external_id is None:
        return _RUN_HINT
    low = error.lower()
    for needle, hint in _HINTS:
        if needle in low:
            return hint
    return _DEFAULT_HINT.format(source=source)


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """A run row of the source store as the console's ``RunSummary``."""
    duration = None
    if run.get("finished_at") and run.get("started_at"):
        duration = round((datetime.fromisoformat(run["finished_at"])
                          - datetime.fromisoformat(run["started_at"])).total_seconds(), 3)
    return {"run_id": run["id"], "status": run["status"], "trigger": run["trigger"],
            "started_at": run["started_at"], "finished_at": run.get("finished_at"),
            "duration_s": duration, "documents": run.get("seen", 0),
            "added": run.get("added", 0), "updated": run.get("updated", 0),
            "deleted": run.get("deleted", 0), "failed": run.get("failed", 0)}


def source_statuses(sources: SourceStore, catalog: DocumentCatalog,
                    declared: list[SourceConfig], default_readers: list[str] | None,
                    default_schedule: str | None) -> list[dict[str, Any]]:
    """Every declared or indexed source, by name, as the console's ``SourceStatus``: what
    the operator sees, every document counted (the console is for admins)."""
    rows = {r["name"]: r for r in sources_with_counts(sources, catalog)}
    configs = {s.name: s for s in declared}
    out = []
    for name in sorted(set(rows) | set(configs)):
        row, config = rows.get(name, {}), configs.get(name)
        runs = sources.list_runs(name, limit=HISTORY)
        last = runs[0] if runs else None
        failed: list[dict[str, str]] = []
        if last is not None and last.get("failed"):
            detail = sources.get_run(last["id"]) or {}
            failed = [{"uri": e["external_id"] or "", "error": e["error"],
                       "hint": hint_for(e["error"], name, e["external_id"])}
                      for e in detail.get("errors", [])
                      if not e["error"].startswith("warning:")]
        out.append({
            "name": name, "kind": row.get("type") or (config.type if config else ""),
            "declared": config is not None,
            "documents": row.get("documents", 0), "chunks": row.get("chunks", 0),
            "readers": _readers(config, default_readers),
            "schedule": schedule_of(config, default_schedule) if config else None,
            "last_success_at": row.get("last_success_at"),
            "last_run": run_summary(last) if last else None,
            "failed_documents": failed,
            "history": [run_summary(r) for r in reversed(runs)],
        })
    return out


def _readers(config: SourceConfig | None, default: list[str] | None) -> list[str]:
    if config is None:
        return []
    return list(config.readers if config.readers is not None else default or [])
