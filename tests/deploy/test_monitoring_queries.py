"""How the monitoring tests read metric names out of PromQL and out of Grafana's expressions
(tests/deploy/monitoring_queries.py): names only, never a function, label, keyword or duration."""

from __future__ import annotations

import pytest

from tests.deploy.monitoring_queries import metric_names, substitute


@pytest.mark.parametrize(("promql", "names"), [
    ('sum by (route, status) (rate(citewise_http_requests_total{status=~"5.."}[5m]))',
     {"citewise_http_requests_total"}),
    ("histogram_quantile(0.95, sum by (le) (rate(citewise_search_seconds_bucket[5m]))) > 1",
     {"citewise_search_seconds_bucket"}),
    # operands on both sides of binary operators, with matching modifiers and set operators
    ("a_total / on (job) group_left (instance) b and c unless d or e",
     {"a_total", "b", "c", "d", "e"}),
    # offset, @, subqueries and functions of durations
    ("max_over_time(deriv(gauge_one[10m])[1h:5m]) - gauge_two offset 1d @ 1700000000",
     {"gauge_one", "gauge_two"}),
    # a name given as a matcher; a label called like a metric is still a label
    ('{__name__="citewise_source_documents", source="citewise_source_chunks"}',
     {"citewise_source_documents"}),
    ("time() - max by (source) (x) > 26 * 3600", {"x"}),
    ('absent(up{job="citewise"})', {"up"}),
    ("vector(1) + scalar(sum(y))", {"y"}),
])
def test_metric_names_are_the_selectors_only(promql, names):
    assert metric_names(promql) == names


def test_text_that_is_not_promql_is_refused():
    with pytest.raises(ValueError):
        metric_names("rate(citewise_http_requests_total[$__rate_interval])")
    with pytest.raises(ValueError):
        metric_names("sum by (route (rate(x[5m]))")


def test_grafana_variables_become_promql():
    expr = ('sum(rate(citewise_answers_total{job=~"$job", instance=~"${instance}"}'
            "[$__rate_interval])) + sum(increase(x[$__range]))")
    promql = substitute(expr, {"job", "instance"})
    assert promql == ('sum(rate(citewise_answers_total{job=~".*", instance=~".*"}[5m])) '
                      "+ sum(increase(x[6h]))")
    assert metric_names(promql) == {"citewise_answers_total", "x"}


def test_a_variable_the_dashboard_does_not_declare_is_an_error():
    with pytest.raises(KeyError, match="'cluster' is neither a variable"):
        substitute('up{cluster=~"$cluster"}', {"job", "instance"})
