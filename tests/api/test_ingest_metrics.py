"""The ingest gauges of ``GET /metrics``, read from the catalog at scrape time.

The point of them is the nightly cron: ``citewise ingest --all`` runs in a process of its own,
whose in-process counters nobody scrapes. So the first test ingests from a real ``citewise``
subprocess before the server's services exist, then runs a succeeded and a partial ingest in
the server's process, and reads all three back from one scrape.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from citewise.api.app import create_app
from citewise.api.composition import build_stores
from citewise.api.ingest_metrics import STATUSES, IngestRunCollector, catalog_metrics
from citewise.api.settings import Settings
from citewise.index.source_store import RunCounts
from citewise.ingest.jobs import run_source
from tests.kb import ALL_PATHS, clean_env, folder_source, write

CITEWISE = Path(sys.executable).with_name("citewise")
LOOPBACK = ("127.0.0.1", 50000)  # local mode: this machine is admin, as /metrics requires
CRON = "nightly-cron"  # a source only the cron subprocess ingests


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus text scrape, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scraped: dict, name: str, **labels: str) -> float | None:
    return scraped.get((name, frozenset(labels.items())))


def unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def test_a_scrape_reports_every_process_s_runs(make_services, kb, tmp_path):
    data = tmp_path / "data"
    # The cron's run: another process, finished before the server's services open the index.
    cron_folder = tmp_path / "cron"
    write(cron_folder, "ledger.md", "# Ledger\n\nRestart the ledger service after a deploy.\n")
    cron = subprocess.run(
        [str(CITEWISE), "--data-dir", str(data), "ingest", str(cron_folder), "--name", CRON],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert cron.returncode == 0, cron.stdout + cron.stderr

    services = make_services(data_dir=data)
    first = run_source(services.pipeline, folder_source(kb), trigger="test")
    assert first.status == "succeeded", first.summary()
    # Three files break (as in tests/ingest/test_pipeline.py): the next run is partial.
    write(kb, "runbooks/redis-failover.md", "---\ntitle: [unclosed\n---\n# Broken\n")
    (kb / "runbooks/binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0binary")
    (kb / "wiki/latin1.txt").write_bytes("caf\xe9 menu".encode("latin-1"))
    second = run_source(services.pipeline, folder_source(kb), trigger="test")
    assert second.status == "partial" and second.counts.failed == 3, second.summary()

    with TestClient(create_app(services=services), client=LOOPBACK) as client:
        resp = client.get("/metrics")
    assert resp.status_code == 200
    scraped = samples(resp.text)
    catalog, runs = services.catalog, services.sources

    # The server's own run: the last success is the first run, the last run the partial one.
    first_run, second_run = runs.get_run(first.run_id), runs.get_run(second.run_id)
    assert value(scraped, "citewise_ingest_last_success_timestamp_seconds",
                 source="kb") == unix(first_run["finished_at"])
    assert abs(unix(first_run["finished_at"]) - time.time()) < 300
    # The partial run went through the whole source: complete, though not a success (the
    # nightly "not complete" alert must not page every night for one broken document).
    assert value(scraped, "citewise_ingest_last_completed_timestamp_seconds",
                 source="kb") == unix(second_run["finished_at"])
    assert value(scraped, "citewise_ingest_last_run_timestamp_seconds",
                 source="kb") == unix(second_run["started_at"])
    assert value(scraped, "citewise_ingest_last_run_duration_seconds", source="kb") == (
        unix(second_run["finished_at"]) - unix(second_run["started_at"]))
    assert value(scraped, "citewise_ingest_last_run_documents_failed", source="kb") == 3
    assert {status: value(scraped, "citewise_ingest_last_run_status", source="kb",
                          status=status) for status in STATUSES} == {
        "succeeded": 0, "partial": 1, "failed": 0, "interrupted": 0, "running": 0}
    # The broken runbook keeps its indexed version; the two new broken files were never added.
    assert value(scraped, "citewise_source_documents", source="kb") == len(ALL_PATHS)
    kb_chunks = sum(d.chunk_count for d in catalog.documents_of_source("kb").values())
    assert value(scraped, "citewise_source_chunks", source="kb") == kb_chunks
    assert kb_chunks + value(scraped, "citewise_source_chunks", source=CRON) == (
        catalog.count_chunks())

    # The cron's run, which this process's counters never saw.
    (cron_run,) = runs.list_runs(CRON)
    assert cron_run["status"] == "succeeded"
    assert value(scraped, "citewise_ingest_last_success_timestamp_seconds",
                 source=CRON) == unix(cron_run["finished_at"])
    assert value(scraped, "citewise_ingest_last_run_status", source=CRON,
                 status="succeeded") == 1
    assert value(scraped, "citewise_ingest_last_run_documents_failed", source=CRON) == 0
    assert value(scraped, "citewise_source_documents", source=CRON) == 1
    assert value(scraped, "citewise_ingest_runs_total", source=CRON, status="succeeded") is None
    assert value(scraped, "citewise_ingest_runs_total", source="kb", status="partial") >= 1

    # Another app in the same process scrapes too: nothing is registered globally per app.
    with TestClient(create_app(services=services), client=LOOPBACK) as again:
        rescraped = samples(again.get("/metrics").text)
    assert value(rescraped, "citewise_ingest_last_run_documents_failed", source="kb") == 3


def test_never_succeeded_running_and_interrupted_runs(tmp_path):
    """Rows written the way the pipeline writes them, in stores of their own."""
    stores = build_stores(Settings(data_dir=tmp_path / "data"))
    runs = stores.sources
    runs.ensure_source("wiki", "confluence", {})
    failed = runs.start_run("wiki", "cron")
    runs.finish_run(failed, RunCounts(seen=4, failed=4), "failed", "401 from Confluence")
    runs.ensure_source("git", "git", {})
    runs.start_run("git", "cron")  # killed: the next run's start says so
    runs.start_run("git", "cron")  # still running
    (running, interrupted) = runs.list_runs("git")
    assert interrupted["status"] == "interrupted"

    registry = CollectorRegistry()
    registry.register(IngestRunCollector(stores.catalog, runs,
                                         clock=lambda: unix(running["started_at"]) + 90))
    scraped = samples(generate_latest(registry).decode())

    assert value(scraped, "citewise_ingest_last_success_timestamp_seconds", source="wiki") == 0
    assert value(scraped, "citewise_ingest_last_completed_timestamp_seconds", source="wiki") == 0
    assert value(scraped, "citewise_ingest_last_run_status", source="wiki", status="failed") == 1
    assert value(scraped, "citewise_ingest_last_run_documents_failed", source="wiki") == 4
    assert value(scraped, "citewise_source_documents", source="wiki") == 0
    # A run in progress: its duration so far, so that a hung run trips the duration alert.
    assert value(scraped, "citewise_ingest_last_run_status", source="git", status="running") == 1
    assert value(scraped, "citewise_ingest_last_run_status",
                 source="git", status="interrupted") == 0
    assert value(scraped, "citewise_ingest_last_run_duration_seconds", source="git") == 90
    assert value(scraped, "citewise_ingest_last_run_timestamp_seconds",
                 source="git") == unix(running["started_at"])
    stores.close()


def test_no_sources_no_series(tmp_path):
    stores = build_stores(Settings(data_dir=tmp_path / "data"))
    assert samples(catalog_metrics(stores.catalog, stores.sources).decode()) == {}
    stores.close()


def test_a_catalog_that_cannot_be_read_costs_only_its_gauges(make_services, kb, caplog):
    services = make_services()
    run_source(services.pipeline, folder_source(kb), trigger="test")
    # Another process's migration gone wrong, say: the runs table is not there any more.
    with sqlite3.connect(services.settings.data.catalog_path) as other:
        other.execute("ALTER TABLE ingest_runs RENAME TO ingest_runs_moved")
    with TestClient(create_app(services=services), client=LOOPBACK) as client:
        with caplog.at_level(logging.ERROR, logger="citewise.api"):
            resp = client.get("/metrics")
    assert resp.status_code == 200
    scraped = samples(resp.text)
    assert ("citewise_ingest_running", frozenset()) in scraped  # the global registry's part
    assert not any(name.startswith(("citewise_ingest_last_", "citewise_source_"))
                   for name, _ in scraped)
    assert "reading ingest runs from the catalog" in caplog.text
