"""Hybrid search on every vector backend: ranking, filters, and permissions in the query."""

from __future__ import annotations

import pytest

from citewise.ingest.jobs import run_source
from citewise.types import Identity, SearchFilters
from tests.kb import folder_source

SECRET_TITLE = "Rotate the payment provider API keys"


@pytest.fixture(params=["embedded", "server", "pgvector"])
def services(request, make_services, kb, tmp_path):
    if request.param == "server":
        # qdrant-client's local mode stands in for a Qdrant server: same client code path.
        s = make_services(qdrant_url=f"local:{tmp_path / 'qdrant-local'}")
    elif request.param == "pgvector":
        s = make_services(database_url=request.getfixturevalue("postgres_url"),
                          vector_store="pgvector")
    else:
        s = make_services()
    report = run_source(s.pipeline, folder_source(kb),
                        trigger="test")
    assert report.status == "succeeded"
    return s


ANON = Identity.anonymous()


def test_question_finds_the_right_runbook(services):
    hits = services.search.search("the primary database volume is running out of space", ANON)
    assert hits[0].path == "runbooks/postgres-disk-full.md"
    assert hits[0].source == "kb"
    assert hits[0].title == "Postgres disk almost full"


def test_alert_name_finds_its_runbook(services):
    hits = services.search.search("RedisPrimaryDown", ANON, top_k=3)
    assert hits[0].path == "runbooks/redis-failover.md"


@pytest.mark.parametrize("mode", ["hybrid", "dense", "sparse"])
def test_outsiders_never_get_restricted_chunks(services, mode):
    outsiders = [ANON, Identity(user="bob"), Identity(user="bob", groups=("sre", "payments"))]
    for who in outsiders:
        hits = services.search.search(SECRET_TITLE, who, top_k=100, mode=mode)
        assert all("rotate-payment-keys" not in (h.path or "") for h in hits), who
    insider = Identity(user="carol", groups=("security",))
    hits = services.search.search(SECRET_TITLE, insider, top_k=3, mode=mode)
    assert hits[0].path == "runbooks/secrets/rotate-payment-keys.md"


def test_user_principal_grants_access(services, kb):
    from tests.kb import folder_source, write

    write(kb, "private/dana.md", "---\nreaders: [dana]\n---\n# Dana's notes\n\n"
          "The quarterly capacity plan for the Kafka brokers lives in this note.\n")
    run_source(services.pipeline, folder_source(kb),
               trigger="test")
    q = "quarterly capacity plan Kafka brokers"
    assert all(h.path != "private/dana.md" for h in services.search.search(q, ANON, top_k=50))
    assert services.search.search(q, Identity(user="dana"), top_k=1)[0].path == "private/dana.md"


def test_filters_apply_inside_the_query(services):
    q = "what to do"
    only_wiki = services.search.search(q, ANON, top_k=20,
                                       filters=SearchFilters(path_prefix="wiki"))
    assert only_wiki and all(h.path.startswith("wiki/") for h in only_wiki)
    by_tag = services.search.search(q, ANON, top_k=20, filters=SearchFilters(tags=["postgres"]))
    assert by_tag and {h.path for h in by_tag} == {"runbooks/postgres-disk-full.md"}
    by_service = services.search.search(q, ANON, top_k=20,
                                        filters=SearchFilters(services=["redis-cache"]))
    assert by_service and {h.service for h in by_service} == {"redis-cache"}
    none = services.search.search(q, ANON, filters=SearchFilters(sources=["other"]))
    assert none == []


def test_top_k_and_bad_queries(services):
    from citewise.errors import InvalidRequestError

    assert len(services.search.search("on-call", ANON, top_k=2)) == 2
    with pytest.raises(InvalidRequestError, match="empty"):
        services.search.search("   ", ANON)
    with pytest.raises(InvalidRequestError, match="top_k"):
        services.search.search("x", ANON, top_k=0)
