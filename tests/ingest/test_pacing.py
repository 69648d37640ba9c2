"""An ingest run in a server gives way to the requests it is answering (``ingest/pacing.py``):
the pacer's arithmetic on a fake CPU clock, a real run through it, and the real HTTP
middleware's count of requests in flight that it reads."""

from __future__ import annotations

import threading

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from citewise.api.middleware import RequestMetrics
from citewise.ingest.pacing import MAX_PAUSE, MIN_PAUSE, Pacer
from citewise.serving import REQUESTS
from tests.ingest.test_pipeline import assert_index_matches_catalog, ingest


class Cpu:
    """A CPU clock that moves only when the test says, and pauses that only record themselves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)


def pacer(ratio: float, busy: list[bool] | None = None) -> tuple[Pacer, Cpu]:
    cpu = Cpu()
    state = busy if busy is not None else [True]
    p = Pacer(lambda: state[0], ratio, cpu=cpu, sleep=cpu.sleep)
    p.begin()
    return p, cpu


def test_while_requests_are_in_flight_a_tick_pauses_ratio_times_the_cpu_since_the_last():
    p, cpu = pacer(ratio=3)
    cpu.now += 0.25
    p.tick()
    cpu.now += 0.1
    p.tick()
    assert cpu.pauses == [pytest.approx(0.75), pytest.approx(0.3)]
    assert p.paused == pytest.approx(1.05)


def test_small_pauses_add_up_until_they_are_worth_a_sleep():
    p, cpu = pacer(ratio=1)
    for _ in range(4):
        cpu.now += MIN_PAUSE * 0.8
        p.tick()
    # Slept after the second and the fourth tick, for both ticks' work each time.
    assert cpu.pauses == [pytest.approx(MIN_PAUSE * 1.6)] * 2


def test_no_pause_while_idle_nor_later_for_work_done_while_idle():
    busy = [False]
    p, cpu = pacer(ratio=3, busy=busy)
    cpu.now += 1
    p.tick()
    assert cpu.pauses == []
    busy[0] = True
    cpu.now += 0.001  # 3 ms owed, under MIN_PAUSE: nothing is owed from the idle second
    p.tick()
    assert cpu.pauses == []


def test_a_ratio_of_zero_never_pauses_and_a_negative_one_is_refused():
    p, cpu = pacer(ratio=0)
    cpu.now += 10
    p.tick()
    assert cpu.pauses == []
    with pytest.raises(ValueError, match="negative"):
        Pacer(lambda: True, -1)


def test_one_long_piece_of_work_pauses_at_most_max_pause():
    p, cpu = pacer(ratio=10)
    cpu.now += 60
    p.tick()
    assert cpu.pauses == [MAX_PAUSE]


def test_a_thread_owes_only_for_its_own_work():
    p, cpu = pacer(ratio=1)
    seen: list[float] = []

    def writer() -> None:  # a stage thread: its first tick only starts its count
        p.tick()
        seen.extend(cpu.pauses)

    cpu.now += 0.5
    worker = threading.Thread(target=writer)
    worker.start()
    worker.join()
    assert seen == []
    p.tick()
    assert cpu.pauses == [pytest.approx(0.5)]


def test_a_run_while_busy_pauses_as_it_goes_and_indexes_the_same(make_services, kb):
    services = make_services()
    pauses: list[float] = []
    services.pipeline.pacer = Pacer(lambda: True, 3, sleep=pauses.append)
    report = ingest(services, kb)
    assert report.status == "succeeded", report.summary()
    assert pauses and all(MIN_PAUSE <= p <= MAX_PAUSE for p in pauses)
    assert_index_matches_catalog(services)
    idle: list[float] = []
    services.pipeline.pacer = Pacer(lambda: False, 3, sleep=idle.append)
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
