"""``deploy/grafana/citewise.json`` is a dashboard Grafana imports anywhere: the Prometheus data
source is an import input (``${DS_PROMETHEUS}``) that every panel, query and variable names;
ids are unique; every panel says what it means and queries something that parses as PromQL;
the panels tile the grid without overlapping. Whether the names it reads are exported is
tests/deploy/test_monitoring_metrics.py's job."""

from __future__ import annotations

import pytest

from tests.deploy.monitoring_queries import (
    dashboard_queries,
    load_dashboard,
    metric_names,
    panels,
)

INPUT = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
# What the operator guide promises the dashboard shows, by the metric behind each part.
COVERED = {
    "citewise_http_requests_total", "citewise_http_request_seconds_bucket",
    "citewise_search_seconds_bucket", "citewise_search_rank_seconds_bucket",
    "citewise_answers_total", "citewise_auth_refused_total", "citewise_rate_limited_total",
    "citewise_requests_by_key_total", "citewise_ingest_runs_total",
    "citewise_ingest_documents_total", "citewise_ingest_chunks_embedded_total",
    "citewise_ingest_running", "citewise_ingest_last_completed_timestamp_seconds",
    "citewise_ingest_last_run_status", "citewise_ingest_last_run_documents_failed",
    "citewise_ingest_last_run_duration_seconds", "citewise_source_documents",
    "citewise_source_chunks", "citewise_llm_request_seconds_bucket",
    "citewise_llm_time_to_first_token_seconds_bucket", "citewise_llm_errors_total",
    "citewise_llm_failovers_total", "citewise_llm_tokens_total", "citewise_llm_cost_total",
    "citewise_llm_breaker_state", "citewise_answer_cache_lookups_total",
    "citewise_answer_cache_saved_tokens_total", "citewise_answer_cache_entries",
    "citewise_answer_cache_dropped_total", "citewise_guardrail_decisions_total",
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load_dashboard()


def test_the_data_source_is_an_import_input(dashboard):
    assert dashboard["__inputs"] == [{
        "name": "DS_PROMETHEUS", "label": "Prometheus",
        "description": "The Prometheus that scrapes citewise's /metrics",
        "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}]
    # Importing assigns the id and keeps the uid, so links to /d/citewise work everywhere.
    assert dashboard["id"] is None and dashboard["uid"] == "citewise"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 39
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] == INPUT, variable["name"]


def test_every_panel_queries_the_input_with_an_expression(dashboard):
    everything = panels(dashboard)
    ids = [p["id"] for p in everything]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    shown = [p for p in everything if p["type"] != "row"]
    assert len(shown) >= 40
    for panel in shown:
        where = f"panel {panel['id']} ({panel['title']})"
        assert panel["datasource"] == INPUT, where
        assert panel["targets"], where
        assert len(panel["description"]) > 40, f"{where}: say what it means for an operator"
        assert panel["fieldConfig"]["defaults"]["unit"], where
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), where
        for target in panel["targets"]:
            assert target["datasource"] == INPUT, where
            assert target["expr"].strip(), where
    for query in dashboard_queries(dashboard):
        assert metric_names(query.promql), query.where  # parses, and reads something


def test_it_shows_every_part_of_the_service(dashboard):
    read = set().union(*(metric_names(q.promql) for q in dashboard_queries(dashboard)))
    assert COVERED - read == set()
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "HTTP", "Search and answers", "Access", "Ingest",
                    "Model gateway", "Answer cache", "Guardrails"]


def test_the_panels_tile_the_grid(dashboard):
    taken: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard):
        grid, name = panel["gridPos"], f"panel {panel['id']} ({panel['title']})"
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, name
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{name} overlaps {taken[(x, y)]}"
                taken[(x, y)] = name
