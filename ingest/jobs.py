"""Ingest jobs: runs started over HTTP (``POST /v1/ingest/jobs``) and by the schedule, one at a
time, in the background.

``JobQueue`` is the contract the routes and the scheduler use; the composition root chooses the
implementation. On one machine, ``InProcessJobQueue`` runs each job in a thread of the process
that accepted it and keeps jobs in its memory: the embedded index admits one process, so while
``citewise serve`` runs, every ingest goes through it (the nightly cron's ``citewise ingest
--all`` and a developer's ``citewise ingest ./docs`` are handed to it over HTTP, and their
progress is read back from it). With ``CITEWISE_DATABASE_URL``, ``PostgresJobQueue``
(``pg_jobs.py``) keeps jobs as rows of the shared database: any replica accepts one, one worker
runs it, and every replica reads its progress.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from citewise.connectors.registry import build_connector
from citewise.errors import CitewiseError, NotFoundError, RunLockedError
from citewise.index.source_store import RunCounts
from citewise.ingest.pipeline import IngestPipeline, RunReport
from citewise.ingest.progress import ProgressSink, TerminalProgress
from citewise.ingest.reindex import check_index_settings
from citewise.ingest.runlock import RunLock
from citewise.malloc_arenas import release_free_memory
from citewise.settings import SourceConfig

log = logging.getLogger("citewise.ingest")

# What ``release_free_memory`` did, as the log says it.
_TRIMMED = {True: "handed back", False: "kept (none was free to hand back)",
            None: "kept (this C library has no malloc_trim)"}


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


class JobQueue(Protocol):
    def submit(self, sources: list[SourceConfig], *, trigger: str, force: bool = False) -> Job:
        """Accept a job over ``sources``: queued (or already running), never waited for.
        ``RunLockedError`` when a job is queued or running already, or another run holds the
        run lock: one at a time."""
        ...

    def get(self, job_id: str) -> Job:
        """The job as it is now; ``NotFoundError`` when this queue does not know it."""
        ...

    def jobs(self) -> list[Job]:
        """The recent jobs (at most 50), oldest first."""
        ...

    def start(self) -> None:
        """Start taking queued jobs in this process (where jobs are run by a worker)."""
        ...

    def stop(self) -> None:
        """Stop taking jobs (a job running now runs to its end)."""
        ...


def run_job(pipeline: IngestPipeline, job: Job, sources: list[SourceConfig], *, trigger: str,
            force: bool, changed: Callable[[Job], None] = lambda job: None,
            release: Callable[[], None] = lambda: None) -> None:
    """Run ``job``'s sources one after the other, keeping ``job`` up to date (its current
    source, counts, reports, and at the end its status and message); ``changed(job)`` is called
    after each change, ``counts`` included (as often as the pipeline reports them). Never
    raises for a run that failed: the job says so.

    ``release`` is called once the run is over and before ``job`` says so: whoever reads
    "done" may start the next run at once, so the locks the run held must be free by then."""
    status, message = "running", None
    try:
        job.status = "running"
        for source in sources:
            job.current, job.counts = source.name, {}
            changed(job)

            def on_counts(c: RunCounts) -> None:
                job.counts = asdict(c)
                changed(job)

            report = run_source(
                pipeline, source, trigger=trigger, force=force,
                progress=TerminalProgress(source.name, every=30), on_counts=on_counts,
            )
            job.reports.append(report_dict(report))
            # The server's log is where a scheduled or API run is read; the CLI prints its own
            # summary (logging it too printed every summary twice).
            log.info("ingest %s", report.summary())
        status = "done"
    except CitewiseError as e:
        status, message = "failed", str(e)
    except Exception as e:  # keep the process alive; the job says what happened
        log.exception("ingest job %s crashed", job.id)
        status, message = "failed", f"{type(e).__name__}: {e}"
    finally:
        job.current = None
        # What the run held at its peak is free now: handed back, so that a long-lived
        # server's heap does not stay at the largest run's peak (core/malloc_arenas.py). The
        # trim holds malloc's lock while it runs (once per run): its time is logged.
        started = time.perf_counter()
        released = release_free_memory()
        log.info("ingest job %s: freed memory %s in %.0f ms", job.id,
                 _TRIMMED[released], (time.perf_counter() - started) * 1000)
        try:
            release()
        finally:
            if status != "running":  # else interrupted (KeyboardInterrupt): on its way up
                job.status, job.message = status, message


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


def describe_sources(sources: list[SourceConfig]) -> str:
    return ", ".join(s.name for s in sources)


class InProcessJobQueue:
    """``JobQueue`` in this process's memory, each job run in a thread of its own: one
    machine's server. A restart forgets its jobs (their runs stay in the catalog)."""

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
            self.run_lock.acquire(f"ingest job ({trigger}) of {describe_sources(sources)}")
        except BaseException:
            self._busy.release()
            raise
        job = Job(id=new_job_id(), sources=[s.name for s in sources])
        with self._lock:
            self._jobs[job.id] = job
        thread = threading.Thread(
            target=self._run, args=(job, sources, trigger, force), name=f"ingest-{job.id}",
            daemon=True,
        )
        thread.start()
        return job

    def _run(self, job: Job, sources: list[SourceConfig], trigger: str, force: bool) -> None:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.run_lock.release()
                self._busy.release()

        try:
            run_job(self.pipeline, job, sources, trigger=trigger, force=force, release=release)
        finally:
            release()

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no ingest job {job_id!r} in this server")
        return job

    def jobs(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())[-50:]

    def start(self) -> None:
        """Nothing to start: each job runs in a thread of its own as it is submitted."""

    def stop(self) -> None:
        """Nothing to stop: a running job's thread ends with it."""
