"""An ingest run in a server gives way to the requests it is answering (``ingest/pacing.py``):
the pacer's arithmetic on a fake clock, a real run through it, and the real HTTP middleware's
count of requests in flight that it reads."""

from __future__ import annotations

import threading

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from citewise.api.middleware import RequestMetrics
from citewise.ingest.pacing import MAX_PAUSE, Pacer
from citewise.serving import REQUESTS
from tests.ingest.test_pipeline import assert_index_matches_catalog, ingest


class Clock:
    """Time that moves only when a step says so, and pauses that only record themselves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)


def pacer(busy: bool, ratio: float) -> tuple[Pacer, Clock]:
    clock = Clock()
    return Pacer(lambda: busy, ratio, clock=clock, sleep=clock.sleep), clock


def test_a_step_taken_while_requests_are_in_flight_is_followed_by_ratio_times_its_length():
    p, clock = pacer(busy=True, ratio=3)
    with p.step():
        clock.now += 0.25
    assert clock.pauses == [0.75]
    assert p.paused == 0.75


def test_no_pause_while_idle_or_with_a_ratio_of_zero():
    for busy, ratio in ((False, 3), (True, 0)):
        p, clock = pacer(busy, ratio)
        with p.step():
            clock.now += 1
        assert clock.pauses == [] and p.paused == 0


def test_nested_steps_pause_once_for_the_whole_of_the_outer_one():
    p, clock = pacer(busy=True, ratio=2)
    with p.step():
        clock.now += 0.1
        with p.step():  # the window a batch completes, embedded and written in its step
            clock.now += 0.3
        clock.now += 0.1
    assert clock.pauses == [pytest.approx(1.0)]


def test_each_thread_has_its_own_outermost_step():
    p, clock = pacer(busy=True, ratio=1)
    done = threading.Event()

    def other() -> None:
        with p.step():  # a writer thread's step, while this thread is inside one
            pass
        done.set()

    with p.step():
        clock.now += 0.2
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert done.is_set()
    assert sorted(clock.pauses) == [0.0, pytest.approx(0.2)]


def test_a_long_step_pauses_at_most_max_pause_and_a_failed_one_not_at_all():
    p, clock = pacer(busy=True, ratio=10)
    with p.step():
        clock.now += 60
    assert clock.pauses == [MAX_PAUSE]
    with pytest.raises(RuntimeError), p.step():
        clock.now += 1
        raise RuntimeError("the source went away")
    assert clock.pauses == [MAX_PAUSE]


def test_a_negative_ratio_is_refused():
    with pytest.raises(ValueError, match="negative"):
        Pacer(lambda: True, -1)


def test_a_run_while_busy_pauses_after_its_steps_and_indexes_the_same(make_services, kb):
    services = make_services()
    pauses: list[float] = []
    services.pipeline.pacer = Pacer(lambda: True, 0.5, sleep=pauses.append)
    report = ingest(services, kb)
    assert report.status == "succeeded", report.summary()
    assert pauses and all(p >= 0 for p in pauses)
    assert_index_matches_catalog(services)
    idle: list[float] = []
    services.pipeline.pacer = Pacer(lambda: False, 0.5, sleep=idle.append)
    assert ingest(services, kb, force=True).status == "succeeded"
    assert idle == []
    assert_index_matches_catalog(services)


def test_the_server_paces_its_runs_by_its_requests_in_flight(make_services):
    services = make_services(ingest_yield=1.5)
    assert services.pipeline.pacer.ratio == 1.5
    assert services.pipeline.pacer.busy == REQUESTS.busy


def test_the_middleware_counts_a_request_while_it_is_answered_and_after_a_failure():
    seen: list[int] = []
    app = FastAPI()

    @app.get("/work")
    def work() -> dict:
        seen.append(REQUESTS.count)
        return {"busy": REQUESTS.busy()}

    @app.get("/fail")
    def fail() -> dict:
        raise RuntimeError("a bug")

    app.add_middleware(RequestMetrics)
    before = REQUESTS.count
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/work").json() == {"busy": True}
        assert client.get("/fail").status_code == 500
        assert REQUESTS.count == before
    assert seen == [before + 1]
    assert b"citewise_http_requests_in_flight" in generate_latest()
