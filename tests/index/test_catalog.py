from __future__ import annotations

from citewise.index.catalog import chunk_point_id, document_id
from citewise.index.sqlite_source_store import SqliteSourceStore
from citewise.sqlite import SqliteDatabase


def test_ids_are_deterministic():
    assert document_id("wiki", "a.md") == document_id("wiki", "a.md")
    assert document_id("wiki", "a.md") != document_id("docs", "a.md")
    assert chunk_point_id("d", "v1", 0) == chunk_point_id("d", "v1", 0)
    assert chunk_point_id("d", "v1", 0) != chunk_point_id("d", "v2", 0)


def test_a_run_whose_process_died_is_listed_as_interrupted_at_once(tmp_path):
    """A run recorded by a process that was then killed (kill -9, or a second Ctrl-C during
    its last writes) says `interrupted` as soon as anyone lists the runs, not `running` until
    the source's next run; a live process's run stays `running`."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "catalog.db"
    SqliteDatabase(path).close()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from citewise.index.sqlite_source_store import SqliteSourceStore\n"
         "from citewise.sqlite import SqliteDatabase\n"
         f"store = SqliteSourceStore(SqliteDatabase({str(path)!r}))\n"
         "print(store.start_run('kb', 'cron'), flush=True)\n"
         "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    try:
        run_id = int(child.stdout.readline())
        runs = SqliteSourceStore(SqliteDatabase(path))
        assert runs.list_runs("kb")[0]["status"] == "running"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        (run,) = runs.list_runs("kb")
        assert run["id"] == run_id and run["status"] == "interrupted", run
        assert run["finished_at"] and f"pid {child.pid}" in run["message"]
        assert runs.get_run(run_id)["status"] == "interrupted"
        mine = runs.start_run("kb", "cli")  # this process is alive: its run stays running
        assert runs.get_run(mine)["status"] == "running"
        runs.close()
    finally:
        child.kill()
        child.wait(timeout=30)
