"""The run's writer thread: tasks in the order given, one at a time, while the caller goes
on; a failure stops it and reaches the caller; closing finishes what was queued."""

from __future__ import annotations

import threading
import time

import pytest

from citewise.ingest.overlap import Writer


def test_tasks_run_in_order_while_the_caller_goes_on():
    writer = Writer(depth=2)
    done: list[int] = []
    started = threading.Event()

    def task(n: int):
        def run() -> None:
            started.set()
            time.sleep(0.05)
            done.append(n)
        return run

    writer.submit(task(1))
    assert started.wait(5)
    assert done == []  # submit returned while the task was still running
    for n in (2, 3, 4):
        writer.submit(task(n))
    writer.drain()
    assert done == [1, 2, 3, 4]
    writer.close()


def test_a_failed_task_stops_the_rest_and_reaches_the_caller():
    writer = Writer()
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("the embedding endpoint is down")

    writer.submit(lambda: done.append("first"))
    writer.submit(boom)
    writer.submit(lambda: done.append("after the failure"))
    with pytest.raises(RuntimeError, match="endpoint is down"):
        writer.drain()
    assert done == ["first"]
    with pytest.raises(RuntimeError):
        writer.submit(lambda: done.append("later"))
    writer.close()
    assert done == ["first"]


def test_close_finishes_the_queued_tasks():
    writer = Writer(depth=3)
    done: list[int] = []
    for n in range(3):
        writer.submit(lambda n=n: (time.sleep(0.02), done.append(n)))
    writer.close()
    writer.close()  # twice is harmless
    assert done == [0, 1, 2]
