"""A document whose new version commits while a search runs is still found, in one version.

Search reads the open swaps (to exclude their points), queries the index, then drops hits whose
version the catalog no longer serves (``retrieval/search.py``). An ingest that commits a
document between those steps could hide it from that one search: its old points found and
then dropped as replaced, its new ones not asked for. The catalog counts committed swaps, and a
search that sees the count change while it ran is asked again. Here the commit is put exactly
in that gap: the catalog's version lookup is wrapped so that, the first time a search reaches
it, the edited document is ingested first (a real run of the real pipeline). The wrapper only
chooses the moment; nothing it wraps answers differently.
"""

from __future__ import annotations

from citewise.ingest.jobs import run_source
from citewise.settings import SourceConfig
from citewise.types import Identity
from tests.kb import REDIS


def test_a_document_committed_during_a_search_is_found_in_its_new_version(make_services, kb):
    services = make_services()
    source = SourceConfig(name="kb", type="folder", path=str(kb), readers=["public"])
    assert run_source(services.pipeline, source, trigger="test").status == "succeeded"
    path = kb / REDIS
    path.write_text(path.read_text().replace("Sentinel", "Sentinel (the quorum of three)"))

    catalog = services.catalog
    lookup = catalog.current_versions
    runs = []

    def commit_in_the_gap(document_ids):
        ids = list(document_ids)
        if not runs:
            runs.append(run_source(services.pipeline, source, trigger="test"))
        return lookup(ids)

    catalog.current_versions = commit_in_the_gap
    try:
        hits = services.search.search("sentinel quorum", Identity(), top_k=5, mode="sparse")
    finally:
        del catalog.current_versions
    assert runs and runs[0].counts.updated == 1, "the edit was committed during the search"
    redis = [h for h in hits if h.path == REDIS]
    assert redis, f"the edited runbook was not found: {[h.path for h in hits]}"
    assert {h.document_id for h in redis} == {redis[0].document_id}
    assert any("quorum of three" in h.text for h in redis), "the new version is served"


def test_a_document_added_during_a_search_is_found_by_the_next_one(make_services, kb):
    """A first version is not counted as a swap, so the search after it runs under the same
    mark as the one it straddled: the versions remembered meanwhile must not hide it."""
    services = make_services()
    source = SourceConfig(name="kb", type="folder", path=str(kb), readers=["public"])
    assert run_source(services.pipeline, source, trigger="test").status == "succeeded"
    added = kb / "runbooks" / "zookeeper-quorum.md"
    catalog = services.catalog
    marks = catalog.swaps_committed()
    lookup = catalog.current_versions
    runs = []

    def add_in_the_gap(document_ids):
        ids = list(document_ids)
        if not runs:
            added.write_text("# Zookeeper quorum lost\n\nRestart the zookeeper ensemble one "
                             "member at a time and check that the quorum is back.\n")
            runs.append(run_source(services.pipeline, source, trigger="test"))
        return lookup(ids)

    catalog.current_versions = add_in_the_gap
    try:
        services.search.search("zookeeper quorum lost", Identity(), top_k=5)
    finally:
        del catalog.current_versions
    assert runs and runs[0].counts.added == 1, "the document was added during the search"
    assert catalog.swaps_committed() == marks, "a first version is not counted"
    hits = services.search.search("zookeeper quorum lost", Identity(), top_k=5)
    assert hits and hits[0].path == "runbooks/zookeeper-quorum.md"
