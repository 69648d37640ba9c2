"""Each due time of the schedule runs once, however many schedulers run it: every replica of a
deployment on PostgreSQL runs one, over one runs table. The second scheduler to find a source
due is refused by the job queue (one job at a time), tries again five minutes later, and then
finds the run it was due for in the shared runs table, so it does not run it again."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from citewise.api.composition import build_stores
from citewise.api.settings import Settings
from citewise.index.source_store import SourceStore
from citewise.ingest.jobs import InProcessJobQueue, Job
from citewise.ingest.pg_jobs import PostgresJobQueue
from citewise.ingest.pg_runlock import PostgresRunLock
from citewise.ingest.runlock import FileRunLock
from citewise.ingest.schedule import SLOT_GRACE, Scheduler, last_run_started, plan, zone_of
from tests.kb import folder_source, write_kb

UTC_ZONE = zone_of("UTC")


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _daily_slot() -> tuple[str, datetime]:
    """A daily cron whose due time is the minute just begun: the runs this test starts for
    real, now, start after it (the runs table records the wall clock)."""
    slot = datetime.now(UTC).replace(second=0, microsecond=0)
    return f"{slot.minute} {slot.hour} * * *", slot


def _wait(queue, job: Job) -> Job:
    for _ in range(2400):
        got = queue.get(job.id)
        if got.status in ("done", "failed"):
            return got
        time.sleep(0.05)
    raise AssertionError(f"job {job.id} did not finish")


def test_two_schedulers_on_one_database_run_each_due_time_once(tmp_path, postgres_url,
                                                               make_services):
    services = make_services(tmp_path / "data", database_url=postgres_url)
    source = folder_source(write_kb(tmp_path / "kb"))
    # Replica B: stores of its own on the same database (the runs it reads are A's too).
    other = build_stores(Settings(data_dir=tmp_path / "data-b", database_url=postgres_url))
    other_pool = other.postgres
    assert other_pool is not None
    try:
        replica_a = services.jobs
        replica_b = PostgresJobQueue(other_pool, services.pipeline, PostgresRunLock(other_pool))
        cron, slot = _daily_slot()
        clock = Clock(slot - timedelta(hours=1))
        submitted: dict[str, list[Job]] = {"a": [], "b": []}

        def scheduler(name: str, queue, runs: SourceStore) -> Scheduler:
            def submit(names: list[str], trigger: str) -> None:
                submitted[name].append(queue.submit([source], trigger=trigger))
            return Scheduler(plan(cron, [source]), UTC_ZONE, submit,
                             lambda n: last_run_started(runs, n), now=clock, catch_up=False)

        a = scheduler("a", replica_a, services.sources)
        b = scheduler("b", replica_b, other.sources)
        assert a.tick() == slot and b.tick() == slot
        clock.now = slot
        assert a.tick() == slot + timedelta(days=1)
        # B finds the source due too: refused (A's job is queued), it tries again shortly.
        assert b.tick() == slot + timedelta(minutes=5)
        assert len(submitted["a"]) == 1 and submitted["b"] == []
        assert replica_b.run_next() is True  # a worker runs A's job
        assert replica_a.get(submitted["a"][0].id).status == "done"
        clock.now = slot + timedelta(minutes=5)
        assert b.tick() == slot + timedelta(days=1)  # served: nothing submitted
        assert submitted["b"] == []
        runs = other.sources.list_runs("kb")
        assert len(runs) == 1 and runs[0]["trigger"] == "schedule"
    finally:
        other.close()


def test_two_schedulers_on_one_data_folder_run_each_due_time_once(tmp_path, make_services):
    """The same rule on one machine's SQLite catalog (two processes' schedulers sharing a
    data folder with a Qdrant server): the run lock file refuses the second."""
    services = make_services(tmp_path / "data")
    source = folder_source(write_kb(tmp_path / "kb"))
    lock_path = services.settings.data.run_lock_path
    queue_a = services.jobs
    queue_b = InProcessJobQueue(services.pipeline, FileRunLock(lock_path))
    cron, slot = _daily_slot()
    clock = Clock(slot - timedelta(minutes=10))
    jobs: list[Job] = []

    def scheduler(queue) -> Scheduler:
        return Scheduler(plan(cron, [source]), UTC_ZONE,
                         lambda names, trigger: jobs.append(queue.submit([source],
                                                                         trigger=trigger)),
                         lambda n: last_run_started(services.sources, n), now=clock,
                         catch_up=False)

    a, b = scheduler(queue_a), scheduler(queue_b)
    clock.now = slot
    a.tick()
    # A's job holds the lock file (B tries again in five minutes), or has already started
    # its run (B finds the time served at once); either way B runs nothing.
    retry = b.tick()
    assert retry in (slot + timedelta(minutes=5), slot + timedelta(days=1))
    assert _wait(queue_a, jobs[0]).status == "done"
    clock.now = slot + timedelta(minutes=5)
    assert b.tick() == slot + timedelta(days=1)
    assert len(jobs) == 1 and len(services.sources.list_runs("kb")) == 1


def _submits_after(started: datetime, slot: datetime) -> bool:
    """Whether a scheduler due at ``slot`` submits a run when the source's last run started at
    ``started``."""
    submitted: list[list[str]] = []
    clock = Clock(slot - timedelta(hours=1))
    scheduler = Scheduler(plan("30 2 * * *", [folder_source(Path("/srv/kb"))]), UTC_ZONE,
                          lambda names, trigger: submitted.append(names),
                          lambda n: started if started <= clock.now else None,
                          now=clock, catch_up=False)
    clock.now = slot + timedelta(minutes=2)
    scheduler.tick()
    return bool(submitted)


def test_which_run_serves_a_due_time():
    """A run that started at or after the due time serves it (a cron's as well as another
    replica's job); up to SLOT_GRACE before it too (clocks differ a little); an earlier one,
    the previous due time's, does not."""
    slot = datetime(2026, 12, 3, 2, 30, tzinfo=UTC)
    assert not _submits_after(slot + timedelta(minutes=1), slot)
    assert not _submits_after(slot - SLOT_GRACE + timedelta(seconds=1), slot)
    assert _submits_after(slot - SLOT_GRACE - timedelta(seconds=1), slot)
    assert _submits_after(slot - timedelta(days=1), slot)
