"""End to end on pgvector: the test knowledge base ingested with ``CITEWISE_DATABASE_URL`` and
``CITEWISE_VECTOR_STORE=pgvector``, searched through the services the composition root builds,
ranks as the embedded index does, and never shows a restricted document to a non-reader."""

from __future__ import annotations

import pytest

from citewise.errors import ConfigError
from citewise.ingest.jobs import run_source
from citewise.types import Identity
from tests.kb import SECRET, SECRET_TITLE, folder_source

ANON = Identity.anonymous()
QUERIES = [
    "the primary database volume is running out of space",
    "RedisPrimaryDown",
    "how do I restart checkout after a failover",
    "onboarding for new engineers",
    "who swaps holidays on call",
]


@pytest.fixture
def both(make_services, kb, tmp_path, postgres_url):
    """(embedded, pgvector): the same knowledge base ingested into each."""
    embedded = make_services(data_dir=tmp_path / "embedded")
    pgvector = make_services(data_dir=tmp_path / "pgvector", database_url=postgres_url,
                             vector_store="pgvector")
    for services in (embedded, pgvector):
        report = run_source(services.pipeline, folder_source(kb), trigger="test")
        assert report.status == "succeeded", report.summary()
    return embedded, pgvector


def test_hybrid_search_ranks_as_the_embedded_index(both):
    embedded, pgvector = both
    assert (embedded.index_kind, pgvector.index_kind) == ("embedded", "pgvector")
    assert pgvector.index.count() == embedded.index.count() > 0
    for query in QUERIES:
        want = embedded.search.search(query, ANON, top_k=5)
        got = pgvector.search.search(query, ANON, top_k=5)
        assert want, query
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want], query
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
def test_a_restricted_document_stays_invisible_to_a_non_reader(both, mode):
    _, pgvector = both
    for who in (ANON, Identity(user="bob", groups=("sre",))):
        hits = pgvector.search.search(SECRET_TITLE, who, top_k=100, mode=mode)
        assert all(h.path != SECRET for h in hits), who
        # Other documents come back (BM25 finds none sharing the title's words).
        assert hits or mode == "sparse"
    insider = Identity(user="carol", groups=("security",))
    assert pgvector.search.search(SECRET_TITLE, insider, top_k=3, mode=mode)[0].path == SECRET


def test_pgvector_without_a_database_url_says_what_to_set(make_services, tmp_path):
    with pytest.raises(ConfigError) as raised:
        make_services(data_dir=tmp_path / "data", vector_store="pgvector")
    assert "CITEWISE_DATABASE_URL" in raised.value.message
    assert "postgresql://" in raised.value.hint


def test_pgvector_beside_a_qdrant_url_is_refused(make_services, tmp_path, postgres_url):
    with pytest.raises(ConfigError, match="choose one"):
        make_services(data_dir=tmp_path / "data", vector_store="pgvector",
                      database_url=postgres_url, qdrant_url="http://127.0.0.1:6333")
