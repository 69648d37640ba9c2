"""`citewise migrate-catalog`: a single-machine installation's state, copied into PostgreSQL."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
from pathlib import Path

import click

from citewise.api.cli.base import Context, cli, fail, skip_if_locked
from citewise.api.settings import Settings
from citewise.errors import CitewiseError, ConfigError


@cli.command(
    "migrate-catalog",
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise migrate-catalog --to postgresql://citewise@db.internal:5432/citewise
          citewise migrate-catalog --to "$CITEWISE_DATABASE_URL" --json
          citewise migrate-catalog --to data-copy    into another data folder's own file

        Copies what this data folder's catalog.db holds into the database of
        CITEWISE_DATABASE_URL's form (or a data folder): the documents with their chunks,
        outlines, open swaps and index facts, the sources and their ingest runs, the API keys,
        usage, the audit log and the rate-limit levels, the conversations with their answers and
        feedback. The answer cache starts empty. Nothing is moved or deleted here. Leave the
        password out of the URL and set PGPASSWORD (libpq reads it) to keep it out of the
        process list.

        Run it twice: once while the server still serves, then again after stopping it. A rerun
        into the same target only catches up (what changed here, and what was deleted); it
        never copies anything twice. Refused unless --force: a target that holds documents of
        another installation, and this folder's copy once it has been used on its own (after
        the cut-over, a copy of this folder would undo what the replicas wrote). Forced, it
        replaces the records of the same id or name and removes nothing.

        The vectors are not copied: the embedded index (data/qdrant) cannot be shared between
        processes. The command ends with what to do next: the blobs onto S3/R2 if they are
        local, the vectors rebuilt in a Qdrant server or pgvector (`citewise verify --repair`
        with the new settings, here: this folder's embedding cache answers), then
        CITEWISE_DATABASE_URL on every replica. See docs/deploy.md.

        Holds the ingest run lock of this data folder while it copies.

        \b
        Exit status: 0 copied, 1 error (or refused), 4 an ingest run holds the lock.
        """
    ),
)
@click.option("--to", "to", required=True, metavar="URL|FOLDER",
              help="postgresql://user@host:5432/database, or a data folder (its catalog.db).")
@click.option("--force", is_flag=True,
              help="Copy into a target that holds documents of another installation, or "
                   "this folder's copy used on its own since (nothing is removed there).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def migrate_catalog(obj: Context, to: str, force: bool, as_json: bool) -> None:
    """Copy this data folder's state (catalog, keys, usage, conversations) into PostgreSQL."""
    from citewise.api.catalog_migration import migrate_catalog as migrate
    from citewise.api.composition import build_stores, run_lock_of

    settings = obj.local_data()
    try:
        here, there, target_name = _sides(settings, to)
    except CitewiseError as e:
        fail(e)
    # Where this state comes from, as a rerun recognises it.
    origin = f"{socket.gethostname()}:{settings.data.catalog_path.resolve()}"
    keep_generations = _on_a_qdrant_server(settings)
    # The source data folder's lock (``here`` names no database): no ingest changes it
    # while it is copied.
    with skip_if_locked(), run_lock_of(here) as lock, lock.held(
            f"citewise migrate-catalog --to {target_name}"):
        try:
            source = build_stores(here)
        except CitewiseError as e:
            fail(e)
        try:
            target = build_stores(there)
        except CitewiseError as e:
            source.close()
            fail(e)
        try:
            click.echo(f"copying {settings.data.catalog_path} to {target_name}", err=True)
            with click.progressbar(length=1, label="documents", file=sys.stderr) as bar:
                def on_document(n: int, total: int) -> None:
                    bar.length = total
                    bar.update(1)
                report = migrate(source, target, origin=origin, target_name=target_name,
                                 force=force, keep_generations=keep_generations,
                                 on_document=on_document)
        except CitewiseError as e:
            fail(e)
        finally:
            target.close()
            source.close()
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "next": _next_steps(settings, to)}, indent=2))
        return
    _print(report)
    click.echo("next:")
    for n, step in enumerate(_next_steps(settings, to), 1):
        # Paths and commands stay whole, to be copied.
        click.echo(textwrap.fill(step, width=100, initial_indent=f"  {n}. ",
                                 subsequent_indent="     ", break_long_words=False,
                                 break_on_hyphens=False))


def _sides(settings: Settings, to: str) -> tuple[Settings, Settings, str]:
    """The settings of the source (this data folder's SQLite file, whatever
    CITEWISE_DATABASE_URL says) and of the target, and the target as messages name it."""
    from citewise.postgres import display_url, is_postgres_url
    from citewise.private_files import private_folder

    if not settings.data.catalog_path.exists():
        raise ConfigError(f"{settings.data_dir} holds no catalog (catalog.db): nothing to copy",
                          hint="run it where the installation's data folder is, or name it "
                               "with --data-dir")
    here = settings.replaced(database_url=None)
    if is_postgres_url(to):
        return here, settings.replaced(database_url=to), display_url(to)
    if "://" in to:
        raise ConfigError(f"--to {to!r} is neither a PostgreSQL URL nor a folder",
                          hint="postgresql://user@host:5432/database (libpq's URI form)")
    folder = Path(to).expanduser()
    if folder.resolve() == settings.data_dir.resolve():
        raise ConfigError(f"--to {to} is this data folder itself",
                          hint="name another folder, or a PostgreSQL URL")
    private_folder(folder)
    return here, settings.replaced(data_dir=folder, database_url=None), str(folder)


def _on_a_qdrant_server(settings: Settings) -> bool:
    """Whether the vectors live on a Qdrant server every machine reaches (they stay there, and
    so does the catalog's record of their generations), rather than in this data folder."""
    url = settings.index.qdrant_url or ""
    return url.startswith(("http://", "https://"))


# What each line of the report calls its records.
LABELS = {
    "documents": "documents", "open_swaps": "open swaps", "index_facts": "index facts",
    "sources": "sources", "runs": "ingest runs", "keys": "API keys", "requests": "requests "
    "(usage)", "hourly_usage": "hours of usage", "audit": "audit entries",
    "rate_buckets": "rate-limit buckets", "conversations": "conversations",
    "answers": "answers", "feedback": "feedback",
}


def _print(report) -> None:
    click.echo(f"copied {report.source} to {report.target}"
               + (" (a rerun: caught up with what changed since)" if report.rerun else ""))
    for name, tally in report.tallies().items():
        parts = [f"{tally.copied} copied"]
        if name == "documents":
            parts[0] += f" ({report.chunks} chunks in all)"
        if tally.already:
            parts.append(f"{tally.already} already there")
        if tally.removed:
            parts.append(f"{tally.removed} removed (gone here)")
        click.echo(f"  {LABELS[name]}: {', '.join(parts)}")
        for why in tally.left_out:
            click.secho(f"    left out: {why}", fg="yellow")
    if not report.generations_kept:
        click.echo("  the index's generations were not copied: its vectors are rebuilt as a "
                   "first generation")


def _next_steps(settings: Settings, to: str) -> list[str]:
    """What the operator does next, for this installation's blobs and vectors."""
    from citewise.postgres import display_url, is_postgres_url

    if not is_postgres_url(to):
        return _next_steps_in_a_folder(settings, to)
    index = settings.index
    steps = []
    if index.blob_store == "local":
        bucket = "s3://BUCKET/" + index.s3_prefix
        steps.append(
            f"blobs: this installation keeps them in {settings.data.blob_dir}, which other "
            f"machines cannot read: copy that folder into the bucket the replicas will use, "
            f"under its prefix (the keys are the same: aws s3 sync {settings.data.blob_dir} "
            f"{bucket}), then set CITEWISE_BLOB_STORE=s3 and CITEWISE_S3_* for every process")
    else:
        steps.append(f"blobs: they stay in s3://{index.s3_bucket}/{index.s3_prefix}; give "
                     "every replica and worker the same CITEWISE_S3_* settings")
    if _on_a_qdrant_server(settings):
        steps.append(f"vectors: they stay on the Qdrant server {index.qdrant_url} (collection "
                     f"{index.qdrant_collection}); give every process the same "
                     "CITEWISE_QDRANT_URL and CITEWISE_QDRANT_COLLECTION")
    else:
        steps.append(
            f"vectors: they stay in this folder's embedded index ({settings.data.qdrant_path}), "
            "which one process at a time can open: build them where every replica reaches "
            "them, a Qdrant server (CITEWISE_QDRANT_URL) or pgvector "
            "(CITEWISE_VECTOR_STORE=pgvector), by running `citewise verify --repair` here with "
            "the new settings, once the blobs are in place (this folder's embedding cache "
            "answers for the chunks embedded here); the next `citewise ingest --all` would "
            "too, reading the sources again")
    steps.append(f"state: set CITEWISE_DATABASE_URL={display_url(to)} for every replica and "
                 "worker (docs/deploy.md), and serve no more from this data folder's catalog, "
                 "which no longer changes with theirs")
    return steps


def _next_steps_in_a_folder(settings: Settings, to: str) -> list[str]:
    index = settings.index
    steps = []
    if index.blob_store == "local":
        steps.append(f"blobs: copy {settings.data.blob_dir} to {Path(to) / 'blobs'}")
    if not _on_a_qdrant_server(settings):
        steps.append(f"vectors: `citewise --data-dir {to} verify --repair` builds them in its "
                     "own embedded index from the copied catalog")
    steps.append(f"state: serve from --data-dir {to} (CITEWISE_DATA_DIR) from now on")
    return steps
