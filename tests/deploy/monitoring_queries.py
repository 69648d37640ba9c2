"""The PromQL in ``deploy/grafana/citewise.json`` and ``deploy/prometheus/alerts.yml``, and the
metric names it reads: what the monitoring tests hold against a real scrape of ``/metrics``.

Names come from a real PromQL parser (``promql-parser``: Python bindings of GreptimeDB's Rust
parser), so a label name, a function, a keyword such as ``by`` or ``offset`` or a duration is
never taken for a metric. Grafana's dashboard variables are not PromQL; they are replaced
first with values of the right kind (a duration for ``$__rate_interval``, ``.*`` for a
regex-matched variable), and a variable the dashboard does not declare is an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "citewise.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"

# Series Prometheus makes itself for every target: they are never in citewise's scrape.
PROMETHEUS_SERIES = frozenset({"up"})

# Grafana's built-in interval variables, as a duration PromQL accepts.
GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
# A query variable's Grafana function (not PromQL): label_values(<selector>, <label>).
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.*),\s*(?P<label>\w+)\s*\)\s*$", re.S)


@dataclass(frozen=True)
class Query:
    where: str  # "panel 3 (Requests by route), target A", "alert CitewiseDown"
    expr: str  # as written in the file
    promql: str  # what Prometheus would receive


def metric_names(promql: str) -> set[str]:
    """Every metric name an expression reads: selectors' names and ``{__name__="..."}``
    matchers. A ``ValueError`` from the parser says where an expression is not PromQL."""
    names: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__" and matcher.op == promql_parser.MatchOp.Equal:
                    names.add(matcher.value)

    promql_parser.walk(promql_parser.parse(promql), visit)
    return names


def substitute(expr: str, variables: set[str]) -> str:
    """A dashboard expression as Prometheus receives it: Grafana's interval variables become
    durations and the dashboard's own variables ``.*`` (every one is used in a ``=~`` matcher).
    A variable that is neither is a ``KeyError`` naming it."""

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name in GRAFANA_INTERVALS:
            return GRAFANA_INTERVALS[name]
        if name in variables:
            return ".*"
        raise KeyError(f"{name!r} is neither a variable of the dashboard ({sorted(variables)}) "
                       f"nor one of Grafana's intervals ({sorted(GRAFANA_INTERVALS)})")

    return _VARIABLE.sub(value, expr)


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def load_rules() -> dict:
    return yaml.safe_load(RULES.read_text())


def dashboard_variables(dashboard: dict) -> set[str]:
    return {v["name"] for v in dashboard["templating"]["list"]}


def panels(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows included (a collapsed row carries its own)."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def dashboard_queries(dashboard: dict) -> list[Query]:
    variables = dashboard_variables(dashboard)
    queries = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            queries.append(Query(f"panel {panel['id']} ({panel['title']}), target "
                                 f"{target['refId']}", target["expr"],
                                 substitute(target["expr"], variables)))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        text = variable["query"]["query"]
        found = _LABEL_VALUES.match(text)
        assert found, f"variable {variable['name']}: expected label_values(selector, label)"
        queries.append(Query(f"variable {variable['name']}", text,
                             substitute(found["selector"], variables)))
    return queries


def rule_queries(rules: dict) -> list[Query]:
    return [Query(f"{'alert ' + rule['alert'] if 'alert' in rule else 'record ' + rule['record']}",
                  rule["expr"], rule["expr"])
            for group in rules["groups"] for rule in group["rules"]]
