"""The ``citewise`` command group, its shared context, and how a command fails.

Every command reads settings from ``CITEWISE_*`` environment variables and the config file
(``./citewise.toml`` or ``--config``). When ``citewise serve`` holds the embedded index, the
other commands send their work to it over HTTP instead of failing on the lock. With
``CITEWISE_URL`` set (``--url``), the commands that have a remote form (ingest, search, ask,
sources, verify, usage) run on that server with ``CITEWISE_API_KEY``, and the others refuse to
create a data folder here (``Context.local_data``).
"""

from __future__ import annotations

import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from citewise.api.settings import Settings
from citewise.errors import CitewiseError, ConfigError, IndexLockedError, RunLockedError
from citewise.logs import configure_logging
from citewise.private_files import restrict_umask

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL, EXIT_LOCKED = 0, 1, 2, 3, 4


def is_locked(e: CitewiseError) -> bool:
    """Another run holds the ingest run lock (here, or in the server it was handed to)."""
    return isinstance(e, RunLockedError) or getattr(e, "code", None) == RunLockedError.code


@contextmanager
def skip_if_locked():
    """A cron's run that finds another going did nothing, which is not a failure of the
    source: it says so and ends with its own exit status. Other errors go on up."""
    try:
        yield
    except CitewiseError as e:
        if not is_locked(e):
            raise
        click.secho(f"skipped: {e.message}", fg="yellow", err=True)
        if e.hint:
            click.echo(f"  hint: {e.hint}", err=True)
        sys.exit(EXIT_LOCKED)


class Context:
    def __init__(self, config: str | None, data_dir: str | None, verbose: bool,
                 url: str | None = None) -> None:
        overrides = {"data_dir": Path(data_dir)} if data_dir else {}
        self.settings: Settings = Settings.load(config, **overrides)
        # CITEWISE_URL: a server elsewhere holds the index, and this machine holds none.
        self.url = url or None
        level = "DEBUG" if verbose else self.settings.log_level
        configure_logging(level, self.settings.log_format)

    @contextmanager
    def services(self):
        """``(services, None)`` over the local index, or ``(None, server)`` when CITEWISE_URL
        names a server or a running server holds the embedded index. Closes what it opened; a
        ``CitewiseError`` inside ends the command with its message and hint."""
        from citewise.api.composition import build_services

        # The remote mode's module (the HTTP client, FastAPI's security helpers) is imported
        # only when a server is named or holds the index: a one-off local call skips it.
        services = remote = None
        try:
            if self.url:
                from citewise.api.remote import named_server

                remote = named_server(self.url)
            else:
                try:
                    services = build_services(self.settings)
                except IndexLockedError as e:
                    from citewise.api.remote import find_server

                    remote = find_server(self.settings, e)
            yield services, remote
        except CitewiseError as e:
            fail(e)
        finally:
            if services is not None:
                services.close()


    def local_data(self) -> Settings:
        """The settings of a command that has no remote form and works on this machine's data
        folder (keys, audit, backup, restore, reindex, eval).

        With CITEWISE_URL set, a data folder that holds no catalog is refused rather than made:
        the person meant the server's, and a fresh empty installation here (what `ingest` once
        built silently for a cron on another machine) helps nobody. On the server's own
        machine, where the catalog exists, these commands work as ever; with
        CITEWISE_DATABASE_URL the stores are that database's, wherever this runs."""
        if self.url and not self.settings.database_url \
                and not self.settings.data.catalog_path.exists():
            fail(ConfigError(
                f"CITEWISE_URL is set ({self.url}), and this command works on a data folder on "
                f"this machine, but {self.settings.data_dir} holds no catalog: refusing to "
                "create a new one",
                hint="run it on the server's machine (ingest, search, ask, sources, verify and "
                     "usage run on the server from here); unset CITEWISE_URL to create a data "
                     "folder on this machine"))
        return self.settings


def fail(e: CitewiseError) -> NoReturn:
    click.secho(f"error: {e.message}", fg="red", err=True)
    if e.hint:
        click.echo(f"  hint: {e.hint}", err=True)
    sys.exit(EXIT_FAILED)



@contextmanager
def local_stores(obj: Context):
    """The stores of this installation's own data folder (or database), for a command that
    reads or writes them directly; a store error ends the command with its message."""
    from citewise.api.composition import build_stores

    try:
        stores = build_stores(obj.local_data())
    except CitewiseError as e:
        fail(e)
    try:
        yield stores
    except CitewiseError as e:
        fail(e)
    finally:
        stores.close()

def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from citewise.api.cli.version import version_text

    # --config and --data-dir are eager too: given before --version, they are read here.
    click.echo(version_text(ctx.params.get("config"), ctx.params.get("data_dir")))
    ctx.exit()


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=textwrap.dedent(
        """
        \b
        Quick start:
          citewise ingest demo/runbooks        index a folder of Markdown/HTML/text
          citewise ask "how do I fail over redis?"
          citewise serve                       HTTP API on 127.0.0.1:8000, docs at /docs

        \b
        On another machine (a cron), with a key made by `citewise keys create`:
          CITEWISE_URL=https://citewise.internal CITEWISE_API_KEY=cw_... \\
            citewise ingest --source wiki      the run happens on that server

        Settings come from CITEWISE_* environment variables and citewise.toml; see README.
        """
    ),
)
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar="CITEWISE_CONFIG_FILE",
              is_eager=True,  # before --version, which reads the settings
              help="TOML config file (default: ./citewise.toml if present).")
@click.option("--data-dir", type=click.Path(file_okay=False), is_eager=True,
              help="Folder for all state [env CITEWISE_DATA_DIR, default ./data].")
@click.option("--url", envvar="CITEWISE_URL", metavar="URL",
              help="Run ingest, search, ask, sources, verify and usage on the citewise server at "
                   "URL, with the API key in CITEWISE_API_KEY; other commands then refuse to "
                   "create a data folder here [env CITEWISE_URL].")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_show_version,
              help="Show the version, and the schema version of each store live in the "
                   "database the settings name (read only), and exit.")
@click.pass_context
def cli(ctx: click.Context, config: str | None, data_dir: str | None, url: str | None,
        verbose: bool) -> None:
    """citewise: cited answers over your runbooks, wiki pages and code."""
    # Whatever the shell's umask, what any command writes (the data folder above all, which
    # holds restricted documents and key hashes; backups; the Slack bot's threads) is for this
    # account only: files that libraries create follow the umask, not our chmods.
    restrict_umask()
    try:
        ctx.obj = Context(config, data_dir, verbose, url)
    except CitewiseError as e:
        fail(e)




def identity_options(f):
    f = click.option("--group", "groups", multiple=True,
                     help="A group the user belongs to (repeatable).")(f)
    f = click.option("--user", help="Search as this user (default: anonymous, public only).")(f)
    return f

