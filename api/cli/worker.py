"""`citewise worker`: the ingest worker of a deployment on PostgreSQL, without HTTP."""

from __future__ import annotations

import signal
import textwrap
import threading

import click

from citewise import __version__
from citewise.api.cli.base import Context, cli, fail
from citewise.api.cli.serve import FOLLOW_SECONDS, reload_on_signal, start_checks
from citewise.errors import CitewiseError, ConfigError


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise worker          with CITEWISE_DATABASE_URL, the replicas' database

        Takes the ingest jobs that any `citewise serve` replica accepted (POST
        /v1/ingest/jobs, `citewise ingest` sent to a replica) from the shared database, one at
        a time, and runs the [schedule] of the config: each due time runs once, however many
        processes run a schedule. Progress and reports are written to the job, which every
        replica reads. Needs CITEWISE_DATABASE_URL and the same index, blob store, model and
        config (sources, and the variables their tokens are in) as the replicas.

        A job whose worker dies (kill -9, a lost machine) is marked failed by whichever
        replica reads it next: its run lock went with its database session. Runs are
        resumable, so the next one converges. The config is reloaded on SIGHUP; SIGTERM or
        Ctrl-C stops taking jobs and exits (a run under way stops with the process).

        Run one (or more, for failover: they take turns, one job at a time) beside API
        replicas started with CITEWISE_SERVE_RUNS_INGEST=false.
        """
    )
)
@click.pass_obj
def worker(obj: Context) -> None:
    """Run queued ingest jobs and the schedule from the shared database."""
    import logging

    from citewise.api.composition import build_services
    from citewise.api.metering.audit import AuditLog
    from citewise.api.reload import ConfigReloader
    from citewise.malloc_arenas import limit_malloc_arenas

    limit_malloc_arenas()  # before any thread starts: see core/malloc_arenas.py
    settings = obj.settings
    log = logging.getLogger("citewise")
    if not settings.database_url:
        fail(ConfigError("citewise worker takes its jobs from the shared database, and "
                         "CITEWISE_DATABASE_URL is not set",
                         hint="set it to the database the replicas use; on one machine, "
                              "`citewise serve` runs its own jobs and schedule"))
    try:
        services = build_services(settings)
    except CitewiseError as e:
        fail(e)
    try:
        start_checks(services, log)
        reloader = ConfigReloader(services, audit=AuditLog(services.stores.metering),
                                  schedule=True)
    except CitewiseError as e:
        services.close()
        fail(e)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: reload_on_signal(reloader, log))
    database = services.stores.postgres
    log.info("citewise %s worker: ingest jobs and the schedule of the database %s, data in %s",
             __version__, database.display if database is not None else "?", settings.data_dir)
    # A reindex switches the live generation: follow it, as a server does, so that this
    # worker's runs write where the replicas read.
    threading.Thread(target=services.index.follow_every, args=(FOLLOW_SECONDS, stop),
                     name="citewise-generation", daemon=True).start()
    services.jobs.start()
    reloader.start()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        log.info("worker stopping")
        services.jobs.stop()
        reloader.stop()
        services.close()
