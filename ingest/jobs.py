"""Runs ingests for a long-lived process (the API server): one at a time, in the background.

The embedded index admits one process, so while ``citewise serve`` runs, every ingest goes
through it: the nightly cron's ``citewise ingest --all`` and a developer's ``citewise ingest
./docs`` are handed to this queue over HTTP, and their progress is read back from it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from citewise.connectors.registry import build_connector
from citewise.errors import CitewiseError, NotFoundError, RunLockedError
from citewise.index.source_store import RunCounts
from citewise.ingest.pipeline import IngestPipeline, RunReport
from citewise.ingest.progress import ProgressSink, TerminalProgress
from citewise.ingest.reindex import check_index_settings
from citewise.ingest.runlock import RunLock
from citewise.settings import SourceConfig

log = logging.getLogger("citewise.ingest")


@dataclass
class Job:
    id: str
    sources: list[str]
    status: str = "queued"  # queued | running | done | failed
    current: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    reports: list[dict[str, Any]] = field(default_factory=list)
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def report_dict(report: RunReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id,
        "source": report.source,
        "status": report.status,
        "seconds": round(report.seconds, 2),
        "message": report.message,
        "summary": report.summary(),
        "errors": [{"external_id": e, "error": m} for e, m in report.errors],
        "run_errors": list(report.run_errors),
        "warnings": list(report.warnings),
        **asdict(report.counts),
    }


def run_source(
    pipeline: IngestPipeline, source: SourceConfig, *, trigger: str, force: bool = False,
    progress: ProgressSink | None = None, on_counts: Callable[[RunCounts], None] | None = None,
) -> RunReport:
    """Build the source's connector and run the pipeline over it."""
    check_index_settings(pipeline.catalog, pipeline.signature)
    connector = build_connector(source, data_dir=pipeline.work_dir)
    config = {"type": source.type, "readers": source.readers, **source.options()}
    return pipeline.run(
        source.name,
        source.type,
        connector,
        config=config,
        trigger=trigger,
        force=force,
        progress=progress,
        on_counts=on_counts,
    )


class JobQueue:
    def __init__(self, pipeline: IngestPipeline, lock: RunLock) -> None:
        self.pipeline = pipeline
        # The data folder's run lock: also held by cron runs in other processes.
        self.run_lock = lock
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._busy = threading.Lock()

    def submit(self, sources: list[SourceConfig], *, trigger: str, force: bool = False) -> Job:
        if not self._busy.acquire(blocking=False):
            running = next((j for j in self._jobs.values() if j.status == "running"), None)
            raise RunLockedError(
                "an ingest is already running"
                + (f" (job {running.id}, source {running.current})" if running else ""),
                hint="wait for it to finish (GET /v1/ingest/jobs/<id>) and try again",
            )
        try:
            self.run_lock.acquire(f"ingest job ({trigger}) of {', '.join(s.name for s in sources)}")
        except BaseException:
            self._busy.release()
            raise
        job = Job(id=uuid.uuid4().hex[:12], sources=[s.name for s in sources])
        with self._lock:
            self._jobs[job.id] = job
        thread = threading.Thread(
            target=self._run, args=(job, sources, trigger, force), name=f"ingest-{job.id}",
            daemon=True,
        )
        thread.start()
        return job

    def _run(self, job: Job, sources: list[SourceConfig], trigger: str, force: bool) -> None:
        try:
            job.status = "running"
            for source in sources:
                job.current = source.name

                def on_counts(c: RunCounts) -> None:
                    job.counts = asdict(c)

                report = run_source(
                    self.pipeline, source, trigger=trigger, force=force,
                    progress=TerminalProgress(source.name, every=30), on_counts=on_counts,
                )
                job.reports.append(report_dict(report))
                # The server's log is where a scheduled or API run is read; the CLI prints
                # its own summary (logging it too printed every summary twice).
                log.info("ingest %s", report.summary())
            job.status = "done"
        except CitewiseError as e:
            job.status, job.message = "failed", str(e)
        except Exception as e:  # keep the server alive; the job says what happened
            log.exception("ingest job %s crashed", job.id)
            job.status, job.message = "failed", f"{type(e).__name__}: {e}"
        finally:
            job.current = None
            self.run_lock.release()
            self._busy.release()

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no ingest job {job_id!r} in this server")
        return job

    def jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())[-50:]
