"""The ``citewise`` command: ingest, search, ask and serve.

Every command reads settings from ``CITEWISE_*`` environment variables and the config file
(``./citewise.toml`` or ``--config``). When ``citewise serve`` holds the embedded index, the
other commands send their work to it over HTTP instead of failing on the lock.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import click

from citewise import __version__
from citewise.errors import CitewiseError, IndexLockedError
from citewise.logs import configure_logging
from citewise.settings import Settings, load_settings

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3


class Context:
    def __init__(self, config: str | None, data_dir: str | None, verbose: bool) -> None:
        overrides = {"data_dir": Path(data_dir)} if data_dir else {}
        self.settings: Settings = load_settings(config, **overrides)
        level = "DEBUG" if verbose else self.settings.log_level
        configure_logging(level, self.settings.log_format)

    @contextmanager
    def services(self):
        """``(services, None)`` over the local index, or ``(None, server)`` when a running
        server holds the embedded index. Closes what it opened; a ``CitewiseError`` inside
        ends the command with its message and hint."""
        from citewise.api.composition import build_services
        from citewise.api.remote import find_server

        services = remote = None
        try:
            try:
                services = build_services(self.settings)
            except IndexLockedError as e:
                remote = find_server(self.settings, e)
            yield services, remote
        except CitewiseError as e:
            _fail(e)
        finally:
            if services is not None:
                services.close()


def _fail(e: CitewiseError) -> None:
    click.secho(f"error: {e.message}", fg="red", err=True)
    if e.hint:
        click.echo(f"  hint: {e.hint}", err=True)
    sys.exit(EXIT_FAILED)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=textwrap.dedent(
        """
        \b
        Quick start:
          citewise ingest ./runbooks           index a folder of Markdown/HTML/text
          citewise ask "how do I fail over redis?"
          citewise serve                       HTTP API on 127.0.0.1:8000, docs at /docs

        Settings come from CITEWISE_* environment variables and citewise.toml; see README.
        """
    ),
)
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar="CITEWISE_CONFIG_FILE",
              help="TOML config file (default: ./citewise.toml if present).")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Folder for all state [env CITEWISE_DATA_DIR, default ./data].")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.version_option(__version__, prog_name="citewise")
@click.pass_context
def cli(ctx: click.Context, config: str | None, data_dir: str | None, verbose: bool) -> None:
    """citewise: cited answers over your runbooks, wiki pages and code."""
    try:
        ctx.obj = Context(config, data_dir, verbose)
    except CitewiseError as e:
        _fail(e)


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise ingest ./runbooks                 folder -> source "runbooks"
          citewise ingest ./docs --name eng-docs     choose the source name
          citewise ingest --source wiki              a source declared in citewise.toml
          citewise ingest --all                      every declared source (nightly cron)

        Runs are incremental: unchanged documents are not parsed or embedded again, changed
        ones are replaced atomically, deleted ones are removed. One bad file never stops a
        run; it is listed in the summary.

        \b
        Exit status: 0 all documents indexed, 3 some documents failed (see summary),
        1 the run failed (source unreadable, bad settings), 2 usage error.
        """
    )
)
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--name", help="Source name for PATH (default: the folder's name).")
@click.option("--source", "source", help="Ingest a source declared in the config file.")
@click.option("--all", "all_sources", is_flag=True, help="Ingest every declared source.")
@click.option("--force", is_flag=True,
              help="Re-process unchanged documents, and allow a run to delete more than half "
                   "of a source (refused otherwise, in case the source is only unreadable).")
@click.option("--json", "as_json", is_flag=True, help="Print the run reports as JSON.")
@click.pass_obj
def ingest(obj: Context, path, name, source, all_sources, force, as_json) -> None:
    """Index a folder, a declared source, or all declared sources."""
    from citewise.api.composition import resolve_sources

    if sum(bool(x) for x in (path, source, all_sources)) != 1:
        raise click.UsageError(
            "say what to ingest: a folder PATH, --source NAME or --all (exactly one)"
        )
    if name and not path:
        raise click.UsageError("--name names the source of a folder PATH; pass PATH too")
    with obj.services() as (services, remote):
        if remote is not None:
            reports = _ingest_remote(remote, path, name, source, all_sources, force, as_json)
        else:
            sources = resolve_sources(
                obj.settings, services.catalog, path=path, name=name, source=source,
                all_sources=all_sources,
            )
            reports = _ingest_local(services, sources, force)
    if as_json:
        click.echo(json.dumps(reports, indent=2))
    else:
        for r in reports:
            color = {"succeeded": "green", "partial": "yellow"}.get(r["status"], "red")
            click.secho(r["summary"], fg=color)
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


def _ingest_local(services, sources, force) -> list[dict]:
    from citewise.ingest.progress import TerminalProgress
    from citewise.ingest.runner import report_dict, run_source

    reports = []
    for source in sources:
        report = run_source(
            services.pipeline, source, trigger="cli", force=force,
            progress=TerminalProgress(source.name),
        )
        reports.append(report_dict(report))
    return reports


def _ingest_remote(remote, path, name, source, all_sources, force, as_json) -> list[dict]:
    click.echo(f"the server at {remote.url} holds the index; handing the run to it", err=True)
    payload = {"path": str(Path(path).resolve()) if path else None, "name": name,
               "source": source, "all": all_sources, "force": force}
    last = [None]

    def on_update(job: dict) -> None:
        line = f"job {job['id']}: {job['status']}"
        if job.get("current"):
            c = job.get("counts") or {}
            line += (f", {job['current']}: {c.get('seen', 0)} seen, {c.get('added', 0)} added, "
                     f"{c.get('updated', 0)} updated, {c.get('chunks_embedded', 0)} embedded")
        if line != last[0] and not as_json:
            click.echo(line, err=True)
            last[0] = line

    job = remote.ingest(payload, on_update)
    if job["status"] == "failed":
        raise CitewiseError(f"the server's ingest job failed: {job.get('message')}")
    return job["reports"]


def _identity_options(f):
    f = click.option("--group", "groups", multiple=True,
                     help="A group the user belongs to (repeatable).")(f)
    f = click.option("--user", help="Search as this user (default: anonymous, public only).")(f)
    return f


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
@_identity_options
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
            body = {"query": query, "top_k": top_k, "mode": mode,
                    "filters": {"sources": list(sources), "path_prefix": path_prefix,
                                "tags": list(tags), "services": list(services_)}}
            results = remote.request("POST", "/v1/search", json=body,
                                     headers=_identity_headers(user, groups))["results"]
        else:
            results = [r.to_dict() for r in services.search.search(
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
@_identity_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def ask(obj, question, user, groups, as_json) -> None:
    """A cited answer; says so when the knowledge base has none."""
    from citewise.types import Identity

    with obj.services() as (services, remote):
        if remote is not None:
            result = remote.request("POST", "/v1/answer", json={"question": question},
                                    headers=_identity_headers(user, groups))
        else:
            result = services.answers.answer(question, Identity(user, tuple(groups))).to_dict()
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(textwrap.fill(result["answer"], 100))
    for c in result["citations"]:
        where = c.get("url") or f"{c['source']}/{c.get('path') or ''}"
        lines = f" (lines {c['start_line']}-{c['end_line']})" if c.get("start_line") else ""
        click.echo(f"  [{c['n']}] {c['title']}" + (f" > {c['heading']}" if c["heading"] else "")
                   + f" - {where}{lines}")


def _identity_headers(user: str | None, groups: tuple[str, ...]) -> dict:
    headers = {}
    if user:
        headers["X-Citewise-User"] = user
    if groups:
        headers["X-Citewise-Groups"] = ",".join(groups)
    return headers


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise serve                         127.0.0.1:8000
          citewise serve --host 0.0.0.0 --port 8080   (set CITEWISE_API_KEYS first)

        Open http://127.0.0.1:8000/docs for the API. While the server runs, `citewise ingest`
        and the nightly cron hand their runs to it (the embedded index admits one process).
        Bind beyond 127.0.0.1 only with CITEWISE_API_KEYS set.
        """
    )
)
@click.option("--host", help="Address to bind [env CITEWISE_HOST, default 127.0.0.1].")
@click.option("--port", type=int, help="Port [env CITEWISE_PORT, default 8000].")
@click.pass_obj
def serve(obj: Context, host: str | None, port: int | None) -> None:
    """Serve the HTTP API (search, answers, ingest jobs, metrics)."""
    import logging

    import uvicorn

    from citewise.api.app import create_app
    from citewise.api.composition import build_services
    from citewise.api.remote import remove_server_file, write_server_file

    settings = obj.settings
    host = host or settings.host
    port = port or settings.port
    log = logging.getLogger("citewise")
    if host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key_list():
        log.warning("serving on %s without CITEWISE_API_KEYS: anyone who can reach it can "
                    "claim any identity and read restricted documents", host)
    try:
        services = build_services(settings)
    except CitewiseError as e:
        _fail(e)
    services.dense.warm_up()
    app = create_app(settings, services)
    write_server_file(settings, host, port)
    log.info("citewise %s serving on http://%s:%d (docs at /docs), data in %s", __version__,
             host, port, settings.data_dir)
    # uvicorn handles SIGTERM by shutting down, restoring the previous handler and re-sending
    # the signal; with this handler the re-sent signal exits through `finally` below, so
    # server.json is removed and the index is flushed under systemd, docker and Kubernetes too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        uvicorn.run(app, host=host, port=port, log_level=settings.log_level.lower(),
                    log_config=None)
    finally:
        remove_server_file(settings)
        services.close()


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise sources          a table: documents, chunks, last successful run
          citewise sources --json   the same as JSON, for scripts
        """
    )
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def sources(obj: Context, as_json: bool) -> None:
    """List sources: declared in the config and/or present in the catalog."""
    from citewise.index.catalog import Catalog

    catalog = Catalog(obj.settings.catalog_path)
    rows = {r["name"]: r for r in catalog.list_sources()}
    declared = {s.name: s for s in obj.settings.sources}
    out = []
    for name in sorted(set(rows) | set(declared)):
        r = rows.get(name, {})
        out.append({"name": name, "type": r.get("type") or declared[name].type,
                    "declared": name in declared, "documents": r.get("documents", 0),
                    "chunks": r.get("chunks", 0), "last_success_at": r.get("last_success_at")})
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for s in out:
        click.echo(f"{s['name']:<20} {s['type']:<10} {s['documents']:>6} docs {s['chunks']:>7} "
                   f"chunks  last success: {s['last_success_at'] or 'never'}"
                   + ("" if s["declared"] else "  (not in config)"))


@cli.command(
    "eval",
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise eval ../shared/bench/scifact --split train
          citewise eval ../shared/bench/scifact --configs dense,bm25,rrf,default,convex:0.3
          citewise eval ../shared/bench/scifact --limit 100          a quick look
          citewise eval --qa demo/golden-set.jsonl                   your own golden set
          citewise eval --qa golden.jsonl --out results/golden.json   keep the figures

        A BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv. Its corpus
        is ingested by the normal pipeline into an isolated folder (<data dir>/eval/, named
        by a hash of the corpus and the index settings, so a second run reuses it), then
        every query of the split runs through the same search the API serves, once per
        configuration. Chunks are pooled into documents by their best chunk, and scored as
        trec_eval does: nDCG@10, Recall@100, MRR@10, with p50/p95 search latency (query
        embedding excluded: it is the same for every configuration).

        \b
        Configurations (--configs, comma-separated):
          dense            dense vectors only
          bm25             BM25 only
          default          the hybrid search as configured (CITEWISE_SEARCH_FUSION...)
          rrf[:W[:K]]      reciprocal rank fusion, dense weight W (0.5), constant K (60)
          convex[:W]       weighted sum of scores divided by each list's best, dense weight W

        A golden set (--qa) is JSON Lines: {"question": "...", "relevant":
        ["<source>/<path>", ...], "answerable": true}. It runs against the index in the data
        folder (ingest first), reporting document hit@k and MRR for search, and for answers
        the share of citations that point at a relevant document, and whether answerable
        questions are answered and the others abstain.

        Tune on a train or dev split only; report the test split.
        """
    ),
)
@click.argument("dataset", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--split", help="Qrels split to run [default: the only one, else test].")
@click.option("--configs", default="dense,bm25,rrf,default", show_default=True,
              help="Retrieval configurations to compare (see below).")
@click.option("--data-dir", "eval_dir", type=click.Path(file_okay=False),
              help="Folder for benchmark indexes and their embedding cache "
                   "[default: <data dir>/eval].")
@click.option("--qa", "qa_file", type=click.Path(exists=True, dir_okay=False),
              help="Golden set (JSON Lines) to run against the data folder's index.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write the figures to this JSON file, and the table next to it (.md).")
@click.option("--limit", type=int, help="Only the first N queries (a quick look).")
@click.option("--depth", default=300, show_default=True,
              help="Chunks retrieved per query (pooled into documents for Recall@100).")
@click.pass_obj
def eval_(obj: Context, dataset, split, configs, eval_dir, qa_file, out, limit, depth) -> None:
    """Measure retrieval and answer quality: a BEIR benchmark, or your golden set."""
    from citewise.retrieval.evaluation.runner import parse_config

    if not dataset and not qa_file:
        raise click.UsageError("pass a BEIR dataset folder, --qa GOLDEN_SET, or both")
    try:
        chosen = [parse_config(c) for c in configs.split(",") if c.strip()]
    except CitewiseError as e:
        raise click.UsageError(f"{e.message} ({e.hint})") from None
    payload: dict = {}
    tables: list[str] = []
    try:
        if dataset:
            payload["beir"], table = _eval_beir(obj.settings, dataset, split, chosen, eval_dir,
                                                limit, depth)
            tables.append(table)
        if qa_file:
            payload["golden_set"], table = _eval_qa(obj, qa_file, chosen)
            tables.append(table)
    except CitewiseError as e:
        _fail(e)
    if out:
        from citewise.retrieval.evaluation.report import write_json

        write_json(Path(out), payload)
        Path(out).with_suffix(".md").write_text("\n\n".join(tables) + "\n")
        click.echo(f"wrote {out} and {Path(out).with_suffix('.md')}", err=True)


def _eval_beir(settings, dataset, split, configs, eval_dir, limit, depth):
    from citewise.ingest.progress import TerminalProgress
    from citewise.retrieval.evaluation.beir import load_dataset
    from citewise.retrieval.evaluation.report import LATENCY_NOTE, beir_table
    from citewise.retrieval.evaluation.runner import (
        index_folder,
        ingest_corpus,
        open_services,
        run_configs,
    )

    data = load_dataset(dataset, split)
    root = Path(eval_dir) if eval_dir else settings.data_dir / "eval"
    folder = index_folder(root, data, settings)
    click.echo(f"{data.name} ({data.split}): {len(data.queries)} queries; index in {folder}",
               err=True)
    services = open_services(settings, folder, root)
    try:
        report = ingest_corpus(services, data, progress=TerminalProgress(data.name))
        click.echo(report.summary(), err=True)
        if report.status not in ("succeeded", "partial"):
            raise CitewiseError(f"ingesting {data.folder} failed: {report.message}")

        def on_config(r) -> None:
            m = r.metrics
            click.echo(f"  {r.config:<14} nDCG@10 {m['ndcg@10']:.4f}  R@100 "
                       f"{m['recall@100']:.4f}  MRR@10 {m['mrr@10']:.4f}  p50 {r.p50_ms:.1f} ms",
                       err=True)

        results = run_configs(services, data, configs, depth=depth, limit=limit,
                              on_config=on_config)
    finally:
        services.close()
    table = beir_table(results) + "\n\n" + LATENCY_NOTE
    if results:
        table += (f" Embedding a query took {results[0].query_embedding_p50_ms:.1f} ms (p50) "
                  "on this machine.")
    asked = len(results[0].per_query) if results else 0
    title = f"{data.name}, split {data.split}, {asked} queries"
    click.echo(f"\n{title}\n\n{table}")
    return {
        "dataset": data.name, "split": data.split, "queries": asked,
        "depth": depth, "index": report.summary(),
        "configs": [r.to_dict() for r in results],
    }, f"{title}\n\n{table}"


def _eval_qa(obj: Context, qa_file, configs):
    from citewise.retrieval.evaluation.qa import evaluate_answers, evaluate_search, load_golden_set
    from citewise.retrieval.evaluation.report import qa_table

    questions = load_golden_set(qa_file)
    with obj.services() as (services, remote):
        if remote is not None:
            raise CitewiseError(
                f"the server at {remote.url} holds the index; the golden set runs in-process",
                hint="stop `citewise serve` for the evaluation, or use a Qdrant server",
            )
        if not services.catalog.list_sources():
            raise CitewiseError(
                f"the index in {obj.settings.data_dir} is empty",
                hint="run `citewise ingest --all` first (or pass --data-dir)",
            )
        search = [evaluate_search(services.search, questions, c) for c in configs]
        answers = evaluate_answers(services.answers, questions)
    lines = [f"golden set {qa_file}: {len(questions)} questions", "",
             "| configuration | hit@1 | hit@3 | hit@5 | hit@10 | MRR@10 | p50 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in search:
        lines.append(f"| {s['config']} | {s['hit@1']:.3f} | {s['hit@3']:.3f} | {s['hit@5']:.3f}"
                     f" | {s['hit@10']:.3f} | {s['mrr@10']:.3f} | {s['p50_ms']:.1f} |")
    summary = {k: v for k, v in answers.items() if k != "problems"}
    table = "\n".join(lines) + "\n\nAnswers (/v1/answer, default configuration)\n\n" + \
        qa_table(summary)
    click.echo("\n" + table)
    for p in answers["problems"]:
        click.echo(f"  answer problem: {json.dumps(p)}", err=True)
    return {"file": str(qa_file), "questions": len(questions), "search": search,
            "answers": answers}, table


def main() -> None:
    cli(prog_name="citewise")


if __name__ == "__main__":
    main()
