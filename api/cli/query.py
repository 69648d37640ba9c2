"""`citewise search` and `citewise ask`: the CLI faces of /v1/search and /v1/answer."""

from __future__ import annotations

import json
import textwrap

import click

from citewise.api.cli.base import (
    cli,
    identity_options,
)


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise search "replica lag"
          citewise search "disk full" --source runbooks --top-k 3
          citewise search "salary review" --user dana --group people-managers
        """
    )
)
@click.argument("query")
@click.option("-k", "--top-k", default=5, show_default=True, help="Results to show.")
@click.option("--source", "sources", multiple=True, help="Only this source (repeatable).")
@click.option("--path-prefix", help="Only documents under this folder of a file source.")
@click.option("--tag", "tags", multiple=True, help="Only documents with this tag (repeatable).")
@click.option("--service", "services_", multiple=True, help="Only runbooks of this service.")
@click.option("--mode", type=click.Choice(["hybrid", "dense", "sparse"]), default="hybrid",
              show_default=True, help="Retrieval method.")
@identity_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def search(obj, query, top_k, sources, path_prefix, tags, services_, mode, user, groups,
           as_json) -> None:
    """Hybrid search: the best matching passages, with where they come from."""
    from citewise.types import Identity, SearchFilters

    filters = SearchFilters(sources=list(sources), path_prefix=path_prefix, tags=list(tags),
                            services=list(services_))
    with obj.services() as (services, remote):
        if remote is not None:
            from citewise_client import ActingFor, Filters

            results = remote.search(
                query, top_k=top_k, mode=mode, acting_for=ActingFor(user, groups),
                filters=Filters(sources=list(sources), path_prefix=path_prefix,
                                tags=list(tags), services=list(services_)))
        else:
            results = [r.model_dump() for r in services.search.search(
                query, Identity(user, tuple(groups)), top_k=top_k, filters=filters, mode=mode)]
    if as_json:
        click.echo(json.dumps({"results": results}, indent=2))
        return
    if not results:
        click.echo("no results")
    for i, r in enumerate(results, 1):
        where = r.get("path") or r.get("url") or ""
        lines = f":{r['start_line']}" if r.get("start_line") else ""
        click.secho(f"{i}. {r['title']}" + (f" > {r['heading']}" if r["heading"] else ""),
                    bold=True)
        click.echo(f"   {r['source']}/{where}{lines}  score {r['score']:.4f}")
        click.echo(textwrap.indent(textwrap.shorten(r["text"], 300), "   "))


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise ask "what do I do when CheckoutAPIHighLatencyP99 fires?"
          citewise ask "how do we rotate the payment provider keys?" --group security
        """
    )
)
@click.argument("question")
@identity_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def ask(obj, question, user, groups, as_json) -> None:
    """A cited answer; says so when the knowledge base has none."""
    from citewise.types import Identity

    with obj.services() as (services, remote):
        if remote is not None:
            from citewise_client import ActingFor

            result = remote.answer(question, acting_for=ActingFor(user, groups))
        else:
            result = services.answers.answer(
                question, Identity(user, tuple(groups))).model_dump()
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    # The answer is Markdown: steps and code blocks keep their lines.
    click.echo(result["answer"])
    if result.get("abstained") and result.get("reason"):
        click.echo(f"  ({result['reason']})")
    for c in result["citations"]:
        where = c.get("url") or f"{c['source']}/{c.get('path') or ''}"
        lines = f" (lines {c['start_line']}-{c['end_line']})" if c.get("start_line") else ""
        click.echo(f"  [{c['n']}] {c['title']}" + (f" > {c['heading']}" if c["heading"] else "")
                   + f" - {where}{lines}")
