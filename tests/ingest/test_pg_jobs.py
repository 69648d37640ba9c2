"""Ingest jobs in the shared database (``ingest/pg_jobs.py``), against a real PostgreSQL: any
replica accepts a job, one worker runs it, every replica reads its progress and report; one job
at a time across replicas; two workers never take one job; a job whose worker is killed with -9
is failed, not "running" forever, and the next run converges.

A "replica" here is a ``PostgresJobQueue`` of its own (its own pool, its own run lock): it
shares nothing with the others but the database, which also holds the catalog and the runs.
The index is embedded (one process per data folder), so the replicas of one process share its
pipeline; the killed worker is a process of its own, on a data folder of its own.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.errors import RunLockedError
from citewise.ingest.jobs import Job
from citewise.ingest.pg_jobs import LOST, PostgresJobQueue
from citewise.ingest.pg_runlock import PostgresRunLock
from citewise.ingest.repair import verify_index
from citewise.postgres import PostgresDatabase
from tests.kb import ALL_PATHS, clean_env, folder_source, make_key, write, write_kb


@pytest.fixture
def cluster(tmp_path, postgres_url, make_services):
    """The services of one replica over the database, and a maker of more replicas' queues."""
    services = make_services(tmp_path / "data", database_url=postgres_url)
    assert isinstance(services.jobs, PostgresJobQueue)
    pools: list[PostgresDatabase] = []

    def replica() -> PostgresJobQueue:
        db = PostgresDatabase(postgres_url, pool_size=2)
        pools.append(db)
        return PostgresJobQueue(db, services.pipeline, PostgresRunLock(db), poll_seconds=0.1)

    yield services, replica
    for db in pools:
        db.close()


def _until(read, done, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"still {value}"
        time.sleep(0.05)


def _finished(job: Job | dict) -> bool:
    status = job.status if isinstance(job, Job) else job["status"]
    return status in ("done", "failed")


def test_a_job_accepted_by_one_replica_is_run_by_a_worker_and_read_on_every_replica(
        tmp_path, cluster):
    services, replica = cluster
    services.settings.sources = [folder_source(write_kb(tmp_path / "kb"))]
    worker = replica()
    app_a = create_app(services=services)
    app_b = create_app(services=dataclasses.replace(services, jobs=worker))
    key = make_key(services, "cron", scopes="ingest")
    with TestClient(app_a, headers=key) as a, TestClient(app_b, headers=key) as b:
        accepted = a.post("/v1/ingest/jobs", json={"all": True})
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["id"]
        assert accepted.json()["status"] == "queued"
        # B has never seen the job in its memory: it reads it from the database.
        assert b.get(f"/v1/ingest/jobs/{job_id}").json()["status"] == "queued"
        worker.start()
        try:
            on_b = _until(lambda: b.get(f"/v1/ingest/jobs/{job_id}").json(), _finished)
        finally:
            worker.stop()
        assert on_b["status"] == "done", on_b
        [report] = on_b["reports"]
        assert report["source"] == "kb" and report["added"] == len(ALL_PATHS)
        assert report["status"] == "succeeded"
        assert a.get(f"/v1/ingest/jobs/{job_id}").json() == on_b
        assert [j["id"] for j in b.get("/v1/ingest/jobs").json()["jobs"]] == [job_id]
        missing = a.get("/v1/ingest/jobs/000000000000")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
    [run] = services.sources.list_runs("kb")
    assert run["trigger"] == "api" and run["status"] == "succeeded"


def test_one_job_at_a_time_across_replicas(tmp_path, cluster):
    services, replica = cluster
    source = folder_source(write_kb(tmp_path / "kb"))
    queues = [replica() for _ in range(4)]
    accepted: list[Job] = []
    refused: list[RunLockedError] = []
    start = threading.Barrier(len(queues))

    def submit(queue: PostgresJobQueue) -> None:
        start.wait()
        try:
            accepted.append(queue.submit([source], trigger="api"))
        except RunLockedError as e:
            refused.append(e)

    threads = [threading.Thread(target=submit, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == 1 and len(refused) == 3
    assert all(e.code == "run_locked" for e in refused)
    with pytest.raises(RunLockedError, match=f"already queued \\(job {accepted[0].id}\\)"):
        services.jobs.submit([source], trigger="api")
    assert queues[1].run_next() is True
    assert queues[2].get(accepted[0].id).status == "done"

    # A cron holds the run lock: a job is refused, naming it...
    cron = PostgresRunLock(queues[3].database)
    with cron.held("citewise ingest --all (cron)"):
        with pytest.raises(RunLockedError, match="citewise ingest --all \\(cron\\)"):
            services.jobs.submit([source], trigger="api")
    # ...and a job accepted before the cron took it waits, queued, until the cron is done.
    waiting = services.jobs.submit([source], trigger="schedule")
    with cron.held("citewise ingest --all (cron)"):
        assert queues[0].run_next() is False
        assert queues[1].get(waiting.id).status == "queued"
    assert queues[0].run_next() is True
    assert queues[1].get(waiting.id).status == "done"
    assert len(services.sources.list_runs("kb")) == 2


def test_two_workers_never_take_one_job(tmp_path, cluster):
    services, replica = cluster
    job = services.jobs.submit([folder_source(write_kb(tmp_path / "kb"))], trigger="api")
    workers = [replica(), replica(), replica()]
    ran: list[bool] = []
    start = threading.Barrier(len(workers))

    def work(queue: PostgresJobQueue) -> None:
        start.wait()
        ran.append(queue.run_next())

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ran) == [False, False, True]
    assert services.jobs.get(job.id).status == "done"
    assert len(services.sources.list_runs("kb")) == 1


WORKER = """
import sys
from pathlib import Path
from citewise.api.composition import build_services
from citewise.api.settings import Settings

services = build_services(Settings(data_dir=Path(sys.argv[1]), database_url=sys.argv[2]))
print("claimed" if services.jobs.run_next() else "nothing", flush=True)
"""


def _big_kb(root: Path, files: int = 400) -> Path:
    """A folder whose ingest takes several seconds on two cores (a kill lands mid-run)."""
    for i in range(files):
        write(root, f"notes/note-{i:03}.md", f"""
            # Note {i}

            Service {i} pages the on-call engineer when its queue depth passes {i * 7}
            for five minutes. Drain the queue with the replay tool, then scale its
            consumers to {i % 9 + 2}.
            """)
    return root


def test_a_job_whose_worker_is_killed_is_failed_and_the_next_run_converges(
        tmp_path, postgres_url, cluster, make_services):
    services, _ = cluster
    source = folder_source(_big_kb(tmp_path / "big"), name="big")
    job = services.jobs.submit([source], trigger="api")
    worker_data = tmp_path / "worker-data"
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen([sys.executable, "-c", WORKER, str(worker_data),
                                   postgres_url], stdout=out, stderr=out, env=clean_env())
    try:
        # Read from this replica while the other process runs it: running, on its source.
        running = _until(lambda: services.jobs.get(job.id),
                         lambda j: j.current == "big" or _finished(j)
                         or worker.poll() is not None, timeout=180)
        assert running.status == "running" and running.current == "big", \
            (running, log.read_text())
        time.sleep(0.5)
        assert worker.poll() is None, log.read_text()
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        worker.kill()
        worker.wait(timeout=30)
    killed = time.monotonic()
    failed = _until(lambda: services.jobs.get(job.id), _finished, timeout=10)
    assert time.monotonic() - killed < 5
    assert failed.status == "failed" and failed.message == LOST
    assert failed.current is None

    # Nothing is left stuck: a new job is accepted, and run on the dead worker's data folder
    # (its index and catalog, freed with its process) it converges.
    again = services.jobs.submit([source], trigger="api")
    survivor = make_services(worker_data, database_url=postgres_url)
    assert survivor.jobs.run_next() is True
    done = services.jobs.get(again.id)
    assert done.status == "done", done
    runs = survivor.sources.list_runs("big")
    assert runs[0]["status"] == "succeeded" and runs[0]["seen"] == 400
    assert verify_index(survivor.pipeline, fix=False)["ok"]
