"""An ingest job asks the C library to hand the memory its run freed back to the system when it
ends, succeeded or failed (a failed run held its peak too), and the server's log says what came
of it. That memory does leave the process is tests/core/test_malloc_arenas.py's to show."""

from __future__ import annotations

import logging
import platform

import pytest

from citewise.ingest.jobs import Job, run_job
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
