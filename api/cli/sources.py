"""`citewise sources`: what is declared and what is indexed."""

from __future__ import annotations

import json
import textwrap

import click

from citewise.api.cli.base import Context, cli


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise sources          a table: documents, chunks, last successful run
          citewise sources --json   the same as JSON, for scripts

        With CITEWISE_URL set, the server's sources as its key sees them (GET /v1/sources:
        the search scope; counts of the documents the key may read).
        """
    )
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def sources(obj: Context, as_json: bool) -> None:
    """List sources: declared in the config and/or present in the catalog."""
    if obj.url:
        with obj.services() as (_, remote):
            out = [{k: v for k, v in s.items() if k != "last_run"} for s in remote.sources()]
    else:
        out = _local(obj)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for s in out:
        click.echo(f"{s['name']:<20} {s['type']:<10} {s['documents']:>6} docs {s['chunks']:>7} "
                   f"chunks  last success: {s['last_success_at'] or 'never'}"
                   + ("" if s["declared"] else "  (not in config)"))




def _local(obj: Context) -> list[dict]:
    from citewise.api.composition import build_library, build_stores

    # The stores alone (SQLite admits several processes): this works while a server runs.
    stores = build_stores(obj.settings)
    try:
        library = build_library(obj.settings, stores)
        return [s.model_dump(exclude={"last_run"}) for s in library.sources(None)]
    finally:
        stores.close()
