"""``deploy/prometheus/alerts.yml`` is valid for Prometheus and says what to do: ``promtool check
rules`` accepts it, ``promtool test rules`` runs its unit tests (``alerts_test.yml``: when each
alert must fire and when not), and every rule waits a ``for:``, carries a severity, a summary, a
description and a runbook entry that exists in docs/operations.md. promtool is Debian's
``prometheus`` package (.ci/run installs it); without it those two tests skip and say so, and
the expressions are still parsed by the PromQL parser below."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.deploy.monitoring_queries import ROOT, RULE_TESTS, RULES, load_rules, metric_names

OPERATIONS = ROOT / "docs" / "operations.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found: apt-get install -y --no-install-recommends "
                             "prometheus (.ci/run does) to check the rules with Prometheus itself")


def _alerts() -> list[dict]:
    return [rule for group in load_rules()["groups"] for rule in group["rules"]]


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page."""
    anchors = set()
    for heading in re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@needs_promtool
def test_promtool_accepts_the_rules():
    check = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in check.stdout


@needs_promtool
def test_the_alerts_fire_when_they_should_and_only_then():
    run = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True,
                         text=True, timeout=120, cwd=RULE_TESTS.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_the_unit_tests_cover_the_alerts_that_page_and_the_ingest_ones():
    cases = yaml.safe_load(RULE_TESTS.read_text())
    assert cases["rule_files"] == [RULES.name]
    tested = {check["alertname"] for case in cases["tests"]
              for check in case["alert_rule_test"]}
    # Each is checked both firing and quiet in the file.
    assert {"CitewiseDown", "CitewiseErrorRatioHigh", "CitewiseIngestFailed",
            "CitewiseIngestNotSucceeded", "CitewiseModelProviderBreakerOpen",
            "CitewiseNoModelProvider"} <= tested


def test_every_rule_says_how_long_how_bad_what_and_where_to_read_more():
    anchors = _anchors(OPERATIONS.read_text())
    names = [rule["alert"] for rule in _alerts()]
    assert len(names) == len(set(names))
    for rule in _alerts():
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), f"{name}: a for: duration"
        assert rule["labels"]["severity"] in ("page", "ticket"), name
        notes = rule["annotations"]
        assert notes["summary"] and len(notes["description"]) > 60, name
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/operations.md", name
        assert anchor == name.lower() and anchor in anchors, (
            f"{name}: docs/operations.md has no heading '{name}' for its runbook_url")
        assert metric_names(rule["expr"]), name  # PromQL, whether or not promtool is here


def test_the_rules_cover_what_operations_says_to_act_on():
    names = {rule["alert"] for rule in _alerts()}
    assert {"CitewiseDown", "CitewiseErrorRatioHigh", "CitewiseLatencyHigh",
            "CitewiseIngestFailed", "CitewiseIngestNotSucceeded",
            "CitewiseModelProviderBreakerOpen", "CitewiseAuthRefusalsHigh",
            "CitewiseRateLimited"} <= names
