"""`citewise keys`, `usage`, `audit` and `feedback export`: the administration.

They work on the stores directly (SQLite admits several processes), so they run on the server's
machine whether or not the server is up, as the account that owns the data folder: holding the
stores is holding every key, as with the operator token. With CITEWISE_DATABASE_URL they run
wherever that database is reachable, with its credentials. A running server (every replica)
sees a new or revoked key at its next request. `usage` alone has a remote form: with
CITEWISE_URL set it asks that server (``GET /v1/usage``, the admin scope); the others refuse
to make a catalog here.
"""

from __future__ import annotations

import getpass
import json
import textwrap

import click

from citewise.api.cli.base import Context, cli, local_stores


def _operator() -> str:
    try:
        return f"operator:{getpass.getuser()}"
    except Exception:  # no login name in some containers
        return "operator"


@cli.group(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise keys create ci-bot --scopes search --principal user:ci-bot --expires 90d
          citewise keys create slack-bot --scopes search,answer --assert-identity
          citewise keys create cron --scopes ingest --limit ingest_per_minute=60
          citewise keys list
          citewise keys revoke ci-bot

        The secret is printed once, at creation; only its hash is stored. Send it as
        'Authorization: Bearer cw_...'. Scopes: search, answer, ingest, admin.
        """
    )
)
def keys() -> None:
    """Create, list and revoke API keys."""


@keys.command("create")
@click.argument("name")
@click.option("--scopes", required=True, help="Comma-separated: search,answer,ingest,admin.")
@click.option("--principal", help="The user or group the key acts as: user:ci-bot, group:sre "
                                  "(default: none, public documents only).")
@click.option("--assert-identity", is_flag=True,
              help="The key may name the end user in X-Citewise-User/Groups (trusted front "
                   "ends such as the Slack bot only).")
@click.option("--shares-conversations", is_flag=True,
              help="The key is one of its principal's own doors (an agent of theirs): it "
                   "shares the conversations of their sign-in sessions. Without it a key's "
                   "conversations are its own.")
@click.option("--expires", help="90d, 12h, 30m or an ISO date (default: never).")
@click.option("--limit", "limits", multiple=True, metavar="NAME=N",
              help="The key's own limit, e.g. answer_per_minute=600 (repeatable). A key "
                   "that may assert identity has CITEWISE_IDENTITY_KEY_LIMITS for those not "
                   "given.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def create(obj: Context, name: str, scopes: str, principal: str | None, assert_identity: bool,
           shares_conversations: bool, expires: str | None, limits: tuple[str, ...],
           as_json: bool) -> None:
    """Create a key and print its secret (once)."""
    from citewise.api.identity.keys import ApiKeys
    from citewise.api.metering.audit import AuditLog
    from citewise.api.metering.limits import identity_key_limits, key_limits

    with local_stores(obj) as stores:
        key, secret = ApiKeys(stores.keys).create(
            name, scopes, principal=principal, assert_identity=assert_identity,
            expires=expires, limits=list(limits), created_by=_operator(),
            shares_conversations=shares_conversations)
        AuditLog(stores.metering).record(
            "key.create", actor=_operator(), target=key.name,
            detail={"scopes": sorted(key.scopes), "principal": key.principal,
                    "assert_identity": key.assert_identity,
                    "shares_conversations": key.shares_conversations,
                    "expires_at": key.expires_at, "via": "cli"})
    # What the key as a whole may do: its own limits, and for a key that names its users the
    # defaults it draws on too (CITEWISE_IDENTITY_KEY_LIMITS), so the operator is not surprised.
    caps = {k: v for k, v in key_limits(key.limits, key.assert_identity,
                                        identity_key_limits(obj.settings.metering)).items()
            if v and k.split("_per_")[0] in key.scopes}
    if as_json:
        click.echo(json.dumps({**key.public(), "key_limits": caps, "secret": secret}, indent=2))
        return
    click.echo(f"created key {key.name!r} (scopes {','.join(sorted(key.scopes))}"
               + (f", acts as {key.principal}" if key.principal else "")
               + (", may assert identity" if key.assert_identity else "")
               + (", shares its principal's conversations" if key.shares_conversations
                  else "")
               + (f", expires {key.expires_at}" if key.expires_at else "") + ")")
    click.echo(secret)
    if caps:
        defaulted = sorted(set(caps) - set(key.limits))
        click.echo("limits for the key as a whole, over everyone it acts for: "
                   + ", ".join(f"{k}={v}" for k, v in sorted(caps.items()))
                   + (f" ({', '.join(defaulted)} from CITEWISE_IDENTITY_KEY_LIMITS; set your "
                      "own with --limit NAME=N, 0 = unlimited)" if defaulted else ""))
    click.echo("store it now: it is not shown again", err=True)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_keys(obj: Context, as_json: bool) -> None:
    """List keys with their scopes, status and last use (never their secrets)."""
    from citewise.api.identity.keys import ApiKeys

    with local_stores(obj) as stores:
        rows = [k.public() for k in ApiKeys(stores.keys).list()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no keys; create one with `citewise keys create NAME --scopes search,answer`")
        return
    click.echo(f"{'name':<20} {'status':<8} {'scopes':<26} {'acts as':<20} {'last used':<20}")
    for k in rows:
        acts = k["principal"] or ("(asserts)" if k["assert_identity"] else "-")
        click.echo(f"{k['name']:<20} {k['status']:<8} {','.join(k['scopes']):<26} {acts:<20} "
                   f"{(k['last_used_at'] or 'never')[:19]:<20}")


@keys.command("revoke")
@click.argument("name")
@click.pass_obj
def revoke(obj: Context, name: str) -> None:
    """Revoke a key: refused from its next request on."""
    from citewise.api.identity.keys import ApiKeys
    from citewise.api.metering.audit import AuditLog

    with local_stores(obj) as stores:
        key = ApiKeys(stores.keys).revoke(name)
        AuditLog(stores.metering).record("key.revoke", actor=_operator(), target=key.name,
                                         detail={"via": "cli"})
    click.echo(f"revoked key {key.name!r} at {key.revoked_at}")


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise usage                       per principal, last 7 days
          citewise usage --since 24h --by key
          citewise usage --since 2026-12-01 --by day --json
          citewise usage --since 30d --by provider

        p50/p95 are read from fixed latency buckets that outlive compaction: each is the upper
        bound of its bucket, at most 25% above the true value.

        With CITEWISE_URL set, the server's usage (GET /v1/usage: a key with the admin scope in
        CITEWISE_API_KEY).
        """
    )
)
@click.option("--since", default="7d", show_default=True, help="7d, 24h, 30m or an ISO date.")
@click.option("--by", "group_by",
              type=click.Choice(["principal", "key", "route", "day", "provider"]),
              default="principal", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def usage(obj: Context, since: str, group_by: str, as_json: bool) -> None:
    """Who used what: requests, errors, refusals, latency, results, tokens and cost, and the
    answers served from the cache with the model tokens they saved."""
    from datetime import datetime

    from citewise.api.metering.audit import AuditLog
    from citewise.api.metering.usage import UsageLog
    from citewise.api.routes_admin import parse_since

    if obj.url:
        with obj.services() as (_, remote):  # the server records the read in its audit log
            body = remote.usage(since=since, group_by=group_by)
        start, rows = datetime.fromisoformat(body["since"]), body["rows"]
    else:
        with local_stores(obj) as stores:
            start = parse_since(since)
            rows = UsageLog(stores.metering).report(start, None, group_by)
            AuditLog(stores.metering).record("usage.read", actor=_operator(),
                                             detail={"since": start.isoformat(), "via": "cli"})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"usage since {start.isoformat(timespec='seconds')}, by {group_by}")
    click.echo(f"{group_by:<32} {'requests':>8} {'errors':>7} {'refused':>7} {'mean ms':>8} "
               f"{'p50 ms':>8} {'p95 ms':>8} {'results':>8} {'tokens':>9} {'cost':>9} "
               f"{'cached':>7} {'saved':>8} {'answers':>7} {'abstain':>7}")
    for r in rows:
        click.echo(f"{str(r[group_by] or '-')[:32]:<32} {r['requests']:>8} {r['errors']:>7} "
                   f"{r['denied']:>7} {r['mean_latency_ms'] or 0:>8.1f} "
                   f"{r.get('p50_ms') or 0:>8.1f} {r.get('p95_ms') or 0:>8.1f} "
                   f"{r['results']:>8} {r['tokens_in'] + r['tokens_out']:>9} "
                   f"{r['cost']:>9.4f} {r['cache_hits']:>7} {r['saved_tokens']:>8} "
                   f"{r.get('answers', 0):>7} {r.get('abstentions', 0):>7}")
    if not rows:
        click.echo("(no requests)")


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise audit                       the last 30 days, newest first
          citewise audit --action key.revoke --since 90d
        """
    )
)
@click.option("--since", default="30d", show_default=True, help="7d, 24h or an ISO date.")
@click.option("--action", help="Only this action (key.create, key.revoke, ingest.start, "
                                "request.refused, usage.read...).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def audit(obj: Context, since: str, action: str | None, limit: int, as_json: bool) -> None:
    """The audit log: keys created and revoked, ingest started, admin reads, refusals."""
    from citewise.api.metering.audit import AuditLog
    from citewise.api.routes_admin import parse_since

    with local_stores(obj) as stores:
        log = AuditLog(stores.metering)
        start = parse_since(since)
        entries = log.read(start.isoformat(timespec="seconds"), limit, action)
        log.record("audit.read", actor=_operator(), detail={"via": "cli"})
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    for e in entries:
        detail = {k: v for k, v in e["detail"].items() if k != "via"}
        click.echo(f"{e['at'][:19]}  {e['action']:<16} {e['outcome']:<7} {e['actor']:<28} "
                   f"{e['target'] or '':<20} {json.dumps(detail) if detail else ''}")
    if not entries:
        click.echo("(no entries)")


@cli.group()
def feedback() -> None:
    """What people said of answers: helpful or not, comments, wrong citations."""


@feedback.command(
    "export",
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise feedback export                         every answer rated, as JSON lines
          citewise feedback export --since 30d --out candidates.jsonl
          citewise feedback export --golden feedback-golden.jsonl
          citewise feedback export --golden added.jsonl --status added
          citewise rank train --qa golden.jsonl --qa feedback-golden.jsonl

        --golden writes golden-set entries instead (the fields of
        bench/golden/shared-corpora.jsonl, "split": "feedback"): a helpful answer's cited
        documents are relevant (less one marked wrong); a not-helpful answer whose asker
        named the right document (the page's and Slack's "The right document was" box, or
        right_document in POST /v1/answers/{id}/feedback) has that document, once it names
        an indexed one. must_contain_any is left empty. Review the file, then give it to
        `citewise eval --qa` and `citewise rank train --qa`.

        --status added keeps what operators added to the golden set in the console (and
        --status dismissed what they dismissed): the console also appends each entry it
        adds to the serving replica's <data dir>/golden/feedback.jsonl, but on several
        replicas that file is split between them, and this export reads the shared store.
        """
    ),
)
@click.option("--since", default="365d", show_default=True, help="30d, 24h or an ISO date.")
@click.option("--status", type=click.Choice(["open", "added", "dismissed"]),
              help="Only feedback of this triage state (the console's Add to golden set "
                   "marks it added, Dismiss dismissed; new feedback is open).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write to this file.")
@click.option("--golden", type=click.Path(dir_okay=False),
              help="Write golden-set entries (JSON lines) to this file instead.")
@click.pass_obj
def feedback_export(obj: Context, since: str, status: str | None, out: str | None,
                    golden: str | None) -> None:
    """Rated answers as golden-set candidates (JSON lines): the question as searched, the
    sources a helpful answer cited (minus one marked wrong), and for unhelpful ones the
    comment and the right document, so a person can write the case; with --golden, as
    golden-set entries that evaluation and the learned ranking take."""
    from citewise.api.composition import build_conversations
    from citewise.api.feedback_golden import DocumentNames, golden_entries
    from citewise.api.metering.audit import AuditLog
    from citewise.api.routes_admin import parse_since

    with local_stores(obj) as stores:
        start = parse_since(since)
        at = start.isoformat(timespec="milliseconds")
        if golden:
            given = [(g, a) for g, a in stores.conversations.feedback_since(at)
                     if status is None or g["status"] == status]
            export = golden_entries(given, DocumentNames.of(stores.catalog, stores.sources))
            rows = export.entries
        else:
            rows = build_conversations(obj.local_data(), stores).feedback_export(at, status)
        AuditLog(stores.metering).record("feedback.export", actor=_operator(),
                                         detail={"since": start.isoformat(), "rows": len(rows),
                                                 "golden": bool(golden), "status": status})
    if golden:
        with open(golden, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        click.echo(f"wrote {len(rows)} golden-set entries to {golden}", err=True)
        for why, n in export.skipped.items():
            click.echo(f"  left out {n}: {why}", err=True)
        for reference in export.unresolved:
            click.echo(f"  no indexed document is named {reference!r}", err=True)
        return
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        click.echo(f"wrote {len(rows)} rated answers to {out}", err=True)
    else:
        click.echo(text, nl=False)
