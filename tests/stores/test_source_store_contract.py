"""The contract of sources and their runs (``index/source_store.py``), on every backend."""

from __future__ import annotations

from citewise.index.source_store import RUN_FIELDS, RunCounts, sources_with_counts


def test_a_source_is_registered_once_and_keeps_its_state(stores, open_stores):
    sources = stores.sources
    sources.ensure_source("wiki", "confluence", {"spaces": ["OPS"]})
    sources.set_source_state("wiki", {"cursor": {"revision": 3}})
    sources.set_healthy_documents("wiki", 40)
    sources.ensure_source("wiki", "confluence", {"spaces": ["OPS", "SRE"]})
    sources.ensure_source("docs", "folder", {})
    again = open_stores().sources
    wiki = again.get_source("wiki")
    assert wiki.config == {"spaces": ["OPS", "SRE"]} and wiki.type == "confluence"
    assert wiki.state == {"cursor": {"revision": 3}}  # settings changed, state kept
    assert again.healthy_documents("wiki") == 40 and again.healthy_documents("docs") is None
    assert again.get_source("nope") is None and again.healthy_documents("nope") is None
    assert [s.name for s in again.list_sources()] == ["docs", "wiki"]


def test_runs_are_recorded_with_their_counts_and_errors(stores):
    runs = stores.sources
    runs.ensure_source("kb", "folder", {})
    first = runs.start_run("kb", "cli")
    runs.update_run(first, RunCounts(seen=5, added=2))
    assert runs.get_run(first)["status"] == "running" and runs.get_run(first)["seen"] == 5
    runs.record_error(first, "kb", "b.md", "could not parse")
    runs.record_error(first, "kb", None, "warning: slow")
    runs.finish_run(first, RunCounts(seen=5, added=4, failed=1), "partial", "1 failed")
    run = runs.get_run(first)
    assert (run["status"], run["added"], run["failed"], run["message"], run["trigger"]) == (
        "partial", 4, 1, "1 failed", "cli")
    assert run["started_at"] and run["finished_at"]
    assert run["errors"] == [{"external_id": "b.md", "error": "could not parse"},
                             {"external_id": None, "error": "warning: slow"}]
    assert runs.get_run(first + 1000) is None


def test_a_run_left_running_is_interrupted_by_the_sources_next_run(stores):
    runs = stores.sources
    killed = runs.start_run("kb", "cron")
    elsewhere = runs.start_run("wiki", "cron")
    latest = runs.start_run("kb", "cron")
    assert runs.get_run(killed)["status"] == "interrupted"
    assert runs.get_run(killed)["finished_at"]
    assert runs.get_run(elsewhere)["status"] == "running"  # another source's run is its own
    assert [r["id"] for r in runs.list_runs("kb")] == [latest, killed]  # newest first
    assert [r["id"] for r in runs.list_runs(limit=2)] == [latest, elsewhere]


def test_sources_are_listed_with_what_a_caller_may_read_and_their_last_runs(stores):
    from tests.stores.test_document_catalog_contract import record, save

    save(stores, record("kb", "a.md"))
    save(stores, record("kb", "b.md", readers=["group:sre"]))
    stores.sources.ensure_source("empty", "folder", {})
    done = stores.sources.start_run("kb", "cli")
    stores.sources.finish_run(done, RunCounts(), "succeeded")
    partial = stores.sources.start_run("kb", "cli")
    stores.sources.finish_run(partial, RunCounts(failed=1), "partial")
    listed = {s["name"]: s for s in sources_with_counts(stores.sources, stores.catalog,
                                                        ["public"])}
    assert (listed["kb"]["documents"], listed["kb"]["chunks"]) == (1, 2)
    assert listed["empty"]["documents"] == 0 and listed["empty"]["last_success_at"] is None
    assert listed["kb"]["last_success_at"] == stores.sources.get_run(done)["finished_at"]
    assert listed["kb"]["last_completed_at"] == stores.sources.get_run(partial)["finished_at"]
    everything = {s["name"]: s for s in sources_with_counts(stores.sources, stores.catalog)}
    assert everything["kb"]["documents"] == 2


def test_sources_and_runs_copy_whole_into_another_store_once(stores, other_stores):
    """What ``citewise migrate-catalog`` reads and writes: a source with its times and state,
    and the runs under their own ids with their errors; a second copy adds nothing, and the
    next run started there comes after them."""
    here, there = stores.sources, other_stores.sources
    here.ensure_source("wiki", "confluence", {"spaces": ["OPS"]})
    here.set_source_state("wiki", {"cursor": 3})
    here.set_healthy_documents("wiki", 40)
    finished = here.start_run("wiki", "cron")
    here.record_error(finished, "wiki", "p-1", "could not parse")
    here.finish_run(finished, RunCounts(seen=3, added=2, failed=1), "partial", "1 failed")
    second = here.start_run("wiki", "cli")
    here.finish_run(second, RunCounts(seen=3, unchanged=3), "succeeded")

    source = here.get_source("wiki")
    there.import_source(source)
    there.import_source(source)
    assert there.get_source("wiki") == source  # created_at, updated_at and state as they were
    runs = list(here.export_runs())
    assert [r["id"] for r in runs] == [finished, second]
    assert set(runs[0]) == {*RUN_FIELDS, "errors"}
    assert runs[0]["errors"][0]["external_id"] == "p-1" and runs[0]["errors"][0]["at"]
    assert there.import_runs(runs) == 2
    assert there.import_runs(runs) == 0  # a rerun of the copy
    assert list(there.export_runs()) == runs
    assert there.get_run(finished) == here.get_run(finished)
    assert there.start_run("wiki", "cli") > second
