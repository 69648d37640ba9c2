"""`citewise vocabulary`: mine the organisation's own words from the indexed documents, review
them, veto the wrong ones (``retrieval/vocabulary.py``, ``retrieval/vocabulary_mining.py``).

It reads the catalog directly (SQLite admits several processes), so it runs on the server's
machine whether or not the server is up; the server reads the file at start.
"""

from __future__ import annotations

import sys
import textwrap
from collections import Counter

import click

from citewise.api.cli.base import Context, cli, fail, local_stores
from citewise.errors import CitewiseError, ConfigError


def _path(obj: Context):
    from citewise.api.composition import vocabulary_path

    return vocabulary_path(obj.settings)


def _load(obj: Context):
    from citewise.retrieval.vocabulary import Vocabulary

    path = _path(obj)
    try:
        vocabulary = Vocabulary.load(path)
    except CitewiseError as e:
        fail(e)
    return path, vocabulary


@cli.group(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise vocabulary mine                  read the indexed documents, write the file
          citewise vocabulary show                  every entry with the sentence it came from
          citewise vocabulary show --kind acronym   one kind only
          citewise vocabulary veto optional         no entry holding "optional" is used again
          citewise vocabulary veto ic "internal controls"   that pairing only
          citewise vocabulary veto --lift optional  take a veto back (the next mining adds it)

        The file is <data dir>/vocabulary.toml (CITEWISE_VOCABULARY_FILE names another). Search
        adds each group's other names to a question that uses one of them, like the
        hand-written synonyms (CITEWISE_SYNONYMS_FILE), which win where both know a word.
        Restart the server after mining or vetoing: it reads the file at start. Mining is not
        run by ingest: run it after an ingest that brought new documents, then review.
        """
    )
)
def vocabulary() -> None:
    """Mine, review and veto the vocabulary search learns from your documents."""


@vocabulary.command("mine")
@click.option("--readable-by", "principals", multiple=True, metavar="PRINCIPAL",
              help="Mine only documents one of these may read (repeatable: public, "
                   "group:sre), so that the file quotes nothing of a restricted document. "
                   "Default: every document.")
@click.option("--min-count", type=click.IntRange(1), default=1, show_default=True,
              help="Keep an entry only when the documents say it this many times.")
@click.pass_obj
def mine(obj: Context, principals: tuple[str, ...], min_count: int) -> None:
    """Read every indexed document's text and write the vocabulary file (vetoes kept)."""
    from citewise.retrieval.vocabulary_mining import mine as mine_catalog

    path, old = _load(obj)
    with local_stores(obj) as stores:
        catalog = stores.catalog
        with click.progressbar(length=1, label="mining documents", file=sys.stderr) as bar:
            def progress(done: int, total: int) -> None:
                bar.length = max(1, total)
                bar.update(done - bar.pos)

            mined = mine_catalog(catalog, principals=list(principals) or None,
                                 min_count=min_count, progress=progress)
    result = mined.vocabulary(old)
    vetoed = len(result.entries) - len(result.applied())
    try:
        result.save(path)
    except OSError as e:
        fail(ConfigError(f"cannot write the vocabulary file {path}: {e}",
                         hint="set CITEWISE_VOCABULARY_FILE to a writable path"))
    kinds = Counter(e.kind for e in result.applied())
    click.echo(f"mined {mined.documents} documents: {len(result.applied())} entries "
               f"({', '.join(f'{k} {n}' for k, n in kinds.most_common()) or 'none'})")
    if vetoed:
        click.echo(f"  {vetoed} found again and left out by your vetoes")
    if mined.dropped:
        click.echo("  dropped: " + ", ".join(f"{n} {why}" for why, n in
                                             mined.dropped.most_common()))
    click.echo(f"wrote {path}; review it with `citewise vocabulary show`, veto with "
               "`citewise vocabulary veto TERM`, and restart the server to apply it")


@vocabulary.command("show")
@click.option("--kind", help="Only entries of this kind (acronym, alias, heading, glossary, "
                             "front_matter, code_name).")
@click.option("--limit", type=click.IntRange(1), help="At most this many entries.")
@click.pass_obj
def show(obj: Context, kind: str | None, limit: int | None) -> None:
    """List the entries search uses, each with its source sentence, and the vetoes."""
    path, vocabulary = _load(obj)
    if vocabulary is None:
        click.echo(f"no vocabulary at {path}: run `citewise vocabulary mine`")
        return
    entries = [e for e in vocabulary.applied() if kind is None or e.kind == kind]
    for e in entries[:limit]:
        click.echo(f"{' = '.join(e.terms)}  [{e.kind}, {e.count}x]")
        click.echo(f"    {e.source}: {e.sentence}")
    click.echo(f"{len(entries)} entries in {path}"
               + (f" (mined {vocabulary.mined_at})" if vocabulary.mined_at else ""))
    vetoes = vocabulary.vetoed + [" + ".join(p) for p in vocabulary.vetoed_pairs]
    if vetoes:
        click.echo("vetoed: " + ", ".join(vetoes))


@vocabulary.command("veto")
@click.argument("terms", nargs=-1, required=True)
@click.option("--lift", is_flag=True, help="Take the veto back instead.")
@click.pass_obj
def veto(obj: Context, terms: tuple[str, ...], lift: bool) -> None:
    """Veto TERM (every entry holding it), or TERM OTHER (that pairing); kept across mining."""
    from citewise.retrieval.vocabulary import Vocabulary

    path, vocabulary = _load(obj)
    if vocabulary is None:
        vocabulary = Vocabulary()  # a veto before the first mining is kept for it
    try:
        if lift:
            if not vocabulary.lift(list(terms)):
                fail(ConfigError(f"no veto of {' + '.join(terms)} in {path}",
                                 hint="`citewise vocabulary show` lists the vetoes"))
            removed = []
        else:
            removed = vocabulary.veto(list(terms))
        vocabulary.save(path)
    except CitewiseError as e:
        fail(e)
    except OSError as e:
        fail(ConfigError(f"cannot write the vocabulary file {path}: {e}",
                         hint="set CITEWISE_VOCABULARY_FILE to a writable path"))
    if lift:
        click.echo(f"lifted the veto of {' + '.join(terms)}; the next "
                   "`citewise vocabulary mine` may find its entries again")
        return
    click.echo(f"vetoed {' + '.join(terms)}: {len(removed)} entries taken out"
               + "".join(f"\n    {' = '.join(e.terms)}  ({e.source})" for e in removed))
    click.echo("restart the server to apply it; re-mining keeps the veto")
