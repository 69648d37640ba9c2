from __future__ import annotations

import sqlite3

import pytest

from citewise.errors import ConfigError
from citewise.index.catalog import SCHEMA_VERSION, Catalog, chunk_point_id, document_id


def test_fresh_catalog_is_at_the_latest_schema(tmp_path):
    catalog = Catalog(tmp_path / "c.db")
    assert catalog.schema_version() == SCHEMA_VERSION
    assert {"sources", "documents", "chunks", "ingest_runs", "ingest_errors"} <= set(
        catalog.db.table_names()
    )


def test_reopening_does_not_migrate_twice(tmp_path):
    Catalog(tmp_path / "c.db").ensure_source("a", "folder", {"path": "/x"})
    again = Catalog(tmp_path / "c.db")
    assert again.get_source("a")["config"] == {"path": "/x"}


def test_a_newer_schema_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "c.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    with pytest.raises(ConfigError, match="newer"):
        Catalog(tmp_path / "c.db")


def test_ids_are_deterministic():
    assert document_id("wiki", "a.md") == document_id("wiki", "a.md")
    assert document_id("wiki", "a.md") != document_id("docs", "a.md")
    assert chunk_point_id("d", "v1", 0) == chunk_point_id("d", "v1", 0)
    assert chunk_point_id("d", "v1", 0) != chunk_point_id("d", "v2", 0)


def test_interrupted_runs_are_marked_on_next_start(tmp_path):
    catalog = Catalog(tmp_path / "c.db")
    catalog.ensure_source("a", "folder", {})
    first = catalog.start_run("a", "cli")
    catalog.start_run("a", "cli")
    assert catalog.get_run(first)["status"] == "interrupted"


def test_a_catalog_of_the_first_schema_is_upgraded_in_place(tmp_path):
    """A catalog written by the first release keeps its rows and gains the new columns."""
    import sqlite3

    from citewise.index.catalog import MIGRATIONS

    path = tmp_path / "catalog.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "\nPRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO sources (name, type, created_at, updated_at) VALUES ('kb', 'folder', 'x', 'x')"
    )
    conn.commit()
    conn.close()
    catalog = Catalog(path)
    assert catalog.schema_version() == SCHEMA_VERSION
    assert catalog.get_source("kb")["type"] == "folder"
    columns = {r[1] for r in catalog._conn().execute("PRAGMA table_info(chunks)")}
    assert "symbol" in columns
    catalog.close()


def test_a_run_whose_process_died_is_listed_as_interrupted_at_once(tmp_path):
    """A run recorded by a process that was then killed (kill -9, or a second Ctrl-C during
    its last writes) says `interrupted` as soon as anyone lists the runs, not `running` until
    the source's next run; a live process's run stays `running`."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "catalog.db"
    Catalog(path).close()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from citewise.index.catalog import Catalog\n"
         f"print(Catalog({str(path)!r}).start_run('kb', 'cron'), flush=True)\n"
         "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    try:
        run_id = int(child.stdout.readline())
        catalog = Catalog(path)
        assert catalog.list_runs("kb")[0]["status"] == "running"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        (run,) = catalog.list_runs("kb")
        assert run["id"] == run_id and run["status"] == "interrupted", run
        assert run["finished_at"] and f"pid {child.pid}" in run["message"]
        assert catalog.get_run(run_id)["status"] == "interrupted"
        mine = catalog.start_run("kb", "cli")  # this process is alive: its run stays running
        assert catalog.get_run(mine)["status"] == "running"
        catalog.close()
    finally:
        child.kill()
        child.wait(timeout=30)
