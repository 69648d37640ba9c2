"""`citewise migrate-catalog`: a single-machine installation's state copied, through the stores'
contracts, into another database, run for real with click's CliRunner.

The source is a data folder made the way an installation makes one: ``citewise ingest`` of the
test knowledge base, keys made and revoked by ``citewise keys``, and usage, audit entries,
rate-limit levels and conversations with feedback kept by the services that keep them. The
target is a fresh data folder's own SQLite file (every backend's stores pass the same contract
tests, ``tests/stores/``), and a real PostgreSQL database (the ``postgres_url`` fixture).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from citewise.api.catalog_migration import GENERATION_META, MIGRATED_FROM, migrate_catalog
from citewise.api.cli import cli
from citewise.api.composition import Stores, build_stores
from citewise.api.conversation_store import StoredAnswer
from citewise.api.identity.keys import ApiKeys
from citewise.api.metering.audit import AuditLog
from citewise.api.metering.store import Usage
from citewise.api.metering.usage import UsageLog
from citewise.api.settings import Settings
from citewise.errors import AuthError, ConfigError
from citewise.index.catalog import PendingWrite
from citewise.postgres import display_url
from citewise.retrieval.answering import Answer
from tests.kb import ALL_PATHS, REDIS, SECRET, SECRET_TITLE, write_kb

NO_CITEWISE_ENV = {k: None for k in os.environ if k.startswith("CITEWISE_")}


def invoke(*args: object, **settings: str) -> Result:
    """Run the CLI in this process, without the machine's CITEWISE_* settings but ``settings``
    (``CITEWISE_...="..."``); the CLI's logging set-up is undone afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, [str(a) for a in args],
                                  env={**NO_CITEWISE_ENV, **settings})
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def show(result: Result) -> str:
    return f"exit {result.exit_code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}" + (
        f"\n--- exception {result.exception!r}" if result.exception else "")


@pytest.fixture(autouse=True)
def _config_free_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./citewise.toml applies


def _stores(data: Path) -> Stores:
    return build_stores(Settings(data_dir=data))


def _made(data: Path, kb: Path) -> dict[str, str]:
    """An installation in ``data``, as its owner's commands and services leave one; the
    secrets of its keys."""
    assert invoke("--data-dir", data, "ingest", kb).exit_code == 0
    secrets = {}
    for name in ("bot", "old"):
        made = invoke("--data-dir", data, "keys", "create", name, "--scopes", "search,answer")
        assert made.exit_code == 0, show(made)
        secrets[name] = re.search(r"cw_\S+", made.stdout).group(0)
    assert invoke("--data-dir", data, "keys", "revoke", "old").exit_code == 0
    stores = _stores(data)
    try:
        now = datetime.now(UTC)
        usage = UsageLog(stores.metering, stores.keys, raw_days=7, retention_days=400)
        for days, status in ((9, 200), (9, 429), (0, 200)):
            usage.record(Usage((now - timedelta(days=days)).isoformat(timespec="seconds"),
                               "user:dana", "bot", "/v1/search", "POST", status, 12.0,
                               results=3, request_id=f"req-{days}-{status}"))
        usage.flush()
        usage.compact(now)  # the two of nine days ago become an hour's row
        AuditLog(stores.metering).record("request.refused", actor="anonymous",
                                         outcome="denied", client="10.0.0.9")
        stores.metering.save_buckets({"principal:user:dana|answer|minute": (1.0, 1e9)}, 0.0)
        talk = stores.conversations
        talk.start("conv-1", "user:dana", "how do I fail over redis?", now.isoformat())
        for n in (1, 2):
            talk.add_answer(StoredAnswer(
                id=f"ans-{n}", owner="user:dana", question=f"question {n}",
                standalone=f"standalone {n}", answer=Answer(answer=f"answer {n}"),
                created_at=now.isoformat(), conversation_id="conv-1"))
        talk.add_feedback("ans-2", "user:dana", False, "step 3 is wrong", 1, now.isoformat())
    finally:
        stores.close()
    return secrets


@pytest.fixture(scope="module")
def installation(tmp_path_factory, dense):
    """One installation for the module's tests to copy from (they leave it as it is)."""
    base = tmp_path_factory.mktemp("install")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        secrets = _made(base / "data", write_kb(base / "kb"))
    return base / "data", secrets


def state(stores: Stores) -> dict:
    """Everything the stores hold, read through their contracts (the index generations and
    the record of the copy aside: they are the target's own)."""
    catalog = stores.catalog
    ids = sorted(catalog.content_hashes())
    return {
        "documents": {i: (catalog.get_document(i), catalog.chunk_rows(i),
                          catalog.outlines([i]).get(i)) for i in ids},
        "open_swaps": catalog.pending_writes(),
        "meta": {k: v for k, v in catalog.meta_items().items()
                 if k not in (*GENERATION_META, MIGRATED_FROM)},
        "sources": stores.sources.list_sources(),
        "runs": list(stores.sources.export_runs()),
        "keys": [stores.keys.by_id(k.id) for k in stores.keys.list()],
        "requests": list(stores.metering.export_usage()),
        "hours": stores.metering.export_hourly_usage(),
        "audit": list(stores.metering.export_audit()),
        "buckets": stores.metering.load_buckets(),
        "conversations": list(stores.conversations.export_conversations()),
        "answers": list(stores.conversations.export_answers()),
        "feedback": list(stores.conversations.export_feedback()),
    }


def _copied(source: Path, target: Stores, secrets: dict[str, str]) -> None:
    """The target holds exactly the source's state, and it works there: a key's secret, the
    revoked key refused, the usage report, a conversation's turns."""
    here = _stores(source)
    try:
        ours = state(here)
        assert len(ours["documents"]) == len(ALL_PATHS) and ours["requests"] and ours["hours"]
        assert ours["audit"] and ours["feedback"] and ours["meta"]["embedding_model"]
        assert state(target) == ours
        report = ("2000-01-01", "2999-01-01", "key")
        assert target.metering.usage_report(*report) == here.metering.usage_report(*report)
    finally:
        here.close()
    keys = ApiKeys(target.keys)
    assert keys.verify(secrets["bot"]).name == "bot"
    with pytest.raises(AuthError, match="revoked"):
        keys.verify(secrets["old"])
    assert [a.turn for a in target.conversations.answers("conv-1")] == [1, 2]
    assert target.catalog.meta(MIGRATED_FROM)


# Into a fresh data folder -------------------------------------------------------------------


def test_every_store_is_copied_and_the_next_steps_are_said(installation, tmp_path):
    source, secrets = installation
    result = invoke("--data-dir", source, "migrate-catalog", "--to", tmp_path / "copy")
    assert result.exit_code == 0, show(result)
    out = " ".join(result.stdout.split())  # the next steps are wrapped at spaces
    assert f"documents: {len(ALL_PATHS)} copied" in out
    assert "API keys: 2 copied" in out and "conversations: 1 copied" in out
    assert "feedback: 1 copied" in out and "audit entries:" in out
    # What the operator does next, for this installation (local blobs, the embedded index)
    # and this target: what the next test does.
    copy = tmp_path / "copy"
    assert f"blobs: copy {source / 'blobs'} to {copy / 'blobs'}" in out
    assert f"citewise --data-dir {copy} verify --repair" in out
    target = _stores(tmp_path / "copy")
    try:
        _copied(source, target, secrets)
    finally:
        target.close()


def test_the_next_steps_onto_postgresql_follow_where_blobs_and_vectors_are(tmp_path):
    """Said after a copy into PostgreSQL: local blobs go to the bucket, embedded vectors are
    built again where replicas reach them; what is on S3 or a Qdrant server stays there. The
    password never shows."""
    from citewise.api.cli.migrate import _next_steps

    url = "postgresql://citewise:s3cret@db.internal:5432/citewise"
    local = " ".join(_next_steps(Settings(data_dir=tmp_path / "data"), url))
    assert f"aws s3 sync {tmp_path / 'data' / 'blobs'} s3://BUCKET/citewise/" in local
    assert "CITEWISE_BLOB_STORE=s3" in local and "citewise verify --repair" in local
    assert "CITEWISE_VECTOR_STORE=pgvector" in local and "CITEWISE_QDRANT_URL" in local
    assert "CITEWISE_DATABASE_URL=postgresql://citewise:***@db.internal:5432/citewise" in local
    assert "s3cret" not in local
    shared = " ".join(_next_steps(Settings(
        data_dir=tmp_path / "data", blob_store="s3", s3_bucket="kb",
        qdrant_url="http://qdrant.internal:6333"), url))
    assert "they stay in s3://kb/citewise/" in shared
    assert "they stay on the Qdrant server http://qdrant.internal:6333" in shared
    assert "verify --repair" not in shared and "aws s3 sync" not in shared


def test_the_copy_serves_once_its_vectors_are_rebuilt(installation, tmp_path):
    """The next steps, followed: the blobs put where the target's blob store reads them, then
    `citewise verify --repair` builds the vectors from the copied catalog; search then finds
    what it found before, and a restricted document stays restricted."""
    source, _ = installation
    copy = tmp_path / "copy"
    assert invoke("--data-dir", source, "migrate-catalog", "--to", copy).exit_code == 0
    before = invoke("--data-dir", copy, "verify")
    assert before.exit_code == 3 and "no point in the vector index" in before.stdout, show(before)
    # `aws s3 sync`, for a local folder (verify made the empty blob store already)
    shutil.copytree(source / "blobs", copy / "blobs", dirs_exist_ok=True)
    repaired = invoke("--data-dir", copy, "verify", "--repair")
    assert repaired.exit_code == 0, show(repaired)
    assert "consistent" in repaired.stdout
    found = invoke("--data-dir", copy, "search", "redis failover", "--json")
    assert found.exit_code == 0, show(found)
    assert json.loads(found.stdout)["results"][0]["path"] == REDIS
    hidden = invoke("--data-dir", copy, "search", SECRET_TITLE, "-k", "20", "--json")
    assert SECRET not in [r["path"] for r in json.loads(hidden.stdout)["results"]]
    shown = invoke("--data-dir", copy, "search", SECRET_TITLE, "--user", "dana", "--group",
                   "security", "--json")
    assert json.loads(shown.stdout)["results"][0]["path"] == SECRET


def test_a_rerun_copies_nothing_twice_and_follows_what_changed(installation, tmp_path):
    """A copy, then the installation goes on (a document deleted, a conversation deleted, a
    key revoked, an open swap), then the copy again: it catches up, and a third copy writes
    nothing."""
    source = tmp_path / "data"
    shutil.copytree(installation[0], source)
    copy = tmp_path / "copy"
    assert invoke("--data-dir", source, "migrate-catalog", "--to", copy).exit_code == 0

    assert invoke("--data-dir", source, "keys", "revoke", "bot").exit_code == 0  # audited
    stores = _stores(source)
    try:
        gone = sorted(stores.catalog.content_hashes())[0]
        stores.catalog.delete_document(gone)
        stores.conversations.delete("conv-1")
        left_open = PendingWrite(document_id=gone, source="kb", kind="delete",
                                 phase="committed", old_version="v1", old_points=2,
                                 started_at="2026-01-01T00:00:00+00:00")
        stores.catalog.begin_pending(left_open)
    finally:
        stores.close()
    again = invoke("--data-dir", source, "migrate-catalog", "--to", copy, "--json")
    assert again.exit_code == 0, show(again)
    report = json.loads(again.stdout)
    assert report["rerun"] is True
    assert report["documents"]["removed"] == 1
    assert report["documents"]["already"] == len(ALL_PATHS) - 1
    assert report["documents"]["copied"] == 0
    assert report["conversations"]["removed"] == 1 and report["open_swaps"]["copied"] == 1
    assert report["keys"] == {"copied": 1, "already": 1, "removed": 0, "left_out": []}
    assert report["audit"]["copied"] == 1  # the revocation's entry, not the earlier ones
    assert report["requests"]["copied"] == 0 and report["requests"]["already"] > 0
    assert [step.split(":")[0] for step in report["next"]] == ["blobs", "vectors", "state"]
    target = _stores(copy)
    try:
        assert target.catalog.get_document(gone) is None
        assert target.conversations.get("conv-1") is None
        assert target.catalog.pending_writes() == [left_open]
        assert target.keys.get("bot").revoked_at
        here = _stores(source)
        try:
            assert state(target) == state(here)
        finally:
            here.close()
    finally:
        target.close()

    stores = _stores(source)
    stores.catalog.end_pending(gone)
    stores.close()
    third = json.loads(invoke("--data-dir", source, "migrate-catalog", "--to", copy,
                              "--json").stdout)
    assert third["open_swaps"]["removed"] == 1
    for name in ("documents", "sources", "runs", "keys", "requests", "audit",
                 "conversations", "answers", "feedback", "index_facts"):
        assert third[name]["copied"] == 0, (name, third[name])


def test_a_copy_used_on_its_own_since_is_not_copied_over_unless_forced(installation,
                                                                      tmp_path):
    """Once replicas serve from the copy (a conversation started there), this folder is out of
    date: copying it again would undo their writes. Forced, it adds and replaces, and removes
    nothing."""
    source = tmp_path / "data"
    shutil.copytree(installation[0], source)
    copy = tmp_path / "copy"
    assert invoke("--data-dir", source, "migrate-catalog", "--to", copy).exit_code == 0
    target = _stores(copy)
    try:
        target.conversations.start("on-a-replica", "user:li", "where are the logs?",
                                   datetime.now(UTC).isoformat(timespec="milliseconds"))
    finally:
        target.close()
    stores = _stores(source)
    try:
        stores.conversations.delete("conv-1")  # deleted here since the copy
    finally:
        stores.close()

    refused = invoke("--data-dir", source, "migrate-catalog", "--to", copy)
    assert refused.exit_code == 1
    assert "has been used on its own since (a conversation updated there at" in refused.stderr
    forced = invoke("--data-dir", source, "migrate-catalog", "--to", copy, "--force", "--json")
    assert forced.exit_code == 0, show(forced)
    assert json.loads(forced.stdout)["conversations"]["removed"] == 0
    target = _stores(copy)
    try:
        assert target.conversations.get("on-a-replica") is not None
        assert target.conversations.get("conv-1") is not None  # nothing removed when forced
    finally:
        target.close()
    # Still not this folder's copy alone: a plain rerun is refused again.
    assert invoke("--data-dir", source, "migrate-catalog", "--to", copy).exit_code == 1


def test_a_target_with_documents_of_its_own_is_refused_unless_forced(installation,
                                                                     tmp_path):
    source, secrets = installation
    other = tmp_path / "other"
    kb = write_kb(tmp_path / "kb")
    (kb / "runbooks" / "only-here.md").write_text("# Only here\n\nA runbook of another install.")
    assert invoke("--data-dir", other, "ingest", kb).exit_code == 0
    invoke("--data-dir", other, "keys", "create", "bot", "--scopes", "admin")
    refused = invoke("--data-dir", source, "migrate-catalog", "--to", other)
    assert refused.exit_code == 1
    assert f"already holds {len(ALL_PATHS) + 1} documents" in refused.stderr
    assert "--force" in refused.stderr
    target = _stores(other)
    try:
        assert target.catalog.meta(MIGRATED_FROM) is None  # nothing was written
    finally:
        target.close()

    forced = invoke("--data-dir", source, "migrate-catalog", "--to", other, "--force")
    assert forced.exit_code == 0, show(forced)
    assert "left out: bot: the target has another key by that name" in forced.stdout
    target = _stores(other)
    try:
        # Its own document and key are kept; this installation's documents are there too.
        assert target.catalog.count_documents() == len(ALL_PATHS) + 1
        assert target.keys.get("bot").scopes == {"admin"}
        with pytest.raises(AuthError):  # this installation's "bot" is not the target's
            ApiKeys(target.keys).verify(secrets["bot"])
    finally:
        target.close()


def test_a_folder_without_a_catalog_is_refused_and_left_without_one(tmp_path):
    result = invoke("--data-dir", tmp_path / "empty", "migrate-catalog", "--to", tmp_path / "x")
    assert result.exit_code == 1
    assert "holds no catalog" in result.stderr and "--data-dir" in result.stderr
    assert not (tmp_path / "empty" / "catalog.db").exists()
    assert not (tmp_path / "x").exists()


def test_a_target_that_opens_the_source_database_is_refused_with_nothing_written(
        installation):
    """Settings that open this folder's own file whatever the target says (a link, a backend
    that ignored the URL) are found by asking the database itself."""
    source, _ = installation
    here, there = _stores(source), _stores(source)
    try:
        before = state(here)
        with pytest.raises(ConfigError, match="opens this data folder's own database"):
            migrate_catalog(here, there, origin="test", target_name="elsewhere")
        assert state(here) == before and here.catalog.meta(MIGRATED_FROM) is None
        assert not [k for k in here.catalog.meta_items() if k.startswith("migrate-probe")]
    finally:
        here.close()
        there.close()


def test_a_target_that_is_no_postgresql_url_nor_a_folder_is_refused(installation):
    source, _ = installation
    for to, said in (("mysql://db/citewise", "neither a PostgreSQL URL nor a folder"),
                     (source, "this data folder itself")):
        result = invoke("--data-dir", source, "migrate-catalog", "--to", to)
        assert result.exit_code == 1 and said in result.stderr, show(result)



def test_into_postgresql_every_store_then_the_vectors_beside_it(installation, postgres_url,
                                                                 tmp_path):
    """The move the docs describe: the state copied into a real PostgreSQL database (a replica
    there finds all of it, and nothing in its own data folder), a rerun copying nothing twice,
    then `citewise verify --repair` run on the old machine with the new settings, which builds
    the vectors in a vector store of their own from the copied catalog; search through the new
    settings then finds what it found before."""
    source = tmp_path / "data"
    shutil.copytree(installation[0], source)
    secrets = installation[1]
    result = invoke("--data-dir", source, "migrate-catalog", "--to", postgres_url)
    assert result.exit_code == 0, show(result)
    out = " ".join(result.stdout.split())
    assert f"documents: {len(ALL_PATHS)} copied" in out
    assert f"CITEWISE_DATABASE_URL={display_url(postgres_url)}" in out
    assert "aws s3 sync" in out and "citewise verify --repair" in out
    replica = Settings(data_dir=tmp_path / "replica", database_url=postgres_url)
    target = build_stores(replica)
    try:
        _copied(source, target, secrets)
    finally:
        target.close()
    assert not (tmp_path / "replica" / "catalog.db").exists()
    again = invoke("--data-dir", source, "migrate-catalog", "--to", postgres_url, "--json")
    assert again.exit_code == 0, show(again)
    report = json.loads(again.stdout)
    assert report["rerun"] is True
    assert all(report[name]["copied"] == 0 for name in (
        "documents", "sources", "runs", "keys", "requests", "audit", "conversations",
        "answers", "feedback", "index_facts")), report

    moved = {"CITEWISE_DATABASE_URL": postgres_url,
             "CITEWISE_QDRANT_URL": f"local:{tmp_path / 'vectors'}"}
    repaired = invoke("--data-dir", source, "verify", "--repair", **moved)
    assert repaired.exit_code == 0, show(repaired)
    assert "consistent" in repaired.stdout
    found = invoke("--data-dir", tmp_path / "replica", "search", "redis failover", "--json",
                   **moved)
    assert found.exit_code == 0, show(found)
    assert json.loads(found.stdout)["results"][0]["path"] == REDIS
