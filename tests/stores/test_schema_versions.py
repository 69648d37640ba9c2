"""Each store versions its own tables in the one embedded database (``citewise.sqlite_schema``),
and a data folder written before the stores split opens with nothing lost and no step to take
(``legacy.py``: a catalog the v11 release wrote, made with that code itself).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from citewise.api.composition import build_conversations, build_stores
from citewise.api.conversations import Viewer
from citewise.api.identity.keys import ApiKeys
from citewise.api.identity.sqlite_key_store import SCHEMA as IDENTITY
from citewise.api.metering.audit import AuditLog
from citewise.api.metering.buckets import Policy, TokenBuckets
from citewise.api.metering.sqlite_store import SCHEMA as METERING
from citewise.api.metering.usage import UsageLog
from citewise.api.settings import Settings
from citewise.api.sqlite_conversation_store import SCHEMA as CONVERSATIONS
from citewise.errors import AuthError, ConfigError
from citewise.index.catalog import PendingWrite, document_id
from citewise.index.source_store import sources_with_counts
from citewise.index.sqlite_catalog import SCHEMA as DOCUMENTS
from citewise.index.sqlite_source_store import SCHEMA as SOURCES
from citewise.sqlite_schema import LAYOUT
from tests.stores.legacy import MIGRATION_12, fixture_secret, write_v11

LATEST = {s.store: s.latest for s in (DOCUMENTS, SOURCES, IDENTITY, METERING, CONVERSATIONS)}
TABLES = {"sources", "documents", "chunks", "outlines", "pending_writes", "meta", "ingest_runs",
          "ingest_errors", "api_keys", "rate_buckets", "usage", "usage_hourly", "audit",
          "conversations", "answers", "feedback"}


def _counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


def _schema(path: Path) -> dict[str, str]:
    """Every table's, index's and trigger's definition, as SQLite keeps it."""
    conn = sqlite3.connect(path)
    try:
        return {name: sql for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")}
    finally:
        conn.close()


def test_a_fresh_data_folder_has_every_store_at_its_latest_version(tmp_path):
    stores = build_stores(Settings(data_dir=tmp_path / "data"))
    assert stores.versions() == LATEST
    stores.close()
    assert TABLES <= set(_schema(tmp_path / "data" / "catalog.db"))


def test_reopening_migrates_nothing_and_keeps_rows(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    stores = build_stores(settings)
    stores.sources.ensure_source("a", "folder", {"path": "/x"})
    stores.close()
    again = build_stores(settings)
    assert again.sources.get_source("a").config == {"path": "/x"}
    assert again.versions() == LATEST
    again.close()


def test_a_file_of_a_newer_citewise_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    conn = sqlite3.connect(data / "catalog.db")
    conn.execute(f"PRAGMA user_version = {LAYOUT + 5}")
    conn.close()
    with pytest.raises(ConfigError, match="newer than this citewise") as e:
        build_stores(Settings(data_dir=data))
    assert "upgrade citewise" in e.value.hint


def test_a_store_whose_tables_a_newer_citewise_migrated_is_refused(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    build_stores(settings).close()
    conn = sqlite3.connect(settings.data.catalog_path)
    with conn:
        conn.execute("UPDATE schema_versions SET version = version + 1 WHERE store = 'metering'")
    conn.close()
    with pytest.raises(ConfigError, match="the metering tables .* newer than this citewise"):
        build_stores(settings)


def test_a_catalog_of_the_first_schema_is_upgraded_in_place(tmp_path):
    """A catalog written by the first release (user_version 1) keeps its rows and gains every
    later table and column, each store running only the migrations it lacks."""
    data = tmp_path / "data"
    data.mkdir()
    conn = sqlite3.connect(data / "catalog.db")
    conn.executescript(DOCUMENTS.migrations[0].sql + SOURCES.migrations[0].sql
                       + "PRAGMA user_version = 1;")
    conn.execute("INSERT INTO sources (name, type, created_at, updated_at) "
                 "VALUES ('kb', 'folder', 'x', 'x')")
    conn.commit()
    conn.close()
    stores = build_stores(Settings(data_dir=data))
    assert stores.versions() == LATEST
    assert stores.sources.get_source("kb").type == "folder"
    stores.close()
    fresh = tmp_path / "fresh"
    build_stores(Settings(data_dir=fresh)).close()
    assert _schema(data / "catalog.db") == _schema(fresh / "catalog.db")


INJECTION_IN_METADATA = ("UPDATE documents SET metadata = json_set(metadata, "
                         "'$.injection_chunks', json('[1]')) WHERE external_id = 'db-failover.md'")


def test_a_v12_data_folder_runs_only_what_it_lacks(tmp_path):
    """A catalog of the single catalog's last migration (12, the injection column) opens too:
    the documents' migration that shipped as 12 is not run again."""
    data = tmp_path / "data"
    path = write_v11(data, INJECTION_IN_METADATA, MIGRATION_12, "PRAGMA user_version = 12;")
    before = _counts(path)
    stores = build_stores(Settings(data_dir=data))
    assert stores.versions() == LATEST
    doc = stores.catalog.get_document(document_id("runbooks", "db-failover.md"))
    assert doc.injection_chunks == [1] and doc.metadata == {"owner": "sre"}
    stores.close()
    assert _counts(path) == before
    fresh = tmp_path / "fresh"
    build_stores(Settings(data_dir=fresh)).close()
    assert _schema(path) == _schema(fresh / "catalog.db")


def test_a_v11_data_folder_opens_with_nothing_lost(tmp_path):
    """The data folder of the last single-catalog release: every store reads its rows back,
    and the file's tables are those a fresh installation makes, column for column."""
    data = tmp_path / "data"
    # What ingest wrote then: the chunks aimed at a model, in the connector's metadata.
    path = write_v11(data, INJECTION_IN_METADATA)
    before = _counts(path)
    assert all(before.values()), before  # the fixture has rows in every table

    settings = Settings(data_dir=data)
    stores = build_stores(settings)
    assert stores.versions() == LATEST
    assert _counts(path) == before
    fresh = tmp_path / "fresh"
    build_stores(Settings(data_dir=fresh)).close()
    assert _schema(path) == _schema(fresh / "catalog.db")

    # Sources and runs.
    runbooks = stores.sources.get_source("runbooks")
    assert runbooks.config == {"path": "/srv/runbooks"}
    assert runbooks.state == {"cursor": "2026-01-01T00:00:00"}
    assert runbooks.healthy_documents == 2
    listed = {s["name"]: s for s in sources_with_counts(stores.sources, stores.catalog)}
    assert (listed["runbooks"]["documents"], listed["runbooks"]["chunks"]) == (2, 4)
    assert listed["wiki"]["last_success_at"] and not listed["runbooks"]["last_success_at"]
    assert listed["runbooks"]["last_completed_at"]
    (run,) = stores.sources.list_runs("runbooks")
    assert run["status"] == "partial" and run["seen"] == 3 and run["chunks_written"] == 6
    assert stores.sources.get_run(run["id"])["errors"] == [
        {"external_id": "broken.md", "error": "could not parse"}]

    # Documents, chunks, outlines, open swaps, meta.
    doc_id = document_id("runbooks", "db-failover.md")
    doc = stores.catalog.get_document(doc_id)
    assert doc.readers == ["public"] and doc.tags == ["db", "t0"] and doc.service == "payments"
    assert doc.metadata == {"owner": "sre"} and doc.body_line_offset == 3
    assert doc.injection_chunks == [1]  # moved out of the metadata by the documents' migration
    chunks = stores.catalog.chunks(doc_id)
    assert [c.text for c in chunks] == ["text 0.0 failover", "text 0.1 failover"]
    assert stores.catalog.outlines([doc_id])[doc_id].sections[0].title == "Steps"
    (pending,) = stores.catalog.pending_writes()
    assert isinstance(pending, PendingWrite) and pending.new_version == "v9"
    assert stores.catalog.meta("embedding_model") == "sentence-transformers/all-MiniLM-L6-v2"
    assert stores.catalog.readable_documents(
        [doc_id, document_id("runbooks", "secret.md")], ["public"]) == {doc_id}
    assert stores.catalog.list_facets(["public"])["runbooks"]["services"] == ["payments"]

    # Keys: the secret made before the upgrade still opens the door; the revoked key does not.
    secret = fixture_secret()
    keys = ApiKeys(stores.keys)
    assert keys.verify(secret).name == "ci-bot"
    assert keys.get("ci-bot").limits == {"answer_per_minute": 5}
    assert keys.get("ci-bot").last_used_at  # from the usage flushed before the upgrade
    assert keys.get("dana-agent").shares_conversations
    assert keys.get("old-bot").status == "revoked"
    with pytest.raises(AuthError):
        keys.verify(secret[:-1] + ("A" if secret[-1] != "A" else "B"))

    # Metering: hourly rows folded before the upgrade and raw ones, the audit log, buckets.
    usage = UsageLog(stores.metering, stores.keys).report(
        datetime(2025, 12, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
    by_principal = {r["principal"]: r for r in usage}
    assert by_principal["user:ci"]["requests"] == 4 and by_principal["user:ci"]["denied"] == 2
    assert by_principal["user:ci"]["cache_hits"] == 2
    assert by_principal["user:dana"]["requests"] == 1
    # The request kept raw was counted in its latency bucket (5.5 ms: the bucket up to 1.25^8
    # ms) by the migration; the hour folded before buckets existed has none, so no p50 is made
    # up for it.
    assert by_principal["user:dana"]["p50_ms"] == 5.96
    assert by_principal["user:ci"]["p50_ms"] is None
    assert by_principal["user:ci"]["answers"] == 0  # not recorded then: not guessed
    entries = AuditLog(stores.metering).read()
    assert [e["action"] for e in entries] == ["auth", "key.revoke", "key.create"]
    assert entries[-1]["detail"] == {"scopes": ["answer", "search"]}
    buckets = TokenBuckets(stores.bucket_levels())
    assert buckets.load() == 1
    policy = Policy("answer-minute", "principal:user:ci|answer|minute", 5, 60)
    assert buckets.take([policy], now=0.0).remaining < 5  # not a fresh allowance

    # Conversations, their turns, and the feedback.
    conversations = build_conversations(settings.replaced(conversation_idle_hours=10**6), stores)
    dana = Viewer("user:dana", ("public", "user:dana"), "user:dana")
    (listed_conversation,) = conversations.owned_by(dana)
    turns = conversations.turns(listed_conversation["id"], dana)
    assert [t.turn for t in turns] == [1, 2]
    assert turns[1].standalone == "after failing over the db what next?"
    assert turns[0].answer.citations[0].document_id == doc_id
    (rated,) = conversations.feedback_export()
    assert rated["helpful"] and rated["comment"] == "spot on"
    [(_, kept, _)] = stores.conversations.feedback_items(None, 10)
    assert kept.status == "open"  # feedback from before triage is open
    assert rated["expected_sources"] == ["db-failover.md"]
    stores.close()

    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == LAYOUT
