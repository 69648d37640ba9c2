"""`citewise worker` (runs the jobs any replica accepted, from the shared database) and
`citewise --version` (the schema live in the database the settings name), run for real."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from citewise.api.cli import cli
from tests.kb import ALL_PATHS, clean_env, folder_source, write_kb

CITEWISE = Path(sys.executable).with_name("citewise")


@pytest.fixture(autouse=True)
def no_config(tmp_path, monkeypatch):
    """A working folder without a citewise.toml (the repository's would apply)."""
    monkeypatch.chdir(tmp_path)


def invoke(*args: object, **env: str) -> Result:
    """The CLI in this process, with no CITEWISE_* setting but ``env``; its logging set-up
    undone afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, [str(a) for a in args], env={
            **{k: None for k in os.environ if k.startswith("CITEWISE_")}, **env})
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_the_worker_is_in_the_help_and_needs_a_database(tmp_path):
    assert "worker" in invoke("--help").stdout
    helped = invoke("worker", "--help")
    assert "CITEWISE_DATABASE_URL" in helped.stdout and "CITEWISE_SERVE_RUNS_INGEST" in \
        helped.stdout
    refused = invoke("--data-dir", tmp_path / "data", "worker")
    assert refused.exit_code == 1
    assert "CITEWISE_DATABASE_URL is not set" in refused.stderr
    assert not (tmp_path / "data").exists()


def test_a_server_without_a_database_must_run_its_own_jobs(tmp_path):
    result = invoke("--data-dir", tmp_path / "data", "serve",
                    CITEWISE_SERVE_RUNS_INGEST="false")
    assert result.exit_code == 1
    assert "CITEWISE_SERVE_RUNS_INGEST=false" in result.stderr
    assert "citewise worker" in result.stderr


def test_the_worker_runs_a_job_another_replica_accepted(tmp_path, postgres_url,
                                                        make_services):
    replica = make_services(tmp_path / "replica-data", database_url=postgres_url)
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [str(CITEWISE), "--data-dir", str(tmp_path / "worker-data"), "worker"],
            stdout=out, stderr=out, cwd=tmp_path,
            env=clean_env(CITEWISE_DATABASE_URL=postgres_url))
    try:
        job = replica.jobs.submit([folder_source(write_kb(tmp_path / "kb"))], trigger="api")
        deadline = time.monotonic() + 180
        while replica.jobs.get(job.id).status not in ("done", "failed"):
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        done = replica.jobs.get(job.id)
        assert done.status == "done", (done, log.read_text())
        assert done.reports[0]["added"] == len(ALL_PATHS)
        # Its run is in the shared runs table, which the replica reads.
        [run] = replica.sources.list_runs("kb")
        assert run["id"] == done.reports[0]["run_id"] and run["pid"] == worker.pid
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    finally:
        worker.kill()
        worker.wait(timeout=30)
    text = log.read_text()
    assert "worker: ingest jobs and the schedule of the database" in text
    assert f"ingest job {job.id} (api) started by pid {worker.pid}" in text


def test_the_version_says_the_schema_live_in_the_database(tmp_path, postgres_url,
                                                          make_services):
    fresh = invoke("--data-dir", tmp_path / "none", "--version")
    assert fresh.exit_code == 0
    assert fresh.stdout.splitlines()[0].startswith("citewise, version ")
    assert "schema: none yet" in fresh.stdout
    assert not (tmp_path / "none").exists()  # read only: nothing is created

    services = make_services(tmp_path / "data")
    versions = services.stores.versions()
    local = invoke("--data-dir", tmp_path / "data", "--version")
    assert f"database: sqlite {tmp_path / 'data' / 'catalog.db'}" in local.stdout
    assert "schema: " + ", ".join(f"{s} {v}" for s, v in sorted(versions.items())) \
        in local.stdout

    make_services(tmp_path / "shared", database_url=postgres_url)
    shared = invoke("--version", CITEWISE_DATABASE_URL=postgres_url)
    assert shared.exit_code == 0
    assert "database: postgresql postgresql://" in shared.stdout
    assert "ingest_jobs 1" in shared.stdout and "run_lock 1" in shared.stdout

    away = invoke("--version",
                  CITEWISE_DATABASE_URL="postgresql://citewise:secret@127.0.0.1:1/citewise")
    assert away.exit_code == 0
    assert "schema: the database cannot be reached" in away.stdout
    assert "secret" not in away.stdout
