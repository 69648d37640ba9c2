"""Reloading a running server's config file: its sources, the ingest schedule and the
guardrails, on ``SIGHUP`` and ``POST /v1/admin/reload``.

What a reload does, in order: read the file again (with the same environment and command-line
overrides as at start), check everything it would change (each new or changed source builds
its connector, each cron expression and the time zone parse, the guardrails build), and only
then swap. A file that fails any check changes nothing: the server keeps the config it has, the
error is logged, and the HTTP caller gets it as a 422 problem document.

Everything else the file or the environment sets is built into the services at start (the data
folder, the address, the index and blob backends, the embedding model, the identity methods,
model providers...): a reload that finds one of those changed names it as needing a restart
rather than ignoring it.

Why the swap is safe for requests in flight: each reloadable thing is an attribute that a
request reads once (``services.settings``, ``services.guardrails``,
``services.library.declared``) and that a reload replaces by assignment with a new object,
never changing the old one in place; a request keeps what it read, the next one gets the new.
A running ingest job holds the ``SourceConfig`` objects it was given. The scheduler is stopped
and a new one started (only when which source runs when changed; a due source is looked up in
the current settings when it is due). One reload runs at a time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from citewise.api.composition import Services, build_scheduler
from citewise.api.guardrails import Guardrails
from citewise.api.metering.audit import AuditLog
from citewise.api.settings import Settings
from citewise.connectors.registry import build_connector
from citewise.errors import CitewiseError, ConfigError, ConfigRefusedError, NotFoundError
from citewise.ingest.schedule import Scheduler, plan, zone_of
from citewise.retrieval.library import DeclaredSource
from citewise.settings import find_source, table_of

log = logging.getLogger("citewise")

# What a reload changes in a running server, by name. Everything else needs a restart.
RELOADABLE = ("sources", "guardrails", "schedule_ingest", "schedule_timezone",
              "schedule_catch_up")
# The config file is the file itself, and the Slack bot's settings are read by `citewise slack`,
# a process of its own: restarting the server would change nothing for them.
NOT_THE_SERVERS = ("config_file",)
NOT_THE_SERVERS_PARTS = ("slack",)


@dataclass
class Reloaded:
    """What a reload changed, and what it found changed that it cannot apply."""

    config_file: str | None
    read_at: str | None
    sources_added: list[str] = field(default_factory=list)
    sources_removed: list[str] = field(default_factory=list)
    sources_changed: list[str] = field(default_factory=list)
    schedule_changed: bool = False
    guardrails_changed: bool = False
    needs_restart: list[str] = field(default_factory=list)

    @property
    def reloaded(self) -> list[str]:
        sources = self.sources_added or self.sources_removed or self.sources_changed
        return [name for name, changed in (("sources", sources),
                                           ("schedule", self.schedule_changed),
                                           ("guardrails", self.guardrails_changed)) if changed]

    def summary(self) -> str:
        done = ", ".join(self.reloaded) or "nothing changed"
        parts = [f"reloaded {self.config_file or 'the settings (no config file)'}: {done}"]
        for word, names in (("added", self.sources_added), ("removed", self.sources_removed),
                            ("changed", self.sources_changed)):
            if names:
                parts.append(f"sources {word}: {', '.join(names)}")
        if self.needs_restart:
            parts.append(f"changed but needs a restart: {', '.join(self.needs_restart)}")
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {"config_file": self.config_file, "read_at": self.read_at,
                "reloaded": self.reloaded,
                "sources": {"added": self.sources_added, "removed": self.sources_removed,
                            "changed": self.sources_changed},
                "needs_restart": self.needs_restart, "summary": self.summary()}


@dataclass
class _Swap:
    """A checked reload, not yet applied."""

    settings: Settings
    declared: list[DeclaredSource]
    guardrails: Guardrails | None  # None: unchanged
    scheduler: Scheduler | None  # None: the plan is unchanged (or this server runs none)
    reloaded: Reloaded


class ConfigReloader:
    """Reloads the config of ``services`` from ``load()`` (by default the same file, environment
    and overrides as at start). With ``schedule``, it also owns the ingest scheduler
    (``start``/``stop`` it with the server); ``audit`` records each reload."""

    def __init__(self, services: Services, *, load: Callable[[], Settings] | None = None,
                 audit: AuditLog | None = None, schedule: bool = False) -> None:
        self.services = services
        self.load = load or (lambda: services.settings.reread())
        self.audit = audit
        self.scheduler = build_scheduler(services.settings, services) if schedule else None
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.scheduler is not None:
            self.scheduler.start()

    def stop(self) -> None:
        with self._lock:
            if self.scheduler is not None:
                self.scheduler.stop()

    def reload(self, *, actor: str, via: str, key: str | None = None, client: str | None = None,
               request_id: str | None = None) -> Reloaded:
        """Read, check and swap; ``ConfigRefusedError`` (and nothing changed) if the file is
        invalid. Recorded in the audit log either way."""
        def record(outcome: str, detail: dict) -> None:
            if self.audit is not None:
                self.audit.record("config.reload", actor=actor, key=key, outcome=outcome,
                                  target=str(self.services.settings.config_file), client=client,
                                  detail={"via": via, **detail}, request_id=request_id)

        with self._lock:
            old = self.services.settings
            try:
                swap = self._check(old, self.load())
            except CitewiseError as e:
                refused = _refusal(old, e)
                log.error("config reload (%s) refused: %s", via, refused.message)
                record("refused", {"error": refused.message})
                raise refused from None
            self._apply(swap)
        log.info("config reload (%s): %s", via, swap.reloaded.summary())
        if swap.reloaded.needs_restart:
            log.warning("config reload: changed, but only a restart of the server applies "
                        "them: %s", ", ".join(swap.reloaded.needs_restart))
        record("ok", {"reloaded": swap.reloaded.reloaded,
                      "needs_restart": swap.reloaded.needs_restart})
        return swap.reloaded

    # ------------------------------------------------------------------------------------------
    def _check(self, old: Settings, new: Settings) -> _Swap:
        stamp = new.config_stamp
        reloaded = Reloaded(config_file=str(new.config_file) if new.config_file else None,
                            read_at=stamp.read_at.isoformat(timespec="seconds") if stamp
                            else None, needs_restart=needs_restart(old, new))
        before = {s.name: s for s in old.sources}
        after = {s.name: s for s in new.sources}
        reloaded.sources_added = [n for n in after if n not in before]
        reloaded.sources_removed = [n for n in before if n not in after]
        reloaded.sources_changed = [n for n in after if n in before
                                    and after[n].model_dump() != before[n].model_dump()]
        for name in reloaded.sources_added + reloaded.sources_changed:
            _check_source(new, name)
        guardrails = None
        new_policies, old_policies = new.answering.guardrails, old.answering.guardrails
        if [g.model_dump() for g in new_policies] != [g.model_dump() for g in old_policies]:
            guardrails = Guardrails(new_policies)
            reloaded.guardrails_changed = True
        scheduler = None
        if _plan_of(new) != _plan_of(old):  # parses the new expressions and zone: the check
            reloaded.schedule_changed = True
            if self.scheduler is not None:
                scheduler = build_scheduler(new, self.services)
        now = new.named_values()
        merged = old.replaced(**{name: now[name] for name in RELOADABLE})
        merged._config_stamp = stamp
        return _Swap(settings=merged,
                     declared=[DeclaredSource(s.name, s.type) for s in new.sources],
                     guardrails=guardrails, scheduler=scheduler, reloaded=reloaded)

    def _apply(self, swap: _Swap) -> None:
        # The settings first: a job submitted by name from here on finds the new sources.
        self.services.settings = swap.settings
        self.services.library.declared = swap.declared
        if swap.guardrails is not None:
            self.services.guardrails = swap.guardrails
        if swap.scheduler is not None:
            if self.scheduler is not None:
                self.scheduler.stop()
            self.scheduler = swap.scheduler
            self.scheduler.start()


def _check_source(settings: Settings, name: str) -> None:
    """A new or changed source must at least make its connector (its type and options), as an
    ingest would, before the server takes it: that reads no source."""
    source = find_source(settings.sources, name)
    try:
        build_connector(source, data_dir=settings.data_dir)
    except (CitewiseError, ValueError, TypeError) as e:  # ValueError: a connector's own
        # config model refusing a value. The message names the source unless it does already.
        message = e.message if isinstance(e, CitewiseError) else str(e)
        if f"source {name!r}" not in message:
            message = f"source {name!r}: {message}"
        raise ConfigError(message, hint=getattr(e, "hint", None)) from None


def _plan_of(settings: Settings) -> tuple:
    schedule = settings.ingest
    planned = plan(schedule.schedule_ingest, settings.sources)
    zone_of(schedule.schedule_timezone)
    return ([(p.source, p.cron.expression) for p in planned], schedule.schedule_timezone,
            schedule.schedule_catch_up)


def needs_restart(old: Settings, new: Settings) -> list[str]:
    """The settings whose value differs between ``old`` and ``new`` that a reload cannot
    apply, by the name the config file gives them (never their values: some are secrets)."""
    before, after = old.named_values(), new.named_values()
    out = []
    for name, (part, declared) in old.setting_fields().items():
        if name in RELOADABLE or name in NOT_THE_SERVERS or part in NOT_THE_SERVERS_PARTS:
            continue
        if before[name] != after[name]:
            out.append(table_of(declared) or name)
    return out


def _refusal(old: Settings, error: CitewiseError) -> ConfigRefusedError:
    stamp = old.config_stamp
    kept = (f"the server keeps the config it read at {_when(stamp.read_at)}" if stamp
            else "the server keeps the config it started with")
    return ConfigRefusedError(f"the config file was not reloaded: {error.message}; {kept}",
                              hint=error.hint or "fix the file, then reload again")


def _when(moment) -> str:
    return moment.astimezone().isoformat(timespec="seconds")


def stale_config(settings: Settings) -> str | None:
    """What to say when the server's config is older than its file, else None."""
    stamp = settings.config_stamp
    if stamp is None or not stamp.changed():
        return None
    return (f"the server's config is older than the file: the server read {stamp.path} at "
            f"{_when(stamp.read_at)}; the file has changed since")


def with_stale_config(error: NotFoundError, settings: Settings) -> NotFoundError:
    """``error`` (a source the server does not know), saying so when the server's config is
    older than the file: the source may well be in the file, added after the server read it."""
    stale = stale_config(settings)
    if stale is None:
        return error
    return NotFoundError(f"{error.message}; {stale}",
                         hint=f"reload it with `kill -HUP {os.getpid()}` or `POST "
                              "/v1/admin/reload` (the admin scope), then run this again")
