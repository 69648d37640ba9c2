"""The Confluence connector end to end: a real HTTP server speaking both API flavours, the real
pipeline, the real model and index. Asserted through the catalog, search and answers."""

from __future__ import annotations

import logging

import pytest

from citewise.connectors.base import SyncRequest
from citewise.connectors.confluence.permissions import NO_READERS
from citewise.types import Identity
from tests.connectors.confluence_site import connector, docs_by_title, run, serving
from tests.fakes.confluence_server import sample_site

ENG = Identity(user="bob", groups=("eng",))
SRE = Identity(user="carol", groups=("eng", "sre"))


@pytest.fixture
def site(monkeypatch):
    model, ids = sample_site(filler=8)
    with serving(model, monkeypatch) as server:
        yield server, model, ids


@pytest.mark.parametrize("flavour", ["cloud", "datacenter"])
def test_pages_are_indexed_with_readers_breadcrumbs_and_deep_links(site, make_services, flavour):
    server, model, ids = site
    services = make_services()
    report = run(services, connector(server, flavour))
    assert report.status == "succeeded", report.summary()
    docs = docs_by_title(services)
    assert "Half-written ideas" not in docs  # excluded by its label
    assert len(docs) == 15
    assert docs["Deploy guide"].readers == ["group:eng"]
    assert docs["Incident response"].readers == ["group:sre"]
    assert docs["Database failover"].readers == ["group:sre"]  # inherited from its parent
    assert docs["Payment key rotation"].readers == ["group:sre"]  # restrictions add up
    assert docs["Expenses"].readers == ["public"]
    assert docs["Deploy guide"].tags == ["deploys", "runbook"]

    # A user outside the restricted subtree never retrieves it, by search or by answer.
    question = "How do I rotate the Northpay signing key?"
    assert all(r.title != "Payment key rotation"
               for r in services.search.search(question, ENG, top_k=20))
    answer = services.answers.answer(question, ENG)
    assert all(c.title != "Payment key rotation" for c in answer.citations)
    hits = services.search.search(question, SRE, top_k=3)
    assert hits[0].title == "Payment key rotation"
    assert hits[0].metadata["breadcrumb"] == (
        "Engineering > Engineering home > Incident response > Payment key rotation")

    # Citations link to the page and the heading's anchor, as each flavour renders it.
    hit = services.search.search("roll back a release kubectl rollout undo", ENG, top_k=1)[0]
    assert hit.title == "Deploy guide" and hit.heading == "Roll back a release"
    if flavour == "cloud":
        assert hit.url == (f"{server.cloud_url}/spaces/ENG/pages/{ids['deploy']}/Deploy+guide"
                           "#Roll-back-a-release")
    else:
        assert hit.url == f"{server.dc_url}/display/ENG/Deploy+guide#Deployguide-Rollbackarelease"
    assert "kubectl -n checkout rollout undo" in hit.text


def test_edit_reembeds_only_that_page_and_deletion_needs_a_full_listing(site, make_services):
    server, model, ids = site
    services = make_services()
    conn = connector(server, "cloud", full_every_runs=100)
    assert run(services, conn).status == "succeeded"

    model.edit(ids["failover"], body="<h2>Promote the replica</h2><p>Use Patroni now: "
                                     "<code>patronictl failover</code>.</p>")
    server.reset_log()
    report = run(services, conn)
    assert (report.counts.updated, report.counts.added, report.counts.deleted) == (1, 0, 0)
    assert 0 < report.counts.chunks_embedded <= 2
    # Only pages modified since each space's mark were read: the edited one, plus the newest
    # page of each of the 3 spaces (the mark is inclusive), never the other 11.
    assert report.counts.seen <= 4
    hit = services.search.search("patronictl failover", SRE, top_k=1)[0]
    assert hit.title == "Database failover"

    model.delete(ids["note3"])
    assert run(services, conn).counts.deleted == 0  # an incremental run cannot see deletions
    report = run(services, conn, force=True)  # a full listing does
    assert report.counts.deleted == 1 and report.counts.chunks_embedded == 0
    assert "Service note 3" not in docs_by_title(services)


def test_permission_only_change_updates_readers_without_reembedding(site, make_services):
    server, model, ids = site
    services = make_services()
    conn = connector(server, "datacenter", full_every_runs=1)  # every run lists everything
    run(services, conn)
    model.restrict(ids["deploy"], groups=("sre",))  # no new version in Confluence
    report = run(services, conn)
    assert report.counts.chunks_embedded == 0 and report.counts.updated == 0
    assert docs_by_title(services)["Deploy guide"].readers == ["group:sre"]
    assert all(r.title != "Deploy guide"
               for r in services.search.search("roll back a release", ENG, top_k=20))


def test_mass_deletion_brake_holds_unless_forced(site, make_services):
    server, model, ids = site
    services = make_services()
    conn = connector(server, "cloud", full_every_runs=1)
    run(services, conn)
    for i in range(8):
        model.delete(ids[f"note{i}"])
    model.delete(ids["deploy"])
    report = run(services, conn)
    assert report.status == "failed" and "refusing" in report.message
    assert len(docs_by_title(services)) == 15  # nothing lost
    report = run(services, conn, force=True)
    assert report.counts.deleted == 9 and len(docs_by_title(services)) == 6


def test_bad_input_is_reported_and_the_rest_goes_on(site, make_services, caplog):
    server, model, ids = site
    services = make_services()
    conn = connector(server, "cloud", spaces=["ENG", "HB", "NOPE"], full_every_runs=1)
    model.edit(ids["note1"], body="<p>broken <strong>markup</p>")
    server.failing.append(rf"/content/{ids['note2']}/restriction")  # keeps answering 500
    server.vanish_after_listing.add(ids["note4"])  # gone between listing and fetching
    server.rate_limit_on = {2}  # a 429 with Retry-After on the space permissions
    server.transient[r"/api/v2/pages/\d+/labels"] = 1  # and one transient 500
    with caplog.at_level(logging.DEBUG):
        report = run(services, conn)
    assert report.status == "partial", report.summary()
    errors = dict(report.errors)
    # A missing space is the run's problem, not a document's: no invented document id.
    assert [e for e in report.run_errors if e.startswith("space NOPE:")]
    assert "does not exist" in report.run_errors[0]
    assert not [e for e in errors if e.startswith("space")]
    assert "not well-formed" in errors[str(ids["note1"])]
    assert "kept failing" in errors[str(ids["note2"])]
    docs = docs_by_title(services)
    assert "Service note 4" not in docs and "Expenses" in docs and "Deploy guide" in docs
    # ENG's 13 admitted pages and HB's 1, less the 3 that failed or vanished; SEC not included.
    assert len(docs) == 11, " / ".join(sorted(docs))
    assert "cloud-secret-token" not in caplog.text

    # Fixed at the source: the retry list reads the failed pages again, and they arrive.
    server.failing.clear()
    model.edit(ids["note1"], body="<p>fixed</p>")
    report = run(services, conn)
    assert {"Service note 1", "Service note 2"} <= set(docs_by_title(services))
    assert report.errors == [] and report.status == "partial"
    assert len(report.run_errors) == 1 and report.run_errors[0].startswith("space NOPE:")


def test_bad_credentials_fail_the_run_and_lose_nothing(site, make_services, monkeypatch, caplog):
    server, model, ids = site
    services = make_services()
    conn = connector(server, "datacenter")
    run(services, conn)
    monkeypatch.setenv("CW_TEST_PAT", "revoked-token-123")
    with caplog.at_level(logging.DEBUG):
        report = run(services, conn, force=True)
    assert report.status == "failed" and "401" in report.message
    assert "CW_TEST_PAT" in report.message  # says which variable to fix...
    assert "revoked-token-123" not in report.message + caplog.text  # ...never its value
    assert len(docs_by_title(services)) == 15


def test_an_interrupted_run_resumes_where_it_stopped(site):
    server, model, ids = site
    conn = connector(server, "datacenter")
    batches = conn.sync(SyncRequest(full=True), batch_size=5)
    first = [next(batches), next(batches)]  # two pages of results, then the process dies
    batches.close()
    seen_before = {d.external_id for b in first for d in b.documents}
    server.reset_log()
    rest = list(conn.sync(SyncRequest(full=True, checkpoint=first[-1].checkpoint), batch_size=5))
    seen_after = {d.external_id for b in rest for d in b.documents}
    assert not seen_before & seen_after  # nothing read twice
    listings = [r for r in server.log if "/rest/api/content?" in r]
    assert "start=0" not in " ".join(listings) and "start=10" in listings[0]
    assert set(rest[-1].live_ids) == seen_before | seen_after  # the id list is still complete
    assert len(rest[-1].live_ids) == 15


def test_undeterminable_space_permissions_mean_restricted(site):
    server, model, ids = site
    # The space's permissions name a group id the site cannot resolve to a name (deleted since).
    model.spaces["HB"].grants = [("group", "ghost")]
    conn = connector(server, "cloud", spaces=["HB"])
    docs = [d for b in conn.sync(SyncRequest(full=True)) for d in b.documents]
    assert [d.readers for d in docs if d.title == "Expenses"] == [[NO_READERS]]
