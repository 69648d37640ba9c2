"""The schedule `citewise serve` runs ingests on: cron expressions (time zones and DST, both day
fields, names and steps, refusals that say what is wrong), and the scheduler driving the real
job queue with a clock the test moves: due runs, catch-up after downtime, a run skipped (not
doubled) while another process holds the run lock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from citewise.api.settings import Settings
from citewise.errors import ConfigError
from citewise.ingest.runlock import FileRunLock
from citewise.ingest.schedule import Cron, Scheduler, last_run_started, plan, zone_of
from citewise.settings import SourceConfig
from tests.kb import write_kb

UTC_ZONE = zone_of("UTC")
BERLIN = zone_of("Europe/Berlin")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("expression", "after", "due"), [
    ("30 2 * * *", "2026-12-03T01:00", "2026-12-03T02:30"),
    ("30 2 * * *", "2026-12-03T02:30", "2026-12-04T02:30"),  # strictly after
    ("*/15 * * * *", "2026-12-03T10:07", "2026-12-03T10:15"),
    ("0 9 * * mon-fri", "2026-12-05T12:00", "2026-12-07T09:00"),  # Saturday -> Monday
    ("0 0 1 * *", "2026-12-15T00:00", "2027-01-01T00:00"),
    ("0 0 13 * fri", "2026-12-03T00:00", "2026-12-04T00:00"),  # either day field: Friday 4th
    ("0 4 29 2 *", "2026-03-01T00:00", "2028-02-29T04:00"),  # leap day
    ("@hourly", "2026-12-03T10:59", "2026-12-03T11:00"),
    ("0 3 * * 7", "2026-12-03T00:00", "2026-12-06T03:00"),  # 7 is Sunday too
    # A day field starting with * does not widen the other: odd days AND Mondays.
    ("0 0 */2 * mon", "2026-12-01T00:00", "2026-12-07T00:00"),
])
def test_next_due_time_in_utc(expression, after, due):
    assert Cron.parse(expression).next_after(at(after), UTC_ZONE) == at(due)


def test_a_schedule_in_local_time_follows_daylight_saving():
    nightly = Cron.parse("30 2 * * *")
    # Berlin is UTC+1 in winter, UTC+2 in summer: 02:30 local is 01:30 or 00:30 UTC.
    assert nightly.next_after(at("2026-12-03T00:00"), BERLIN) == at("2026-12-03T01:30")
    assert nightly.next_after(at("2026-07-01T00:00"), BERLIN) == at("2026-07-01T00:30")
    # 25 October 2026: 02:00-03:00 happens twice. Inside the second 02:10, the due time is
    # the next night's, never one in the past (which would fire again and again).
    second_0210 = at("2026-10-25T01:10")  # 02:10 CET, after 02:10 CEST an hour earlier
    assert nightly.next_after(second_0210, BERLIN) == at("2026-10-26T01:30")
    assert nightly.next_after(at("2026-10-25T00:00"), BERLIN) == at("2026-10-25T00:30")
    # 29 March 2026: 02:00-03:00 does not exist in Berlin; the run is not lost.
    spring = nightly.next_after(at("2026-03-28T23:00"), BERLIN)
    assert at("2026-03-29T00:00") <= spring <= at("2026-03-29T02:00")


@pytest.mark.parametrize(("expression", "says"), [
    ("30 2 * *", "it has 4 fields"),
    ("61 * * * *", "'61' is not a minute"),
    ("0 25 * * *", "'25' is not a hour"),
    ("0 0 * * funday", "is not a day of week"),
    ("0 0 31 2 *", "never comes due"),
    ("5-1 * * * *", "empty minute range"),
])
def test_bad_expressions_say_what_is_wrong(expression, says):
    with pytest.raises(ConfigError, match=says):
        Cron.parse(expression).next_after(at("2026-12-03T00:00"), UTC_ZONE)


def test_unknown_time_zone_is_refused():
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        zone_of("Mars/Olympus")


def test_each_source_its_schedule_or_the_default_or_none():
    sources = [SourceConfig(name="a", type="folder"), SourceConfig(name="b", type="folder",
                                                                   schedule="0 * * * *"),
               SourceConfig(name="c", type="folder", schedule="off")]
    planned = {p.source: p.cron.expression for p in plan("30 2 * * *", sources)}
    assert planned == {"a": "30 2 * * *", "b": "0 * * * *"}
    assert {p.source for p in plan(None, sources)} == {"b"}


def test_the_config_file_schedule_reaches_the_settings(tmp_path):
    (tmp_path / "citewise.toml").write_text(
        '[schedule]\ningest = "30 2 * * *"\ntimezone = "Europe/Berlin"\n\n'
        '[[sources]]\nname = "wiki"\ntype = "folder"\npath = "kb"\nreaders = ["public"]\n'
        'schedule = "@hourly"\n')
    settings = Settings.load(tmp_path / "citewise.toml")
    assert settings.ingest.schedule_ingest == "30 2 * * *"
    assert settings.ingest.schedule_timezone == "Europe/Berlin"
    assert settings.sources[0].schedule == "@hourly"
    assert "schedule" not in settings.sources[0].options()  # not a connector option
    (tmp_path / "bad.toml").write_text('[schedule]\nnightly = "30 2 * * *"\n')
    with pytest.raises(ConfigError, match=r"\[schedule\] holds ingest"):
        Settings.load(tmp_path / "bad.toml")


class Clock:
    def __init__(self, start: str | datetime) -> None:
        self.now = at(start) if isinstance(start, str) else start

    def __call__(self) -> datetime:
        return self.now


def _wait(queue, job_id: str):
    for _ in range(1200):
        job = queue.get(job_id)
        if job.status in ("done", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError("the job did not finish")


def test_the_scheduler_runs_due_sources_through_the_job_queue(tmp_path, make_services):
    write_kb(tmp_path / "kb")
    services = make_services(tmp_path / "data")
    source = SourceConfig(name="kb", type="folder", path=str(tmp_path / "kb"),
                          readers=["public"])
    # Due daily at the minute just begun: the runs this test starts, now, start after it (a
    # run that started since a due time serves it, and runs record the wall clock).
    first = datetime.now(UTC).replace(second=0, microsecond=0)
    cron = f"{first.minute} {first.hour} * * *"
    clock = Clock(first - timedelta(hours=1))
    jobs = []

    def submit(names, trigger):
        jobs.append(services.jobs.submit([source], trigger=trigger))

    scheduler = Scheduler(plan(cron, [source]), UTC_ZONE, submit,
                          lambda name: last_run_started(services.sources, name), now=clock,
                          catch_up=False)
    assert scheduler.tick() == first and jobs == []
    clock.now = first
    assert scheduler.tick() == first + timedelta(days=1)
    assert _wait(services.jobs, jobs[0].id).status == "done"
    run = services.sources.list_runs("kb", limit=1)[0]
    assert run["trigger"] == "schedule" and run["status"] == "succeeded"

    # The next night another process (a backup) holds the lock: not doubled; tried again
    # five minutes later, and then it runs.
    clock.now = first + timedelta(days=1)
    with FileRunLock(services.settings.data.run_lock_path).held("citewise backup (cron)"):
        assert scheduler.tick() == first + timedelta(days=1, minutes=5)
    assert len(jobs) == 1
    assert len(services.sources.list_runs("kb")) == 1
    clock.now = first + timedelta(days=1, minutes=5)
    assert scheduler.tick() == first + timedelta(days=2)
    assert _wait(services.jobs, jobs[1].id).status == "done"
    assert len(services.sources.list_runs("kb")) == 2


def test_a_run_missed_while_the_server_was_down_runs_at_start(tmp_path, make_services):
    services = make_services(tmp_path / "data")
    source = SourceConfig(name="kb", type="folder", path=str(tmp_path), readers=["public"])
    submitted = []
    clock = Clock("2026-12-03T09:00")
    never_ran = Scheduler(plan("30 2 * * *", [source]), UTC_ZONE,
                          lambda names, trigger: submitted.append(names),
                          lambda name: None, now=clock)
    never_ran.tick()
    assert submitted == [["kb"]]
    # Last ran yesterday 02:30, and today's 02:30 passed while down: catch up once.
    submitted.clear()
    late = Scheduler(plan("30 2 * * *", [source]), UTC_ZONE,
                     lambda names, trigger: submitted.append(names),
                     lambda name: at("2026-12-02T02:30"), now=clock)
    assert late.tick() == at("2026-12-04T02:30") and submitted == [["kb"]]
    # Ran at today's 02:30: nothing to catch up.
    submitted.clear()
    on_time = Scheduler(plan("30 2 * * *", [source]), UTC_ZONE,
                        lambda names, trigger: submitted.append(names),
                        lambda name: at("2026-12-03T02:30"), now=clock)
    on_time.tick()
    assert submitted == []
    assert services.sources.list_runs("kb") == []
