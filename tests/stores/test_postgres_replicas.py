"""What PostgreSQL adds to the store contracts: state that API replicas share. Each "replica"
here is a ``Stores`` built on its own by ``build_stores`` (its own pool) on one database, as
two ``citewise serve`` processes would build theirs; they run side by side in threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import psycopg
import pytest

from citewise.api.composition import Stores, build_stores
from citewise.api.conversation_store import StoredAnswer
from citewise.api.metering.audit import AuditLog
from citewise.api.metering.buckets import Policy, TokenBuckets
from citewise.api.settings import Settings
from citewise.retrieval.answering.cache_store import CacheEntry
from citewise.retrieval.answering.model import Answer


@pytest.fixture
def replicas(postgres_url, tmp_path):
    """Two replicas' stores on one fresh database (each with a data folder of its own, which
    holds no state)."""
    built = [build_stores(Settings(data_dir=tmp_path / name, database_url=postgres_url))
             for name in ("a", "b")]
    yield built
    for stores in built:
        stores.close()


def _together(*work) -> None:
    """Run each callable in a thread of its own, started at once; re-raise what failed."""
    start = threading.Barrier(len(work))
    failed: list[BaseException] = []

    def run(job) -> None:
        try:
            start.wait()
            job()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            failed.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]


def test_every_store_is_in_the_database_and_the_data_folder_holds_no_catalog(
        postgres_url, tmp_path):
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_url)
    stores = build_stores(settings)
    latest = {"documents": 1, "sources": 1, "identity": 1, "metering": 2, "conversations": 3,
              "answer_cache": 1}
    assert stores.versions() == latest
    stores.close()
    again = build_stores(settings)  # a restart: nothing to migrate
    assert again.versions() == latest
    again.close()
    assert not settings.data.catalog_path.exists()


def test_one_principal_has_one_allowance_across_replicas(replicas):
    """Requests split across two replicas, at once, are refused at the limit, not at twice it.
    A slow refill (10 an hour) gives no token back while the test runs."""
    policy = Policy("answer-hour", "principal:user:dana|answer|hour", quota=10, window=3600)
    limiters = [TokenBuckets(stores.bucket_levels()) for stores in replicas]
    decisions: list[bool] = []

    def client(limiter: TokenBuckets) -> None:
        for _ in range(6):
            decisions.append(limiter.take([policy]).allowed)

    _together(*(lambda limiter=limiter: client(limiter) for limiter in limiters * 3))
    assert len(decisions) == 36
    assert decisions.count(True) == 10
    refused = limiters[0].take([policy])
    assert not refused.allowed and refused.reset > 0 and refused.remaining == 0
    # A token given back through one replica is there for the other.
    limiters[0].give_back([policy])
    assert limiters[1].take([policy]).allowed
    assert not limiters[0].take([policy]).allowed


def test_a_refused_request_takes_from_no_bucket(replicas):
    """Every bucket that applies must have a token, or none is taken: the principal's bucket
    keeps its token when the key's is empty, whichever replica asks."""
    principal = Policy("search-day", "principal:user:ci|search|day", 100, 86400)
    key = Policy("key-search-minute", "key:ci|search|minute", 1, 3600)
    first, second = (TokenBuckets(stores.bucket_levels()) for stores in replicas)
    assert first.take([principal, key]).allowed
    assert not second.take([principal, key]).allowed
    assert second.take([principal]).remaining == 98  # one taken, not two


def test_turns_added_through_two_replicas_at_once_are_numbered_once_each(replicas):
    a, b = (stores.conversations for stores in replicas)
    a.start("c1", "user:dana", "failover", "2026-03-01T00:00:00+00:00")

    def turns(store, prefix: str) -> None:
        for i in range(8):
            store.add_answer(StoredAnswer(
                id=f"{prefix}{i}", owner="user:dana", question="q", standalone="q",
                answer=Answer(answer="a"), created_at=f"2026-03-01T00:00:{i:02d}+00:00",
                conversation_id="c1"))

    _together(lambda: turns(a, "a"), lambda: turns(b, "b"))
    assert sorted(t.turn for t in b.answers("c1")) == list(range(1, 17))
    assert a.get("c1").turns == 16


def test_a_cached_answer_is_found_used_and_dropped_through_either_replica(replicas):
    a, b = (stores.answer_cache for stores in replicas)
    a.add(CacheEntry(scope="s", question="redis failover",
                     vector=np.asarray([0.6, 0.8], dtype=np.float32),
                     answer=Answer(answer="Fail over [1]"), cited={"d1": ("v1", "public")},
                     created=time.time()))
    ((key, found),) = b.candidates("s", not_before=0)
    assert found.question == "redis failover" and found.cited == {"d1": ("v1", "public")}
    assert np.allclose(found.vector, [0.6, 0.8])
    assert b.touch(key)
    a.drop(key)
    assert b.candidates("s", not_before=0) == [] and not b.touch(key)


def test_the_audit_log_refuses_every_change_in_the_database_itself(replicas, postgres_url):
    AuditLog(replicas[0].metering).record("key.create", actor="operator:ana", target="ci")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for statement in ("UPDATE audit SET actor = 'someone else'", "DELETE FROM audit",
                          "TRUNCATE audit"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)
    assert [e["actor"] for e in AuditLog(replicas[1].metering).read()] == ["operator:ana"]


def test_a_reindex_builds_its_catalog_in_a_schema_of_its_own(replicas, postgres_url):
    """The staged catalog's tables are not the live ones (a reader of the live catalog sees
    nothing of the build), and discarding it leaves no schema behind."""
    from tests.stores.test_document_catalog_contract import chunks, record

    stores: Stores = replicas[0]
    staged = stores.staging.open("g2")
    staged.sources.ensure_source("kb", "folder", {})
    doc = record("kb", "a.md")
    made, ids = chunks(doc, "staged only")
    staged.catalog.save_document(doc, made, ids)
    assert replicas[1].catalog.get_document(doc.id) is None
    assert replicas[1].sources.get_source("kb") is None
    assert replicas[1].staging.documents("g2") == 1
    staged.close()
    stores.staging.discard()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE "
                            "'citewise_reindex%'").fetchall() == []
