"""`citewise verify`, `backup` and `restore`: knowing the index is right, and keeping a copy."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import click

from citewise.api.cli.base import (
    EXIT_PARTIAL,
    Context,
    cli,
    fail,
    skip_if_locked,
)
from citewise.api.settings import Settings
from citewise.errors import CitewiseError, ConfigError


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise verify                    what disagrees, if anything
          citewise verify --repair           and fix it from the catalog
          citewise verify --repair --json
          citewise verify --rebuild-catalog  a lost catalog's documents, from the index

        Compares the catalog, the vector index and the blob store: every live chunk has exactly
        one point of the live version whose payload (readers above all) says what the catalog
        says; no stray points or blobs; no swap left open by a crash. --repair fixes what it
        finds from the catalog and the stored blobs, without reading any source (points are
        rebuilt through the embedding cache); it is safe to interrupt and run again. A missing
        blob cannot come from the catalog: repair marks its document to be read again, and the
        next `citewise ingest` of its source stores it again. Files of the data folder that
        other accounts may read are made private (0600, folders 0700).

        A catalog that lists few documents while the index and the blobs hold many more was
        lost: verify says so and --repair refuses to delete them (--force does). Restore a
        backup, or --rebuild-catalog: the documents and chunks written back from the index's
        points (readers exact) and the blobs, each marked to be read again by its source's next
        run, which makes exact what the index does not hold.

        Problems are summarised per kind (a deleted index folder is a few lines, not one per
        chunk): a kind with up to 5 is listed whole, more are counted with the documents that
        have the most; --verbose lists every one, and --json always holds every one.

        Takes the ingest run lock (no run may write meanwhile). While `citewise serve` holds
        the index, or CITEWISE_URL names a server (a key with the ingest scope in
        CITEWISE_API_KEY), the server does the work.

        \b
        Exit status: 0 consistent (or repaired), 3 problems found (or left after --repair),
        1 error, 4 an ingest run holds the lock.
        """
    )
)
@click.option("--repair", is_flag=True, help="Fix what is found (from the catalog and blobs).")
@click.option("--force", is_flag=True,
              help="With --repair: delete the strays even when the catalog looks lost.")
@click.option("--rebuild-catalog", is_flag=True,
              help="Write back the documents of the index's points that the catalog lacks.")
@click.option("--verbose", is_flag=True,
              help="List every problem, not a summary per kind.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (every problem).")
@click.pass_obj
def verify(obj: Context, repair: bool, force: bool, rebuild_catalog: bool, verbose: bool,
           as_json: bool) -> None:
    """Check (and repair) the index and the blob store against the catalog."""
    if rebuild_catalog and repair:
        raise click.UsageError("--rebuild-catalog and --repair are separate steps: rebuild "
                               "first, then verify again")
    if force and not repair:
        raise click.UsageError("--force goes with --repair")
    with obj.services() as (services, remote), skip_if_locked():
        if remote is not None and rebuild_catalog:
            fail(ConfigError(f"the server at {remote.url} holds the index",
                             hint="on the server's machine: stop it, rebuild the catalog, "
                                  "then start it again"))
        if rebuild_catalog:
            _rebuild_catalog(services, as_json)
            return
        if remote is not None:
            click.echo(f"the server at {remote.url} holds the index; asking it" if
                       remote.operator else f"asking the server at {remote.url} (CITEWISE_URL)",
                       err=True)
            result = remote.verify(repair=repair, force=force)
        else:
            result = _verify_local(services, repair, force)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        _print(result, verbose)
    if not result["ok"]:
        sys.exit(EXIT_PARTIAL)


def _verify_local(services, repair: bool, force: bool) -> dict:
    from citewise.ingest.repair import verify_index

    what = "citewise verify --repair" if repair else "citewise verify"
    with services.jobs.run_lock.held(what):
        if not repair:
            return verify_index(services.pipeline, fix=False)
        with click.progressbar(length=1, label="rebuilding points", file=sys.stderr) as bar:
            def on_document(n: int, total: int) -> None:
                bar.length = total
                bar.update(1)
            return verify_index(services.pipeline, fix=True, force=force,
                                on_document=on_document)


def _rebuild_catalog(services, as_json: bool) -> None:
    from citewise.ingest.rebuild_catalog import rebuild_catalog

    types = {s.name: s.type for s in services.settings.sources}
    with services.jobs.run_lock.held("citewise verify --rebuild-catalog"):
        report = rebuild_catalog(services.pipeline, types)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    click.echo(f"rebuilt {report.documents} documents ({report.chunks} chunks) from the "
               f"index's points, readers as the points carry them; {report.with_blob} with "
               f"their blob ({report.skipped} already in the catalog)")
    if report.documents:
        click.echo("not exact until each source's next run: the media type of a page that is "
                   "not code (taken from its path), when it was indexed and updated, its "
                   "outline (answers quote sections without it), token counts"
                   + (f", and {len(report.guessed_external_ids)} external ids"
                      if report.guessed_external_ids else "")
                   + (f"; {report.documents - report.with_blob} documents have no blob"
                      if report.with_blob < report.documents else ""))
        click.echo("every rebuilt document is marked to be read again: run `citewise ingest "
                   "--all`, then `citewise verify`")


def _print(result: dict, verbose: bool) -> None:
    from citewise.ingest.consistency import EXAMPLES, WHOLE

    done = result.get("repair")
    if done is not None:
        _print_findings("found", done["found"], None if verbose else done.get("found_summary"))
        click.echo(
            f"repaired: {done['swaps_finished']} open swaps finished, {done['points_deleted']} "
            f"stray points deleted, {done['documents_rebuilt']} documents' points rebuilt "
            f"({done['points_written']} points), {done['blobs_deleted']} stray blobs deleted, "
            f"{done.get('made_private', 0)} files and folders made private")
        marked = done["marked_for_reread"]
        shown = marked if verbose or len(marked) <= WHOLE else marked[:EXAMPLES]
        for doc in shown:
            click.echo(f"blob lost: {doc} will be read again by its source's next run "
                       "(`citewise ingest`), which stores its blob again")
        if len(shown) < len(marked):
            click.echo(f"blob lost: ... and {len(marked) - len(shown)} more documents "
                       "(--verbose lists every one)")
    _print_findings("problem", result["problems"], None if verbose else result.get("summary"),
                    color="red")
    if result["ok"]:
        click.secho("consistent: the catalog, the index and the blob store agree", fg="green")
        return
    if result.get("lost_catalog"):
        click.secho(f"{len(result['problems'])} problems, and a lost catalog: "
                    f"{result['lost_catalog']}", fg="yellow")
    elif done is not None:
        marked = len(done["marked_for_reread"])
        click.secho(f"{len(result['problems'])} problems remain"
                    + (f": {marked} documents whose blob is lost are read again by `citewise "
                       "ingest` (their sources' next run), which stores their blobs; verify "
                       "then passes" if marked else ""), fg="yellow")
    else:
        click.secho(f"{len(result['problems'])} problems; `citewise verify --repair` would:",
                    fg="yellow")
        for line in result.get("plan") or []:
            click.echo(f"  - {line}")


def _print_findings(label: str, lines: list[str], summary: list[dict] | None,
                    color: str | None = None) -> None:
    """Every line, or (given the server's ``summary``) each kind whole when it has few, else its
    count and a few examples: a deleted index folder is a few lines, not one per chunk."""
    if summary is None:
        for line in lines:
            click.secho(f"{label}: {line}", fg=color)
        return
    for group in summary:
        if group["count"] <= len(group["examples"]):
            for line in group["examples"]:
                click.secho(f"{label}: {line}", fg=color)
            continue
        click.secho(f"{label}: {group['headline']}; for example:", fg=color)
        for line in group["examples"]:
            click.echo(f"  {line}")
        click.echo(f"  ... --verbose lists all {group['count']}")


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise backup backups/2026-12-03
          citewise backup /srv/backups/citewise-$(date +%F)     (from a cron)

        A consistent copy while the server runs: the catalog (SQLite's online backup), every
        document's stored bytes (local blobs or S3), the embedding cache and the config file.
        It holds the ingest run lock: a run that starts meanwhile finds it held (a cron exits 4,
        the server's schedule tries again five minutes later); search keeps serving. The vector
        index is not copied: `citewise restore` rebuilds it from the catalog, exactly.
        With CITEWISE_DATABASE_URL (PostgreSQL) the state is the database's: back it up with
        pg_dump or your managed service instead (backup and restore refuse, saying so).

        Exit status: 0 done, 1 error, 4 an ingest run holds the lock (try after it).
        """
    )
)
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@click.pass_obj
def backup(obj: Context, dest: Path) -> None:
    """Copy the catalog, blobs, embedding cache and config to DEST."""
    from citewise.api.composition import build_blobs
    from citewise.ingest.backup import backup as run_backup
    from citewise.ingest.runlock import RunLock

    try:
        settings = obj.local_data()
        with skip_if_locked(), RunLock(settings.data.run_lock_path).held(
                f"citewise backup {dest}"):
            manifest = run_backup(settings.data, build_blobs(settings), dest,
                                  config_file=settings.config_file,
                                  blob_store=settings.index.blob_store,
                                  database_url=settings.database_url)
    except CitewiseError as e:
        fail(e)
    click.echo(f"backed up {manifest['documents']} documents, {manifest['chunks']} chunks and "
               f"{manifest['blobs']} blobs ({manifest['blob_bytes'] / 1e6:.1f} MB) to {dest}")
    for key in manifest["missing_blobs"]:
        click.secho(f"warning: blob {key} was already missing (citewise verify says which "
                    "document; its source's next run restores it)", fg="yellow")


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise --data-dir restored restore backups/2026-12-03

        Into an empty data folder, and an empty blob store and Qdrant collection when those are
        configured: the catalog, blobs and embedding cache are put back, the index is rebuilt
        from the catalog's chunks (the embedding cache answers instead of the model), and
        `verify` runs. Then point the server at that folder.
        """
    )
)
@click.argument("source", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_obj
def restore(obj: Context, source: Path) -> None:
    """Make an empty data folder from a backup, rebuilding the index."""
    from citewise.api.composition import build_blobs, build_services
    from citewise.ingest.backup import restore as run_restore
    from citewise.ingest.repair import repair

    obj.local_data()
    try:
        _refuse_a_collection_in_use(obj.settings)
        manifest = run_restore(source, obj.settings.data, build_blobs(obj.settings),
                               min_free_bytes=obj.settings.ingest.min_free_bytes,
                               database_url=obj.settings.database_url)
        click.echo(f"restored the catalog and {manifest['blobs']} blobs of {source} "
                   f"(backed up {manifest['created_at']}); rebuilding the index", err=True)
        services = build_services(obj.settings)
        try:
            with click.progressbar(length=max(1, manifest["documents"]), label="rebuilding",
                                   file=sys.stderr) as bar:
                report = repair(services.pipeline, on_document=lambda n, total: bar.update(1))
        finally:
            services.close()
    except CitewiseError as e:
        fail(e)
    click.echo(f"rebuilt {report.points_written} points of {report.documents_rebuilt} documents "
               f"in {obj.settings.data_dir}")
    for line in report.remaining:
        click.secho(f"problem: {line}", fg="red")
    if report.remaining:
        sys.exit(EXIT_PARTIAL)
    click.secho("consistent: the catalog, the index and the blob store agree", fg="green")


def _refuse_a_collection_in_use(settings: Settings) -> None:
    """A Qdrant server's collection that holds points belongs to an installation: the repair
    after the restore would delete its newer points as strays. (An embedded index lives in the
    data folder, which restore already requires to be empty.)"""
    if not settings.index.qdrant_url:
        return
    from citewise.api.composition import build_dense, build_index, build_index_store
    from citewise.errors import ConfigError
    from citewise.index.qdrant_server_index import ServerIndexStore

    dim = build_dense(settings).dim
    index = build_index(settings, dim)
    try:
        points = index.count()
    finally:
        index.close()
    if points:
        raise ConfigError(f"the Qdrant collection {settings.index.qdrant_collection!r} already "
                          f"holds {points} points", hint="restore into a new collection "
                          "(CITEWISE_QDRANT_COLLECTION), then point the server at it")
    # After a `citewise reindex` an installation lives in `<collection>-gN` and the base
    # collection is gone: those are in use just the same.
    store = build_index_store(settings, dim)
    assert isinstance(store, ServerIndexStore)  # qdrant_url is set: its generations are collections
    try:
        generations = [name for name in store.names() if name]
    finally:
        store.close()
    if generations:
        raise ConfigError(f"the Qdrant collections of {settings.index.qdrant_collection!r} include "
                          f"index generations ({', '.join(store.name(g) for g in generations)})"
                          " of an installation", hint="restore into a new collection name "
                          "(CITEWISE_QDRANT_COLLECTION), then point the server at it")

