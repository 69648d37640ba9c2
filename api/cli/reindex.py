"""`citewise reindex`: rebuild the index with new settings beside the live one, then switch."""

from __future__ import annotations

import json
import sys
import textwrap

import click

from citewise.api.cli.base import EXIT_FAILED, Context, cli, fail, skip_if_locked
from citewise.errors import CitewiseError


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise reindex --status          what it would do; changes nothing
          citewise reindex                   rebuild if the settings changed, then switch
          citewise reindex --json            the same, the report as JSON

        After a change of chunk size, embedding model or chunker version (a citewise
        upgrade), e.g. CITEWISE_CHUNK_MAX_TOKENS=128 citewise reindex: the new index is built
        beside the live one from the catalog and the stored copies of the documents (no
        source is read; the embedding cache answers for text embedded before), with progress
        per source. It is verified, then one transaction switches the catalog to it; search
        keeps serving the old index until then, and a running `citewise serve` moves to the
        new one at its next request. The old index is deleted after the switch (by the
        server, if it holds it open).

        Interrupted (Ctrl-C, kill -9, a failed document), it switches nothing: the live index
        serves as before, and the next `citewise reindex` resumes the half-built one (or
        drops it, if the settings changed again). Holds the ingest run lock throughout.
        A new embedding model: restart the server with the new settings after the switch
        (it cannot embed questions with a model it has not loaded).

        \b
        Exit status: 0 switched (or nothing to do), 1 failed (nothing switched),
        4 an ingest run holds the lock.
        """
    )
)
@click.option("--status", is_flag=True, help="Say what is live, what is configured and what a "
                                             "reindex would do; change nothing.")
@click.option("--force", is_flag=True,
              help="Rebuild even when every document is indexed with these settings.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def reindex(obj: Context, status: bool, force: bool, as_json: bool) -> None:
    """Rebuild the index beside the live one with these settings, then switch to it."""
    from citewise.api.composition import build_reindexer, run_lock_of
    from citewise.ingest.progress import TerminalProgress

    try:
        reindexer = build_reindexer(obj.local_data())
    except CitewiseError as e:
        fail(e)
    try:
        if status:
            result = reindexer.status()
            click.echo(json.dumps(result, indent=2) if as_json else _status_text(result))
            return
        model_before = reindexer.catalog.meta("embedding_model")
        with skip_if_locked(), run_lock_of(obj.settings) as lock, \
                lock.held("citewise reindex"):
            report = reindexer.run(
                force=force,
                progress=lambda source: TerminalProgress(source, verb="reindex"))
    except CitewiseError as e:
        fail(e)
    finally:
        reindexer.close()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report, model_before)
    if report.status == "failed":
        sys.exit(EXIT_FAILED)


def _label(generation: str) -> str:
    return generation or "g1"


def _settings_text(settings: dict) -> str:
    return (f"chunk size {settings['chunk_max_tokens']}, model {settings['embedding_model']}, "
            f"chunkers {', '.join(settings['chunkers'])}, BM25 {settings['bm25']}")


def _status_text(result: dict) -> str:
    built = (f"built with {_settings_text(result['live_settings'])}"
             if result["live_settings"] else "built by ingest runs (no reindex recorded its "
             "settings)")
    lines = [f"live: generation {_label(result['live'])}, {built}",
             f"configured: {_settings_text(result['configured'])}",
             f"documents: {result['documents']}, of which "
             f"{result['documents_with_other_settings']} indexed with other settings"]
    building = result["building"]
    if building:
        lines.append(f"half-built: generation {building['name']} (started "
                     f"{building['started_at']}, {building['documents_done']} documents done, "
                     f"{_settings_text(building['settings'])}); `citewise reindex` "
                     + ("resumes it" if building["settings"] == result["configured"]
                        else "drops it and starts again"))
    if result["retired"]:
        lines.append(f"retired, still stored: generations "
                     f"{', '.join(_label(n) for n in result['retired'])} (the next reindex "
                     "drops them)")
    return "\n".join(lines)


def _print(report, model_before: str | None) -> None:
    if report.status == "up-to-date":
        click.echo(f"nothing to do: every document is indexed with these settings (generation "
                   f"{_label(report.generation)}); --force rebuilds anyway")
    elif report.status == "switched":
        click.echo(f"rebuilt {report.documents} documents ({report.chunks} chunks, "
                   f"{report.chunks_embedded} embedded) as generation {report.generation} in "
                   f"{report.build_seconds:.1f}s" + (", resuming an interrupted build"
                                                      if report.resumed else ""))
        click.secho(f"switched from generation {_label(report.previous)} to "
                    f"{report.generation} in {report.switch_ms:.1f} ms", fg="green")
    for name in report.dropped:
        click.echo(f"dropped the old generation {_label(name)}")
    for name in report.left:
        click.echo(f"generation {_label(name)} is still open in another process (citewise "
                   "serve): it drops it once it has switched")
    if report.status == "switched" and model_before not in (None, report.model):
        click.secho(f"the embedding model changed ({model_before} -> {report.model}): a running "
                    "`citewise serve` loads it at the switch; give the server these settings "
                    "too, or it refuses to start next time", fg="yellow")
    if report.status == "failed":
        for line in report.failures + report.problems:
            click.secho(f"problem: {line}", fg="red")
        click.secho(f"nothing was switched: generation {_label(report.previous)} serves as "
                    f"before; fix the above and run `citewise reindex` again (it resumes "
                    f"generation {report.built})", fg="yellow")
