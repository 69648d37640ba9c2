"""The run lock of a deployment on PostgreSQL (``ingest/pg_runlock.py``), against a real server:
two holders exclude each other whatever machine they are on, the refusal names the holder, and
a holder killed with SIGKILL leaves no stale lock (its session ends, and the lock with it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from citewise.api.composition import build_database, run_lock_of
from citewise.api.settings import Settings
from citewise.connectors.folder import FolderConfig, FolderConnector
from citewise.errors import RunLockedError, RunLockLostError
from citewise.ingest.pg_runlock import PostgresRunLock
from citewise.ingest.runlock import FileRunLock
from citewise.postgres import PostgresDatabase
from tests.kb import ALL_PATHS, write_kb


@pytest.fixture
def database(postgres_url):
    db = PostgresDatabase(postgres_url, pool_size=2)
    yield db
    db.close()


def test_two_lockers_exclude_each_other_and_the_refusal_names_the_holder(postgres_url,
                                                                          database):
    # Two processes' worth: each its own pool and its own lock object.
    other = PostgresDatabase(postgres_url, pool_size=2)
    first, second = PostgresRunLock(database), PostgresRunLock(other)
    try:
        with first.held("citewise ingest --all (cron)"):
            assert first.is_held() and second.is_held()
            with pytest.raises(RunLockedError) as refused:
                second.acquire("ingest job (schedule) of kb")
            message = refused.value.message
            assert message.startswith("another run holds the ingest lock of this installation")
            assert (f"citewise ingest --all (cron) (pid {os.getpid()} on "
                    f"{socket.gethostname()}, since ") in message
            assert second.holder()["what"] == "citewise ingest --all (cron)"
        assert not second.is_held() and second.holder() is None
        with second.held("ingest job (schedule) of kb"):
            with pytest.raises(RunLockedError, match="ingest job \\(schedule\\) of kb"):
                first.acquire("citewise backup")
    finally:
        other.close()


def test_the_lock_is_not_a_pooled_connection(database):
    """Statements through the pool (autocommit, connections handed around) see the lock held
    by another session: it lives on a connection of its own, whatever the pool does."""
    lock = PostgresRunLock(database)
    with lock.held("a long run"):
        for _ in range(5):  # every pooled connection, were the lock on one of them
            got = database.row("SELECT pg_try_advisory_lock(%s) AS got", [lock.key])
            assert got == {"got": False}


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(postgres_url, database):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from citewise.postgres import PostgresDatabase;"
        "from citewise.ingest.pg_runlock import PostgresRunLock;"
        f"lock = PostgresRunLock(PostgresDatabase({postgres_url!r}));"
        "lock.acquire('doomed run');"
        "print('held', flush=True); time.sleep(120)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lock = PostgresRunLock(database)
        with pytest.raises(RunLockedError, match=f"doomed run \\(pid {holder.pid} on "):
            lock.acquire("second")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        while True:
            try:
                lock.acquire("after the crash")
                break
            except RunLockedError:
                assert time.monotonic() - killed < 5, "the lock outlived its holder"
                time.sleep(0.1)
        # The dead holder's note says nothing any more: the holder is the new one.
        assert lock.holder()["what"] == "after the crash"
        lock.release()
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_the_composition_root_chooses_the_lock(tmp_path, postgres_url):
    with run_lock_of(Settings(data_dir=tmp_path / "data")) as lock:
        assert isinstance(lock, FileRunLock)
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_url)
    with run_lock_of(settings) as lock:
        assert isinstance(lock, PostgresRunLock)
        with lock.held("citewise backup"):
            database = build_database(settings)
            try:
                assert PostgresRunLock(database).holder()["what"] == "citewise backup"
            finally:
                database.close()


def _backend_of(lock: PostgresRunLock) -> int:
    return lock._conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_a_lock_lost_with_its_session_is_said_by_check(database):
    lock = PostgresRunLock(database)
    lock.check()  # holding nothing: nothing to lose
    with lock.held("a long run"):
        lock.check()  # held: says nothing
        # What a database restart, a failover or a dropped connection does to the session.
        database.row("SELECT pg_terminate_backend(%s) AS ok", [_backend_of(lock)])
        with pytest.raises(RunLockLostError) as lost:
            lock.check()
        assert "was lost with its session" in lost.value.message
        assert "this run stopped so that two runs never write at once" in lost.value.message
        # Another run may take it now, while the first still thinks it holds it.
        other = PostgresRunLock(database)
        other.acquire("the next run")
        other.release()
    # Releasing a lost lock raises nothing (the lock went with its session already).
    assert lock.token is None


def test_a_run_whose_lock_is_lost_stops_before_writing_beside_the_next(tmp_path, postgres_url,
                                                                        database, make_services):
    """The worker's database session ends (a restart) while it embeds: the pool reconnects its
    other connections as if nothing happened, so without the fence the run would go on writing
    while the schedule's next run takes the freed lock."""
    kb = write_kb(tmp_path / "kb")
    services = make_services(tmp_path / "data", database_url=postgres_url)
    assert isinstance(services.run_lock, PostgresRunLock)
    connector = FolderConnector(FolderConfig(path=kb, readers=["public"]))
    with services.run_lock.held("citewise ingest kb (cron)"):
        database.row("SELECT pg_terminate_backend(%s) AS ok", [_backend_of(services.run_lock)])
        report = services.pipeline.run("kb", "folder", connector, config={"path": str(kb)})
    assert report.status == "failed", report
    assert "ingest run lock" in (report.message or "") and "lost" in report.message, report
    assert services.catalog.count_documents("kb") == 0  # it wrote nothing after the loss
    # The next run, holding the lock, converges.
    with services.run_lock.held("citewise ingest kb (cron)"):
        report = services.pipeline.run("kb", "folder", connector, config={"path": str(kb)})
    assert report.status == "succeeded", report
    assert services.catalog.count_documents("kb") == len(ALL_PATHS)
