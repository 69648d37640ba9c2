"""Ingest jobs as rows of the shared database: any replica accepts one, one worker runs it.

``POST /v1/ingest/jobs`` on any replica inserts a queued row holding the sources as that replica
resolved them (their whole config: the worker runs exactly what was accepted, whatever its own
config file says). A worker (``citewise worker``, or a ``citewise serve`` that runs jobs) polls
for queued rows, takes the run lock, and claims the oldest with ``SELECT ... FOR UPDATE SKIP
LOCKED``, so two workers never take one job; it writes the job's progress and reports to the
row as it goes, and every replica reads them from there.

One job at a time, as on one machine: a partial unique index admits one queued or running row,
so two replicas accepting jobs at the same moment cannot both succeed, and a job is refused
(409 ``run_locked``) while another run holds the run lock (a cron, a repair, a backup). A
queued job waits for the run lock when a run takes it after the job was accepted.

A running job records the token of the run lock its worker took (``pg_runlock.py``). The lock
lives as long as the worker's database session, so a job whose lock is gone has lost its
worker (killed, its machine gone, or cut off from the database): any replica that reads it
marks it failed, saying so, rather than showing "running" forever. Its sources' runs stay in
the catalog as they were left, and the next run of each source converges.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from psycopg.errors import UniqueViolation
from psycopg.types.json import Jsonb

from citewise.errors import BackendError, NotFoundError, RunLockedError
from citewise.ingest.jobs import Job, describe_sources, new_job_id, run_job
from citewise.ingest.pg_runlock import HOLDS, PostgresRunLock
from citewise.ingest.pipeline import IngestPipeline
from citewise.ingest.runlock import holder_text
from citewise.postgres import PostgresDatabase, Row
from citewise.settings import SourceConfig
from citewise.store_schema import Migration, StoreSchema

log = logging.getLogger("citewise.ingest")

SCHEMA = StoreSchema("ingest_jobs", (
    Migration("""
    CREATE TABLE ingest_jobs (
        id TEXT PRIMARY KEY,
        sources JSONB NOT NULL,
        trigger TEXT NOT NULL,
        force BOOLEAN NOT NULL DEFAULT false,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
        current TEXT,
        counts JSONB NOT NULL DEFAULT '{}',
        reports JSONB NOT NULL DEFAULT '[]',
        message TEXT,
        submitted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        worker TEXT,
        lock_token TEXT
    );
    CREATE INDEX ingest_jobs_submitted ON ingest_jobs (submitted_at);
    CREATE UNIQUE INDEX ingest_jobs_one_active ON ingest_jobs ((true))
        WHERE status IN ('queued', 'running');
    """),
))

RECENT = 50  # jobs that GET /v1/ingest/jobs lists
KEEP_DAYS = 30  # finished jobs older than this are dropped (their runs stay in the catalog)
POLL_SECONDS = 1.0  # how often an idle worker looks for a queued job
PROGRESS_SECONDS = 1.0  # at most one write of a job's counts per this
COLUMNS = "id, sources, status, current, counts, reports, message"
LOST = ("the worker running this job stopped holding the ingest run lock (it was killed, its "
        "machine went away, or it lost its database connection); the runs it started are in "
        "GET /v1/ingest/runs, and the next run of each source converges: submit the job again")


class PostgresJobQueue:
    """``JobQueue`` in ``database``; ``pipeline`` and ``run_lock`` are this process's, used when
    it runs jobs (``start``, or ``run_next`` once)."""

    def __init__(self, database: PostgresDatabase, pipeline: IngestPipeline,
                 run_lock: PostgresRunLock, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.database = database
        self.pipeline = pipeline
        self.run_lock = run_lock
        self.poll_seconds = poll_seconds
        self.worker = f"pid {os.getpid()} on {socket.gethostname()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage = False
        database.migrate(SCHEMA)

    # Accepting and reading (any replica) ------------------------------------------------------
    def submit(self, sources: list[SourceConfig], *, trigger: str, force: bool = False) -> Job:
        self.reap()
        self._refuse_if_busy()
        job = Job(id=new_job_id(), sources=[s.name for s in sources])
        try:
            with self.database.transaction() as conn:
                conn.execute(
                    "DELETE FROM ingest_jobs WHERE finished_at < now() - make_interval("
                    "days => %s)", [KEEP_DAYS])
                conn.execute(
                    "INSERT INTO ingest_jobs (id, sources, trigger, force, status) "
                    "VALUES (%s, %s, %s, %s, 'queued')",
                    [job.id, Jsonb([s.model_dump(mode="json", by_alias=False)
                                    for s in sources]), trigger, force])
        except UniqueViolation:
            # Another replica accepted one between the check and this insert.
            self._refuse_if_busy()
            raise RunLockedError("an ingest is already running",
                                 hint="wait for it to finish and try again") from None
        log.info("ingest job %s (%s) of %s queued", job.id, trigger, describe_sources(sources))
        return job

    def _refuse_if_busy(self) -> None:
        active = self.database.row(
            "SELECT id, status, current FROM ingest_jobs WHERE status IN ('queued', 'running')")
        if active is not None:
            where = f", source {active['current']}" if active["current"] else ""
            raise RunLockedError(
                f"an ingest is already {active['status']} (job {active['id']}{where})",
                hint="wait for it to finish (GET /v1/ingest/jobs/<id>) and try again")
        if self.run_lock.is_held():
            raise RunLockedError(
                "another run holds the ingest lock of this installation: "
                f"{holder_text(self.run_lock.holder())}; this job was not started",
                hint="it is released when that run ends; try again then")

    def get(self, job_id: str) -> Job:
        self.reap()
        row = self.database.row(f"SELECT {COLUMNS} FROM ingest_jobs WHERE id = %s", [job_id])
        if row is None:
            raise NotFoundError(f"no ingest job {job_id!r}",
                                hint=f"jobs are kept {KEEP_DAYS} days; GET /v1/ingest/runs "
                                     "lists the runs of every source")
        return _job(row)

    def jobs(self) -> list[Job]:
        self.reap()
        rows = self.database.rows(
            f"SELECT {COLUMNS} FROM ingest_jobs ORDER BY submitted_at DESC, id LIMIT %s",
            [RECENT])
        return [_job(r) for r in reversed(rows)]

    def reap(self) -> int:
        """Mark failed every running job whose worker no longer holds the run lock it took;
        how many."""
        return self.database.execute(
            "UPDATE ingest_jobs j SET status = 'failed', current = NULL, message = %s, "
            "finished_at = now() WHERE j.status = 'running' AND NOT EXISTS ("
            f"SELECT 1 FROM run_lock_holders h WHERE h.lock_key = %s "
            f"AND h.token = j.lock_token AND {HOLDS})", [LOST, self.run_lock.key])

    # Running (a worker) -----------------------------------------------------------------------
    def run_next(self) -> bool:
        """Claim the oldest queued job and run it to its end, in this thread; False when there
        is none, or another run holds the run lock (the job waits for it)."""
        self.reap()
        if self.database.row("SELECT 1 FROM ingest_jobs WHERE status = 'queued'") is None:
            return False  # the common case, without touching the run lock
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT id, sources, trigger, force FROM ingest_jobs WHERE status = 'queued' "
                "ORDER BY submitted_at LIMIT 1 FOR UPDATE SKIP LOCKED").fetchone()
            if row is None:
                return False  # another worker is claiming it
            sources = [SourceConfig.model_validate(s) for s in row["sources"]]
            try:
                self.run_lock.acquire(f"ingest job {row['id']} ({row['trigger']}) of "
                                      f"{describe_sources(sources)}")
            except RunLockedError as e:
                log.info("ingest job %s waits for the run lock: %s", row["id"], e.message)
                return False
            try:
                conn.execute(
                    "UPDATE ingest_jobs SET status = 'running', started_at = now(), "
                    "worker = %s, lock_token = %s WHERE id = %s",
                    [self.worker, self.run_lock.token, row["id"]])
            except BaseException:
                self.run_lock.release()
                raise
        job = Job(id=row["id"], sources=[s.name for s in sources], status="running")
        log.info("ingest job %s (%s) started by %s", job.id, row["trigger"], self.worker)
        try:
            run_job(self.pipeline, job, sources, trigger=row["trigger"], force=row["force"],
                    changed=self._progress(job))
            self._finish(job)
        finally:
            self.run_lock.release()
        return True

    def _progress(self, job: Job) -> Callable[[Job], None]:
        """``run_job``'s ``changed``: the job's row follows it, counts at most once a
        second. A write that fails (the database is away) is skipped: the run goes on, and
        its end is written when the database answers."""
        last_source: str | None = None
        last_at = 0.0

        def changed(job: Job) -> None:
            nonlocal last_source, last_at
            now = time.monotonic()
            if job.current == last_source and now - last_at < PROGRESS_SECONDS:
                return
            last_source, last_at = job.current, now
            try:
                self.database.execute(
                    "UPDATE ingest_jobs SET current = %s, counts = %s, reports = %s "
                    "WHERE id = %s AND status = 'running'",
                    [job.current, Jsonb(job.counts), Jsonb(job.reports), job.id])
            except BackendError as e:
                log.warning("ingest job %s: its progress was not written: %s", job.id,
                            e.message)
        return changed

    def _finish(self, job: Job) -> None:
        """The job's end, before its run lock goes. Only over a row still running: a job
        marked failed meanwhile (its lock was lost) stays failed, with what it did."""
        for attempt in range(30):
            try:
                self.database.execute(
                    "UPDATE ingest_jobs SET status = CASE WHEN status = 'running' THEN %s "
                    "ELSE status END, current = NULL, counts = %s, reports = %s, "
                    "message = CASE WHEN status = 'running' THEN %s ELSE message END, "
                    "finished_at = now() WHERE id = %s",
                    [job.status, Jsonb(job.counts), Jsonb(job.reports), job.message, job.id])
                log.info("ingest job %s %s", job.id, job.status)
                return
            except BackendError as e:
                if attempt == 0:
                    log.warning("ingest job %s ended (%s) but the database is away: %s; "
                                "retrying for a minute", job.id, job.status, e.message)
                time.sleep(2)
        log.error("ingest job %s ended (%s) and could not be recorded; its runs are in the "
                  "catalog", job.id, job.status)

    def start(self) -> None:
        """Take queued jobs in a thread of this process until ``stop``."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._work, name="citewise-ingest-worker",
                                        daemon=True)
        self._thread.start()
        log.info("ingest worker: taking jobs from the database %s", self.database.display)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                ran = self.run_next()
                if self._outage:
                    self._outage = False
                    log.info("ingest worker: the database answers again")
            except BackendError as e:
                # Said once per outage, not every second; the loop keeps polling.
                if not self._outage:
                    self._outage = True
                    log.warning("ingest worker: %s; waiting for it", e.message)
                ran = False
            except Exception:  # the worker must outlive one bad job
                log.exception("ingest worker: taking a job failed; going on")
                ran = False
            if not ran:
                self._stop.wait(self.poll_seconds)


def _job(row: Row) -> Job:
    return Job(id=row["id"], sources=[s["name"] for s in row["sources"]],
               status=row["status"], current=row["current"], counts=dict(row["counts"]),
               reports=list(row["reports"]), message=row["message"])

