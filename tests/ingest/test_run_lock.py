"""One ingest run at a time per data folder, whoever starts it: a cron's `citewise ingest`, the
server's jobs. A run that finds the lock held does nothing and exits 4; a holder killed with
SIGKILL releases it (the kernel does)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.settings import Settings
from citewise.errors import RunLockedError
from citewise.ingest.runlock import FileRunLock
from tests.kb import clean_env, make_key, write_site

CITEWISE = Path(sys.executable).with_name("citewise")


@pytest.fixture
def site(tmp_path) -> Path:
    write_site(tmp_path)
    return tmp_path


def test_a_cron_run_that_finds_the_lock_held_does_nothing_and_exits_4(site):
    lock = FileRunLock(Settings.load(site / "citewise.toml").data.run_lock_path)
    with lock.held("ingest job (schedule) of kb"):
        out = subprocess.run([str(CITEWISE), "ingest", "--all"], cwd=site, capture_output=True,
                             text=True, timeout=300,
                             env=clean_env(CITEWISE_CONFIG_FILE=str(site / "citewise.toml")))
    assert out.returncode == 4, out.stderr
    assert "skipped: another run holds the ingest lock" in out.stderr
    assert f"ingest job (schedule) of kb (pid {os.getpid()}" in out.stderr
    # It did nothing: no run was recorded.
    from citewise.api.composition import build_stores

    stores = build_stores(Settings(data_dir=site / "data"))
    try:
        assert stores.sources.list_runs("kb") == []
    finally:
        stores.close()


def test_the_servers_jobs_take_the_same_lock(site, make_services):
    settings = Settings.load(site / "citewise.toml")
    services = make_services(site / "data")
    services.settings.sources = settings.sources
    client = TestClient(create_app(services=services),
                        headers=make_key(services, "cron", scopes="ingest"))
    with FileRunLock(services.settings.data.run_lock_path).held("citewise ingest (kb)"):
        refused = client.post("/v1/ingest/jobs", json={"all": True})
        assert refused.status_code == 409
        assert refused.json()["type"] == "urn:citewise:error:run_locked"
        assert "citewise ingest (kb)" in refused.json()["detail"]
    job = client.post("/v1/ingest/jobs", json={"all": True}).json()
    for _ in range(600):
        job = client.get(f"/v1/ingest/jobs/{job['id']}").json()
        if job["status"] in ("done", "failed"):
            break
        time.sleep(0.1)
    assert job["status"] == "done", job
    # Released after the job: a cron may take it now.
    FileRunLock(services.settings.data.run_lock_path).acquire("cron")


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(tmp_path):
    path = tmp_path / "ingest.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path;"
        "from citewise.ingest.runlock import FileRunLock;"
        f"FileRunLock(Path({str(path)!r})).acquire('doomed run'); print('held', flush=True);"
        "time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunLockedError, match="doomed run"):
        FileRunLock(path).acquire("second")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    lock = FileRunLock(path)
    lock.acquire("after the crash")
    lock.release()


def test_only_a_held_lock_is_a_skip_not_any_conflict():
    from citewise.api.cli.base import is_locked
    from citewise.errors import CitewiseError, ConflictError

    assert is_locked(RunLockedError("another run holds the ingest lock"))
    assert not is_locked(ConflictError("a source named wiki is declared with another path"))
    over_http = CitewiseError("an ingest is already running")
    over_http.status_code, over_http.code = 409, "run_locked"  # as RemoteServer reads it
    assert is_locked(over_http)


def test_a_lock_that_cannot_be_opened_says_why_and_jams_nothing(tmp_path, make_services):
    from citewise.errors import CitewiseError

    (tmp_path / "not-a-folder").write_text("")
    broken = FileRunLock(tmp_path / "not-a-folder" / "ingest.lock")
    with pytest.raises(CitewiseError, match="cannot open the ingest run lock"):
        broken.acquire("cron")
    services = make_services(tmp_path / "data")
    services.jobs.run_lock = broken
    with pytest.raises(CitewiseError, match="cannot open"):
        services.jobs.submit([], trigger="api")
    # The queue is not left "busy": with a usable lock the next job starts.
    services.jobs.run_lock = FileRunLock(tmp_path / "data" / "ingest.lock")
    job = services.jobs.submit([], trigger="api")
    for _ in range(200):
        if services.jobs.get(job.id).status in ("done", "failed"):
            break
        time.sleep(0.05)
    assert services.jobs.get(job.id).status == "done"
