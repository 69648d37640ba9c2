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
from citewise.errors import RunLockedError
from citewise.ingest.pg_runlock import PostgresRunLock
from citewise.ingest.runlock import FileRunLock
from citewise.postgres import PostgresDatabase


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
