"""`citewise ingest`: index a folder, a declared source, or all of them."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import click

from citewise.api.cli.base import (
    EXIT_FAILED,
    EXIT_PARTIAL,
    Context,
    cli,
    skip_if_locked,
)
from citewise.errors import CitewiseError


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise ingest ./runbooks                 folder -> source "runbooks"
          citewise ingest ./docs --name eng-docs     choose the source name
          citewise ingest --source wiki              a source declared in citewise.toml
          citewise ingest --all                      every declared source (nightly cron)
          citewise ingest ./runbooks --readers group:sre,group:eng

        A folder given as PATH is readable by --readers (default: public, or the
        settings' default_readers), except for files whose front matter names readers.

        Runs are incremental: unchanged documents are not parsed or embedded again, changed
        ones are replaced atomically, deleted ones are removed. One bad file never stops a
        run; it is listed in the summary.

        \b
        On another machine, the run happens on the server that CITEWISE_URL names, with the
        key in CITEWISE_API_KEY (scope ingest), and nothing is stored here:
          CITEWISE_URL=https://citewise.internal CITEWISE_API_KEY=cw_... \\
            citewise ingest --source wiki
        Its sources are the server's (--source, --all); a folder of this machine cannot be
        sent: declare it in the server's citewise.toml.

        \b
        One run at a time per data folder: a run that finds another going (the server's
        schedule, a job, another cron) does nothing and exits with 4.

        \b
        Exit status: 0 all documents indexed, 3 some documents failed (see summary),
        1 the run failed (source unreadable, bad settings, the data folder's disk full,
        the blob store not answering), 2 usage error, 4 another run holds the lock
        (nothing was done).
        """
    )
)
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--name", help="Source name for PATH (default: the folder's name).")
@click.option("--source", "source", help="Ingest a source declared in the config file.")
@click.option("--all", "all_sources", is_flag=True, help="Ingest every declared source.")
@click.option("--readers", help="Who may read the documents of PATH that name no readers "
                                "themselves: comma-separated group:<name>, user:<id> or public "
                                "[default: CITEWISE_DEFAULT_READERS, else public].")
@click.option("--force", is_flag=True,
              help="Re-process unchanged documents, and allow a run to delete more than half "
                   "of a source (refused otherwise, in case the source is only unreadable).")
@click.option("--json", "as_json", is_flag=True, help="Print the run reports as JSON.")
@click.pass_obj
def ingest(obj: Context, path, name, source, all_sources, readers, force, as_json) -> None:
    """Index a folder, a declared source, or all declared sources."""
    from citewise.ingest.sources import resolve_sources

    if sum(bool(x) for x in (path, source, all_sources)) != 1:
        raise click.UsageError(
            "say what to ingest: a folder PATH, --source NAME or --all (exactly one)"
        )
    if (name or readers) and not path:
        raise click.UsageError("--name and --readers are for a folder PATH; pass PATH too")
    if path and obj.url:
        # The server reads its own disks: this machine's folder is not there to be read.
        raise click.UsageError(
            f"{path} is a folder on this machine, and CITEWISE_URL sends the run to the server "
            f"at {obj.url}, which cannot read it: declare it as a source in the server's "
            "citewise.toml and run `citewise ingest --source NAME`, or unset CITEWISE_URL to "
            "index it into a data folder here")
    if path:
        # The operator on their own machine: public unless they or the settings say otherwise,
        # and it is said out loud.
        chosen = [r for r in (readers or "").split(",") if r.strip()] or \
            obj.settings.default_readers or ["public"]
        readers = chosen
        click.echo(f"readers of {path} (unless a file names its own): {', '.join(chosen)}",
                   err=True)
    with obj.services() as (services, remote), skip_if_locked():
        if remote is not None:
            reports = _ingest_remote(remote, path, name, source, all_sources, readers, force,
                                     as_json)
        else:
            sources = resolve_sources(
                obj.settings.sources, services.sources, data_dir=obj.settings.data_dir,
                default_readers=obj.settings.default_readers, path=path, name=name,
                source=source, all_sources=all_sources, readers=readers,
            )
            with services.run_lock.held(f"citewise ingest ({_what(sources)})"):
                reports = _ingest_local(services, sources, force)
    if as_json:
        click.echo(json.dumps(reports, indent=2))
    else:
        for r in reports:
            color = {"succeeded": "green", "partial": "yellow"}.get(r["status"], "red")
            click.secho(r["summary"], fg=color)
            for problem in r.get("run_errors", []):
                click.echo(f"  problem: {problem}")
            for warning in r.get("warnings", []):
                click.echo(f"  warning: {warning}")
            for err in r["errors"][:50]:
                click.echo(f"  failed: {err['external_id']}: {err['error']}")
            if len(r["errors"]) > 50:
                click.echo(f"  ... and {len(r['errors']) - 50} more (GET /v1/ingest/runs/"
                           f"{r['run_id']})")
    statuses = {r["status"] for r in reports}
    if statuses & {"failed", "interrupted"}:
        sys.exit(EXIT_FAILED)
    if "partial" in statuses:
        sys.exit(EXIT_PARTIAL)


def _what(sources) -> str:
    names = [s.name for s in sources]
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _ingest_local(services, sources, force) -> list[dict]:
    from citewise.ingest.jobs import report_dict, run_source
    from citewise.ingest.progress import TerminalProgress

    reports = []
    for source in sources:
        report = run_source(
            services.pipeline, source, trigger="cli", force=force,
            progress=TerminalProgress(source.name),
        )
        reports.append(report_dict(report))
    return reports


def _ingest_remote(remote, path, name, source, all_sources, readers, force,
                   as_json) -> list[dict]:
    if remote.operator:
        click.echo(f"the server at {remote.url} holds the index; handing the run to it",
                   err=True)
    else:
        click.echo(f"running on the server at {remote.url} (CITEWISE_URL)", err=True)
    from citewise_client import IngestRequest

    request = IngestRequest(path=str(Path(path).resolve()) if path else None, name=name,
                            source=source, all=all_sources, force=force,
                            readers=readers if path else None)
    last: list[str | None] = [None]

    def on_update(job: dict) -> None:
        line = f"job {job['id']}: {job['status']}"
        if job.get("current"):
            c = job.get("counts") or {}
            line += (f", {job['current']}: {c.get('seen', 0)} seen, {c.get('added', 0)} added, "
                     f"{c.get('updated', 0)} updated, {c.get('chunks_embedded', 0)} embedded")
        if line != last[0] and not as_json:
            click.echo(line, err=True)
            last[0] = line

    job = remote.ingest(request, on_update)
    if job["status"] == "failed":
        raise CitewiseError(f"the server's ingest job failed: {job.get('message')}")
    return job["reports"]


