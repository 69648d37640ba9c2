"""The nightly run without a crontab: cron expressions in the config, run by `citewise serve`.

```toml
[schedule]
ingest = "30 2 * * *"        # every source, 02:30
timezone = "Europe/Berlin"   # default UTC

[[sources]]
name = "wiki"
schedule = "0 * * * *"       # this one hourly
```

Expressions are the five fields of cron (minute, hour, day of month, month, day of week) with
``*``, lists, ranges, steps and names (``mon``, ``jan``), or ``@hourly``, ``@daily``
(``@midnight``), ``@weekly``, ``@monthly``; as in cron, when both day fields are restricted a
day matching either is due. ``schedule = "off"`` leaves a source to manual or external runs.

The scheduler submits due sources to the job queue, which takes the run lock: while another run
holds it (an external cron, a manual ``citewise ingest``, a backup, a job), the scheduled run
waits, logged, and is tried again every five minutes. When the server starts, a source whose
last run is older than its previous due time (the server was down at 02:30) runs at once.

Each due time is run once, however many schedulers there are: every replica of a deployment on
PostgreSQL runs one, over the same config. Before submitting a source, a scheduler reads the
source's last run from the shared runs table (``SourceStore.list_runs``), and a run that
started at or after the due time (or up to ``SLOT_GRACE`` before it, for clocks that differ a
little) means the time is served: another replica's job ran it, or a cron did. Two schedulers
that find a source due at the same moment both submit, and the job queue admits one job at a
time (a row of the shared database, or the data folder's run lock), so the second is refused,
tries again five minutes later, and then finds the run.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from citewise.errors import CitewiseError, ConfigError

if TYPE_CHECKING:
    from citewise.index.source_store import SourceStore
    from citewise.settings import SourceConfig

log = logging.getLogger("citewise.ingest")

OFF = ("off", "none", "")
MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
          "@annually": "0 0 1 1 *"}
_NAMES = {
    3: {n: i for i, n in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)},
    4: {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])},
}
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 7))
_ITEM = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(\d+))?$")
HORIZON_DAYS = 366 * 5  # "30 2 31 2 *" (February 31st) never comes: say so instead of looping
RETRY_SECONDS = 300  # a scheduled run that found the run lock held tries again after this
# A run that started this long before a due time still counts as that time's: the scheduler
# that submitted it and the worker that recorded its start may read clocks a little apart.
# Shorter than any cron's period (a minute), so the previous time's run never counts.
SLOT_GRACE = timedelta(seconds=30)
LATEST_DUE_STEPS = 100_000  # how far back a catch-up looks for the latest missed due time


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is *
    any_weekday: bool  # day of week is *

    @classmethod
    def parse(cls, expression: str) -> Cron:
        text = MACROS.get(expression.strip().lower(), expression.strip().lower())
        parts = text.split()
        if len(parts) != 5:
            raise ConfigError(
                f"schedule {expression!r} is not a cron expression: it has {len(parts)} "
                "fields, cron has 5 (minute hour day-of-month month day-of-week)",
                hint='e.g. "30 2 * * *" for 02:30 every day, "0 * * * *" hourly, or @daily')
        values = [_field(expression, i, p) for i, p in enumerate(parts)]
        weekdays = frozenset(d % 7 for d in values[4])  # 7 is Sunday too
        # As in cron, a day field that starts with * ("*/2") does not restrict the other.
        return cls(expression, values[0], values[1], values[2], values[3], weekdays,
                   parts[2].startswith("*"), parts[4].startswith("*"))

    def _day_matches(self, day: datetime) -> bool:
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week  # cron: either restricted day field

    def next_after(self, moment: datetime, zone: ZoneInfo) -> datetime:
        """The first due time strictly after ``moment`` (aware), in UTC."""
        local = moment.astimezone(zone).replace(second=0, microsecond=0, tzinfo=None)
        local += timedelta(minutes=1)
        end = local + timedelta(days=HORIZON_DAYS)
        while local < end:
            if local.month not in self.months:
                local = (local.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(
                    day=1)
                continue
            if not self._day_matches(local):
                local = local.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if local.hour not in self.hours:
                local = local.replace(minute=0) + timedelta(hours=1)
                continue
            if local.minute not in self.minutes:
                local += timedelta(minutes=1)
                continue
            # A local time skipped by a DST change does not exist (zoneinfo maps it forward);
            # one repeated by it exists twice: only a due time after ``moment`` counts.
            due = local.replace(tzinfo=zone).astimezone(UTC)
            if due > moment:
                return due
            local += timedelta(minutes=1)
            continue
        raise ConfigError(f"schedule {self.expression!r} never comes due",
                          hint="check the day of month against the month (e.g. 31 in February)")


def _field(expression: str, index: int, text: str) -> frozenset[int]:
    name, low, high = _FIELDS[index]
    out: set[int] = set()
    for item in text.split(","):
        m = _ITEM.match(item)
        if not m:
            raise ConfigError(f"schedule {expression!r}: {item!r} is not a valid {name}",
                              hint="use *, a number, a range a-b, a list a,b or a step */n")
        span, step = m.group(1), int(m.group(2) or 1)
        if span == "*":
            first, last = low, high if index != 4 else 6
        elif "-" in span:
            a, b = span.split("-")
            first, last = _value(expression, index, a), _value(expression, index, b)
        else:
            first = _value(expression, index, span)
            last = high if m.group(2) else first
        if first > last or step < 1:
            raise ConfigError(f"schedule {expression!r}: {item!r} is an empty {name} range")
        out.update(range(first, last + 1, step))
    return frozenset(out)


def _value(expression: str, index: int, text: str) -> int:
    name, low, high = _FIELDS[index]
    value = _NAMES.get(index, {}).get(text[:3]) if not text.isdigit() else int(text)
    if value is None or not low <= value <= high:
        raise ConfigError(f"schedule {expression!r}: {text!r} is not a {name} "
                          f"({low}-{high}{', or a name' if index in _NAMES else ''})")
    return value


def zone_of(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r} for the schedule",
                          hint='an IANA name such as "UTC" or "Europe/Berlin"') from None


@dataclass(frozen=True)
class Planned:
    source: str
    cron: Cron


def schedule_of(source: SourceConfig, default: str | None) -> str | None:
    """The cron expression a source runs on: its own, else the default; None for "off"."""
    expression = source.schedule if source.schedule is not None else default
    if expression is None or expression.strip().lower() in OFF:
        return None
    return expression


def plan(default: str | None, sources: Sequence[SourceConfig]) -> list[Planned]:
    """Which sources run on which schedule (``schedule_of``); none for those that are off."""
    return [Planned(source.name, Cron.parse(expression)) for source in sources
            if (expression := schedule_of(source, default)) is not None]


def last_run_started(sources: SourceStore, source: str) -> datetime | None:
    """When the source's last run (of any process, any outcome) started."""
    runs = sources.list_runs(source, limit=1)
    if not runs or not runs[0].get("started_at"):
        return None
    started = datetime.fromisoformat(runs[0]["started_at"])
    return started if started.tzinfo else started.replace(tzinfo=UTC)


def latest_due(cron: Cron, since: datetime, until: datetime, zone: ZoneInfo) -> datetime:
    """The latest due time after ``since`` and at or before ``until`` (there is one: the
    caller found the first). A catch-up serves that one: a run started since it (another
    replica's catch-up) means nothing was missed. A frequent cron over a long downtime stops
    looking after ``LATEST_DUE_STEPS`` due times, with an earlier one (which counts more runs
    as serving it, never fewer)."""
    latest = cron.next_after(since, zone)
    for _ in range(LATEST_DUE_STEPS):
        following = cron.next_after(latest, zone)
        if following > until:
            break
        latest = following
    return latest


class Scheduler:
    """Submits due sources to ``submit(names, trigger)`` from a background thread.

    ``last_run(source)`` gives the start of the source's last run (aware) or None; ``now``
    is the clock (a test passes its own). ``tick()`` does one round and returns when the
    next one is due, so that the thread only sleeps in between.
    """

    def __init__(self, planned: list[Planned], zone: ZoneInfo,
                 submit: Callable[[list[str], str], None],
                 last_run: Callable[[str], datetime | None], *,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 catch_up: bool = True) -> None:
        self.planned = planned
        self.zone = zone
        self.submit = submit
        self.last_run = last_run
        self.now = now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        start = now()
        self.next_due: dict[str, datetime] = {}
        # The due time each source's next submission serves: a run started since then means
        # it is served (None: the source never ran, and any run serves it).
        self.slot: dict[str, datetime | None] = {}
        for p in planned:
            last = last_run(p.source)
            missed = catch_up and (last is None or p.cron.next_after(last, zone) <= start)
            if missed:
                self.next_due[p.source] = start
                self.slot[p.source] = None if last is None else latest_due(p.cron, last, start,
                                                                          zone)
            else:
                self.next_due[p.source] = self.slot[p.source] = p.cron.next_after(start, zone)

    def tick(self) -> datetime | None:
        """Submit what is due now (one job); the next due time."""
        now = self.now()
        due = []
        for p in self.planned:
            if self.next_due[p.source] > now:
                continue
            if self._served(p.source):
                log.info("scheduled ingest of %s: already run for its time %s (by another "
                         "replica's schedule, or a cron)", p.source, self._slot_text(p.source))
                self.next_due[p.source] = self.slot[p.source] = p.cron.next_after(now, self.zone)
            else:
                due.append(p)
        if due:
            names = [p.source for p in due]
            try:
                self.submit(names, "schedule")
                log.info("scheduled ingest of %s started", ", ".join(names))
                for p in due:
                    self.next_due[p.source] = self.slot[p.source] = p.cron.next_after(
                        now, self.zone)
            except CitewiseError as e:
                # Another run (a cron, a job) holds the lock: try again shortly rather than
                # at the next due time, which for a nightly schedule is a day away.
                log.warning("scheduled ingest of %s waits: %s; trying again in %d s",
                            ", ".join(names), e.message, RETRY_SECONDS)
                for p in due:
                    self.next_due[p.source] = now + timedelta(seconds=RETRY_SECONDS)
        return min(self.next_due.values()) if self.next_due else None

    def _served(self, source: str) -> bool:
        """Whether a run of ``source`` started since the time its next submission serves."""
        last = self.last_run(source)
        slot = self.slot[source]
        return last is not None and (slot is None or last >= slot - SLOT_GRACE)

    def _slot_text(self, source: str) -> str:
        slot = self.slot[source]
        return "first run" if slot is None else \
            slot.astimezone(self.zone).isoformat(timespec="minutes")

    def start(self) -> None:
        if not self.planned:
            return
        for p in self.planned:
            log.info("schedule: %s next at %s (%s)", p.source,
                     self.next_due[p.source].astimezone(self.zone).isoformat(timespec="minutes"),
                     p.cron.expression)
        self._thread = threading.Thread(target=self._run, name="citewise-schedule",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                upcoming = self.tick()
            except CitewiseError as e:  # the database is away, say: one line, not a trace
                log.warning("the ingest schedule could not run a round: %s; retrying in a "
                            "minute", e.message)
                upcoming = None
            except Exception:  # the schedule must outlive one bad round
                log.exception("the ingest schedule failed a round; retrying in a minute")
                upcoming = None
            wait = 60.0 if upcoming is None else (upcoming - self.now()).total_seconds()
            # Wake at least every minute: the wall clock may jump (NTP, suspend).
            self._stop.wait(min(max(wait, 0.5), 60.0))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
