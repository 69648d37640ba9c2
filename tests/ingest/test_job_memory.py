"""An ingest job asks the C library to hand the memory its run freed back to the system when it
ends, succeeded or failed (a failed run held its peak too), and the server's log says what came
of it. That memory does leave the process is tests/core/test_malloc_arenas.py's to show. And
the run lock goes before the job says it ended, trim included."""

from __future__ import annotations

import logging
import platform
import time

import pytest

from citewise.ingest.jobs import InProcessJobQueue, Job, run_job
from citewise.ingest.runlock import FileRunLock
from tests.kb import folder_source, write_kb

TRIM_LINE = "freed memory"


def _trim_lines(caplog, job: Job) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "citewise.ingest" and TRIM_LINE in r.getMessage()
            and job.id in r.getMessage()]


@pytest.mark.parametrize("broken", [False, True], ids=["run succeeded", "run failed"])
def test_a_job_hands_its_freed_memory_back_when_it_ends(make_services, tmp_path, caplog,
                                                         broken):
    services = make_services()
    source = folder_source(write_kb(tmp_path / "kb"))
    if broken:  # a connector that does not exist: the job fails before any run
        source = source.model_copy(update={"type": "nosuchconnector"})
    job = Job(id="memoryjob01", sources=[source.name])
    with caplog.at_level(logging.INFO, logger="citewise.ingest"):
        run_job(services.pipeline, job, [source], trigger="t", force=False)

    assert job.status == ("failed" if broken else "done"), job.message
    (line,) = _trim_lines(caplog, job)
    if platform.libc_ver()[0] == "glibc":
        assert "handed back" in line or "none was free" in line, line
    else:
        assert "no malloc_trim" in line, line


class _WatchedLock(FileRunLock):
    """The real file lock, noting what the job said at the moment the lock went."""

    def __init__(self, path, job_status) -> None:
        super().__init__(path)
        self.job_status = job_status
        self.status_at_release: list[str] = []

    def release(self) -> None:
        self.status_at_release.append(self.job_status())
        super().release()


def test_a_job_lets_its_run_lock_go_before_it_says_it_is_done(make_services, tmp_path):
    # Whoever reads "done" may start the next run at once: the lock must already be free.
    services = make_services()
    jobs: list[Job] = []
    lock = _WatchedLock(tmp_path / "ingest.lock", lambda: jobs[0].status)
    queue = InProcessJobQueue(services.pipeline, lock)
    jobs.append(queue.submit([folder_source(write_kb(tmp_path / "kb"))], trigger="t"))
    deadline = time.monotonic() + 120
    while jobs[0].status not in ("done", "failed"):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.02)
    assert jobs[0].status == "done", jobs[0].message
    assert lock.status_at_release == ["running"]
    lock.acquire("the next run")  # free, the moment the job said so
    lock.release()
