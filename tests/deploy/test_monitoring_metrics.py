"""Every metric the Grafana dashboard and the Prometheus alert rules read is one citewise
exports: a real server on loopback (require_auth, a guardrail, a two-provider model chain whose
first provider fails, a rate-limited key) ingests, searches, answers, streams, refuses and rate
limits, then its ``/metrics`` is scraped with an admin key, as Prometheus would, and parsed with
prometheus_client's own text parser.

A name passes when the scrape has a sample of that name (``_bucket``, ``_sum``, ``_count`` and
``_total`` are sample names, so a typo in a suffix fails too), or, for the few labelled series
this traffic does not create, when the scrape declares its family with a type that makes that
sample name. Those few are listed below: if a query starts reading another name that has no
sample here, the test fails and says which.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import GuardrailConfig, Settings
from citewise.gateway.settings import ProviderConfig
from tests.deploy.monitoring_queries import (
    PROMETHEUS_SERIES,
    Query,
    dashboard_queries,
    load_dashboard,
    load_rules,
    metric_names,
    rule_queries,
)
from tests.fakes.openai_provider import OpenAIProvider
from tests.kb import folder_source, make_key, write_kb
from tests.live import LiveServer

# Sample names a family makes, by the type the scrape declares (the text format's rules).
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "untyped": ("",),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created")}
# Declared, read by the dashboard, but no traffic here makes a series: nothing was evicted from
# or went stale in the answer cache.
NO_SERIES_HERE = {"citewise_answer_cache_dropped_total"}


@pytest.fixture(scope="module")
def scrape(tmp_path_factory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("monitoring")
    failing, model = OpenAIProvider().start(), OpenAIProvider().start()
    failing.mode = "500"  # every call fails: an error, a failover, a breaker that counts
    services = build_services(Settings(
        data_dir=base / "data", require_auth=True,
        guardrails=[GuardrailConfig(name="hr-cases", kind="deny", action="block",
                                    terms=["salary"])],
        llm_providers=[
            ProviderConfig(name="flaky", base_url=failing.base_url, model=failing.model),
            ProviderConfig(name="steady", base_url=model.base_url, model=model.model,
                           input_price=0.5, output_price=1.5)]))
    services.settings.sources = [folder_source(write_kb(base / "kb"))]
    operator = make_key(services, "prometheus", scopes="admin,ingest")
    reader = make_key(services, "reader", scopes="search,answer")
    greedy = make_key(services, "greedy", scopes="search", limits=["search_per_minute=1"])
    try:
        with LiveServer(create_app(services=services), services.settings) as url, \
                httpx.Client(base_url=url, timeout=120) as http:
            job = http.post("/v1/ingest/jobs", json={"all": True}, headers=operator)
            assert job.status_code == 202, job.text
            deadline = time.monotonic() + 180
            while (status := http.get(f"/v1/ingest/jobs/{job.json()['id']}",
                                      headers=operator).json()["status"]) not in ("done",
                                                                                  "failed"):
                assert time.monotonic() < deadline, "the ingest job did not finish"
                time.sleep(0.2)
            assert status == "done"

            assert http.get("/v1/search", params={"q": "redis failover"},
                            headers=reader).status_code == 200
            question = {"question": "How do I fail over redis?"}
            first = http.post("/v1/answer", json=question, headers=reader)
            assert first.status_code == 200 and first.json()["mode"] == "llm", first.text
            again = http.post("/v1/answer", json=question, headers=reader)  # the cache's hit
            assert again.status_code == 200, again.text
            streamed = http.post("/v1/answer", headers=reader,
                                 json={"question": "What do I do when the postgres disk is full?",
                                       "stream": True})
            assert streamed.status_code == 200 and "event: done" in streamed.text, streamed.text
            denied = http.post("/v1/answer", json={"question": "What is the salary band?"},
                               headers=reader)
            assert denied.status_code in (200, 403, 422), denied.text
            assert http.get("/v1/search", params={"q": "redis"},
                            headers={"Authorization": "Bearer cw_not-a-key"}).status_code == 401
            codes = [http.get("/v1/search", params={"q": "redis"}, headers=greedy).status_code
                     for _ in range(3)]
            assert 429 in codes, codes

            metrics = http.get("/metrics", headers=operator)
            assert metrics.status_code == 200, metrics.text
            yield metrics.text
    finally:
        failing.stop()
        model.stop()
        services.close()


def exported(text: str) -> tuple[set[str], set[str]]:
    """The sample names of a scrape, and the sample names its declared families make."""
    samples, declared = set(), set()
    for family in text_string_to_metric_families(text):
        samples.update(s.name for s in family.samples)
        # The parser names a counter's family without its _total; the others as declared.
        declared.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return samples, declared


def unknown(queries: list[Query], samples: set[str], declared: set[str]) -> list[str]:
    wrong = []
    for query in queries:
        for name in sorted(metric_names(query.promql) - PROMETHEUS_SERIES):
            if name not in samples and not (name in declared and name in NO_SERIES_HERE):
                wrong.append(f"{query.where}: {name}"
                             + (" (declared, but this traffic made no series)"
                                if name in declared else " (not exported)"))
    return wrong


def test_the_traffic_made_the_series_the_queries_read(scrape):
    samples, declared = exported(scrape)
    # The requests above reached every part: the gateway's failover, the cache, the guardrail,
    # the front door's refusals, the ingest job, the catalog's gauges.
    for name in ("citewise_llm_failovers_total", "citewise_llm_errors_total",
                 "citewise_llm_time_to_first_token_seconds_bucket", "citewise_llm_cost_total",
                 "citewise_answer_cache_saved_tokens_total", "citewise_guardrail_decisions_total",
                 "citewise_auth_refused_total", "citewise_rate_limited_total",
                 "citewise_ingest_runs_total", "citewise_ingest_last_run_status",
                 "citewise_source_chunks"):
        assert name in samples, name
    assert NO_SERIES_HERE <= declared


def test_every_dashboard_query_reads_exported_metrics(scrape):
    queries = dashboard_queries(load_dashboard())
    assert len(queries) > 40
    assert unknown(queries, *exported(scrape)) == []


def test_every_alert_reads_exported_metrics(scrape):
    queries = rule_queries(load_rules())
    assert len(queries) >= 10
    assert unknown(queries, *exported(scrape)) == []


def test_a_misspelt_name_is_caught(scrape):
    samples, declared = exported(scrape)
    wrong = [Query("alert Typo", "x", "rate(citewise_http_request_total[5m])"),
             Query("panel 1", "x", "rate(citewise_search_seconds_buckets[5m])"),
             Query("panel 2", "x", "citewise_answer_cache_dropped_total")]
    assert unknown(wrong, samples, declared) == [
        "alert Typo: citewise_http_request_total (not exported)",
        "panel 1: citewise_search_seconds_buckets (not exported)"]
