"""Ingest gauges read from the catalog at scrape time, so that they cover every process's runs.

``core/metrics.py`` counts the runs of the process that serves ``/metrics``; the nightly
``citewise ingest --all`` from cron runs in a process of its own, and its counters die with it.
What every process leaves behind is its run in the ``SourceStore``, so the gauges here are read
from the stores on each scrape: the sources with their counts and last success, then each
source's last run. The vector index is never touched, and stores that cannot be read cost these
gauges, never the scrape.

They are collected into a registry made per scrape, not prometheus_client's global one: the
collector needs an app's stores, one process (the tests, an embedding application) may build
many apps, and a collector registered globally per app would collide ("Duplicated timeseries").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from citewise.index.catalog import DocumentCatalog
from citewise.index.source_store import SourceStore, sources_with_counts

log = logging.getLogger("citewise.api")

# The statuses an ingest run row takes (ingest/pipeline.py's RunReport, SourceStore.start_run):
# every one is exported for each source, 1 for the last run's and 0 for the others, so that an
# alert on one of them has a series to watch whatever happened last.
STATUSES = ("succeeded", "partial", "failed", "interrupted", "running")


def catalog_metrics(catalog: DocumentCatalog, sources: SourceStore) -> bytes:
    """The ingest gauges of these stores in the Prometheus text format, to append to the global
    registry's output (the two share no metric names)."""
    registry = CollectorRegistry()
    registry.register(IngestRunCollector(catalog, sources))
    return generate_latest(registry)


class IngestRunCollector:
    """A prometheus_client custom collector over the catalog's sources and ingest runs."""

    def __init__(self, catalog: DocumentCatalog, sources: SourceStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.sources = sources
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        # Everything is read before anything is yielded: a query that fails half-way must not
        # leave generate_latest with half a scrape, or fail the whole /metrics response.
        try:
            families = self._families()
        except Exception:
            log.exception("reading ingest runs from the catalog for /metrics failed; "
                          "the citewise_ingest_last_* and citewise_source_* gauges are left out")
            return
        yield from families

    def _families(self) -> list[Metric]:
        documents = GaugeMetricFamily(
            "citewise_source_documents", "Documents the catalog holds per source",
            labels=["source"])
        chunks = GaugeMetricFamily(
            "citewise_source_chunks", "Chunks the catalog holds per source", labels=["source"])
        last_success = GaugeMetricFamily(
            "citewise_ingest_last_success_timestamp_seconds",
            "End time of the source's last succeeded ingest run, any process (0: never)",
            labels=["source"])
        last_completed = GaugeMetricFamily(
            "citewise_ingest_last_completed_timestamp_seconds",
            "End time of the source's last ingest run that went through the whole source "
            "(succeeded, or partial: some documents failed), any process (0: never)",
            labels=["source"])
        last_run = GaugeMetricFamily(
            "citewise_ingest_last_run_timestamp_seconds",
            "Start time of the source's last ingest run, any process, finished or not",
            labels=["source"])
        duration = GaugeMetricFamily(
            "citewise_ingest_last_run_duration_seconds",
            "Duration of the source's last ingest run (so far, while it is running)",
            labels=["source"])
        failed = GaugeMetricFamily(
            "citewise_ingest_last_run_documents_failed",
            "Documents that failed in the source's last ingest run", labels=["source"])
        status = GaugeMetricFamily(
            "citewise_ingest_last_run_status",
            "1 for the status of the source's last ingest run, 0 for the others: "
            + ", ".join(STATUSES), labels=["source", "status"])

        for source in sources_with_counts(self.sources, self.catalog):
            name = source["name"]
            documents.add_metric([name], source["documents"])
            chunks.add_metric([name], source["chunks"])
            last_success.add_metric([name], _seconds(source["last_success_at"]) or 0.0)
            last_completed.add_metric([name], _seconds(source.get("last_completed_at")) or 0.0)
            runs = self.sources.list_runs(name, limit=1)
            if not runs:
                continue
            run = runs[0]
            started = _seconds(run["started_at"]) or 0.0
            ended = _seconds(run["finished_at"])
            if ended is None:  # still running
                ended = self.clock()
            last_run.add_metric([name], started)
            duration.add_metric([name], max(0.0, ended - started) if started else 0.0)
            failed.add_metric([name], run["failed"])
            for known in STATUSES:
                status.add_metric([name, known], 1.0 if run["status"] == known else 0.0)
            if run["status"] not in STATUSES:  # a status newer than this list: still say it
                status.add_metric([name, run["status"]], 1.0)
        return [last_success, last_completed, last_run, duration, failed, status, documents,
                chunks]


def _seconds(stamp: str | None) -> float | None:
    """Unix seconds of a stored timestamp (ISO 8601, UTC; ``index.catalog.now()``)."""
    if not stamp:
        return None
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
