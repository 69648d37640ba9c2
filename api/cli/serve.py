"""`citewise serve`: the HTTP API in the foreground, holding the embedded index."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import textwrap
import threading
from typing import TYPE_CHECKING

import click

from citewise import __version__
from citewise.api.cli.base import (
    Context,
    cli,
    fail,
)
from citewise.api.settings import Settings
from citewise.errors import CitewiseError, ConfigError, RunLockedError

if TYPE_CHECKING:  # the CLI's other commands (and --help) do not import the server's parts
    from citewise.api.startup import Part


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise serve                         127.0.0.1:8000, local mode
          citewise serve --host 0.0.0.0 --port 8080   (create a key or set up SSO first)

        Open http://127.0.0.1:8000/ for the page, /docs for the API. While the server runs,
        `citewise ingest` and the nightly cron hand their runs to it (the embedded index admits
        one process). With a [schedule] in the config (ingest = "30 2 * * *"), the server
        runs the ingests itself; an external cron and the schedule never overlap (one run
        lock per data folder, or per database with CITEWISE_DATABASE_URL).

        With CITEWISE_DATABASE_URL, any number of replicas serve one installation: each
        accepts ingest jobs, and one process runs each (a server, or `citewise worker`; set
        CITEWISE_SERVE_RUNS_INGEST=false on replicas that should only serve).

        The config file is read at start. After editing its [[sources]], [schedule] or
        [[guardrails]], reload it without a restart: kill -HUP <pid> (the pid is in
        data/server.json and in the start-up log) or POST /v1/admin/reload (the admin scope).
        An invalid file is refused and the server keeps its config; other settings that
        changed (data folder, address, index, model, identity) are named as needing a restart.

        On 127.0.0.1 without authentication (local mode) the X-Citewise-User/Groups headers
        are taken as given. Bound to any other address the server refuses to start unless it
        can tell who is calling: an API key (citewise keys create), Cloudflare Access
        (CITEWISE_ACCESS_*) or OIDC (CITEWISE_OIDC_*); or, behind a proxy that sets the
        identity headers itself, --insecure-trust-identity-headers.
        """
    )
)
@click.option("--host", help="Address to bind [env CITEWISE_HOST, default 127.0.0.1].")
@click.option("--port", type=int, help="Port [env CITEWISE_PORT, default 8000].")
@click.option("--insecure-trust-identity-headers", is_flag=True,
              help="Believe X-Citewise-User/Groups from every caller (only behind a proxy that "
                   "sets them) [env CITEWISE_INSECURE_TRUST_IDENTITY_HEADERS].")
@click.pass_obj
def serve(obj: Context, host: str | None, port: int | None,
          insecure_trust_identity_headers: bool) -> None:
    """Serve the HTTP API (search, answers, ingest jobs, metrics)."""
    import logging

    import uvicorn

    from citewise.api.app import create_app, uvicorn_options
    from citewise.api.composition import build_services
    from citewise.api.reload import ConfigReloader
    from citewise.api.remote import remove_server_file, write_server_file
    from citewise.api.startup import Startup
    from citewise.malloc_arenas import limit_malloc_arenas

    limit_malloc_arenas()  # before any thread starts: see core/malloc_arenas.py
    settings = obj.settings
    host = host or settings.server.host
    port = port or settings.server.port
    log = logging.getLogger("citewise")
    if insecure_trust_identity_headers:
        settings.identity.insecure_trust_identity_headers = True
    runs_ingest = settings.ingest.serve_runs_ingest
    if not runs_ingest and not settings.database_url:
        fail(ConfigError("CITEWISE_SERVE_RUNS_INGEST=false, but without CITEWISE_DATABASE_URL "
                         "no other process can run the jobs this server accepts",
                         hint="set CITEWISE_DATABASE_URL and run `citewise worker` beside the "
                              "servers, or leave CITEWISE_SERVE_RUNS_INGEST unset"))
    try:
        services = build_services(settings)
    except CitewiseError as e:
        fail(e)
    # The port opens now and the heavy parts load behind it (api/startup.py): /healthz says
    # "starting" meanwhile, /readyz 503, and requests wait for the model.
    uvicorn_server: list[uvicorn.Server] = []

    def stop_serving() -> None:  # the model cannot load: nothing can be answered
        for server in uvicorn_server:
            server.should_exit = True

    startup = Startup(start_parts(services, log), on_fatal=stop_serving)
    startup.start()
    operator_token = secrets.token_urlsafe(32)

    def reread() -> Settings:
        fresh = settings.reread()  # the same file, environment and --data-dir
        if insecure_trust_identity_headers:  # a flag of this command, not of the file
            fresh.identity.insecure_trust_identity_headers = True
        return fresh

    try:
        app = create_app(settings, services, operator_token=operator_token, bind_host=host,
                         startup=startup)
        # The config's sources, [schedule] and [[guardrails]], reloaded on SIGHUP and
        # POST /v1/admin/reload; it runs the schedule where this server runs ingests.
        reloader = ConfigReloader(services, load=reread, audit=app.state.door.audit,
                                  schedule=runs_ingest)
        app.state.reloader = reloader
    except CitewiseError as e:
        services.close()
        fail(e)
    write_server_file(settings, host, port, operator_token)
    log.info("citewise %s serving on http://%s:%d (docs at /docs), data in %s", __version__,
             host, port, settings.data_dir)
    log.info("identity: %s", app.state.door.authenticator.describe())
    if settings.config_file:
        log.info("config: %s (reload it with `kill -HUP %d` or POST /v1/admin/reload)",
                 settings.config_file, os.getpid())
    # uvicorn handles SIGTERM by shutting down, restoring the previous handler and re-sending
    # the signal; with this handler the re-sent signal exits through `finally` below, so
    # server.json is removed and the index is flushed under systemd, docker and Kubernetes too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: reload_on_signal(reloader, log))
    reloader.start()
    if runs_ingest:
        services.jobs.start()  # a shared queue's worker; nothing for this process's own
    else:
        log.info("ingest jobs and the schedule: left to `citewise worker` "
                 "(CITEWISE_SERVE_RUNS_INGEST=false); this server accepts jobs")
    # An idle server moves to a new index generation within seconds of `citewise reindex`
    # switching, rather than at its next request: until then any other process could open
    # (and, on the embedded engine, lock) the new generation's folder.
    stop_following = threading.Event()
    threading.Thread(target=services.index.follow_every, args=(FOLLOW_SECONDS, stop_following),
                     name="citewise-generation", daemon=True).start()
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=settings.log_level.lower(), log_config=None,
        **uvicorn_options(settings.server)))
    uvicorn_server.append(server)
    if startup.fatal_failure:  # failed before the server existed to be stopped
        server.should_exit = True
    try:
        server.run()
    finally:
        stop_following.set()
        services.jobs.stop()
        reloader.stop()
        remove_server_file(settings)
        # A part may still be loading (the parsers): let it end before the index closes.
        startup.wait_finished(10)
        services.close()
    if startup.fatal_failure:
        fail(CitewiseError(f"the server stopped: {startup.problem()}",
                           hint="see the log above; check CITEWISE_EMBEDDING_MODEL_PATH (or "
                                "CITEWISE_EMBEDDING_URL) and that the model folder is intact"))
    if not server.started:  # the port could not be bound (uvicorn logged why)
        sys.exit(3)


def start_parts(services, log) -> list[Part]:
    """What `citewise serve` loads behind its open port, in order. Requests wait for the first
    two: the query encoder (the model's numpy forward pass, a fraction of a second: see
    ``DenseEncoder._encode_small``; nothing can be answered if it fails) and the checks a crash
    may need. Then torch's model (what ingest runs embed documents with, and what questions
    use once it is loaded; its failure stops the server too) and the parsers, which only
    ingest runs use: loaded now so that the first scheduled or API ingest does not wait. Those
    two wait until the port is open, so that their imports do not slow the server's own."""
    from citewise.api.startup import Part
    from citewise.ingest.parse import warm_up as warm_parsers

    return [Part("query encoder", services.dense.warm_up_queries, needed=True, fatal=True),
            Part("start-up checks", lambda: start_checks(services, log), needed=True),
            Part("embedding model", services.dense.warm_up, fatal=True, after_bind=True),
            Part("parsers", warm_parsers, after_bind=True)]


def start_checks(services, log) -> None:
    # Finish what a crash left half-done, and say so loudly if the index and the catalog
    # disagree (a deleted or restored index folder): search would quietly miss documents.
    from citewise.ingest.consistency import check

    try:
        # Under the run lock: beside other replicas, an open swap may be a running ingest's
        # own (a worker's, a cron's), not a crash's, and is left to it.
        with services.run_lock.held("finishing the swaps a crash left open (start-up)"):
            recovered = services.pipeline.swap.recover()
    except RunLockedError as e:
        recovered = 0
        log.info("open document swaps left to the ingest run under way: %s", e.message)
    if recovered:
        log.warning("finished %d document swaps an earlier crash left open", recovered)
    problem = check(services.catalog, services.index).problem()
    if problem:
        log.error("index check: %s", problem)
    from citewise.ingest.reindex import stale_documents

    stale = stale_documents(services.catalog, services.pipeline.signature)
    if stale:
        # Serving the index as it is stays right (the model is checked above); rebuilding it
        # in place would mix old and new chunks until done. Said, not done.
        log.warning("%d documents were indexed with other settings (chunk size or chunker) "
                    "than this server's: run `citewise reindex` to rebuild the index with them "
                    "beside the live one, which keeps serving meanwhile", stale)


# How often a server checks whether `citewise reindex` switched the live index generation.
FOLLOW_SECONDS = 2.0


def reload_on_signal(reloader, log) -> None:
    """SIGHUP: reload the config on a thread of its own, since the handler runs on the event
    loop's thread and a reload may wait for the scheduler to stop. An invalid file is logged
    (and audited) by the reload, and the server keeps its config."""
    def run() -> None:
        try:
            reloader.reload(actor="operator", via="SIGHUP")
        except CitewiseError:
            pass
        except Exception:
            log.exception("config reload (SIGHUP) failed; the server keeps its config")

    threading.Thread(target=run, name="citewise-reload", daemon=True).start()
