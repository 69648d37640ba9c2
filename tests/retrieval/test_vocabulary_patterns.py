"""What the vocabulary miner reads as two names for one thing, sentence by sentence, and what it
must not: a wrong synonym is noise in every question that uses its word."""

from __future__ import annotations

import pytest

from citewise.retrieval.vocabulary_patterns import (
    in_definition,
    in_front_matter,
    in_sentence,
    in_table,
    spells,
)


def pairs(found) -> list[tuple[tuple[str, str], str]]:
    return [(f.terms, f.kind) for f in found]


@pytest.mark.parametrize(("sentence", "expected"), [
    ("The incident commander (IC) leads the response.",
     [(("IC", "incident commander"), "acronym")]),
    ("Page the IC (incident commander) before anyone else.",
     [(("IC", "incident commander"), "acronym")]),
    ("Keep one Single Source of Truth (SSOT) per service.",
     [(("SSOT", "Single Source of Truth"), "acronym")]),
    ("Alerts go to PagerDuty (PD) first.", [(("PD", "PagerDuty"), "acronym")]),
    ("Point-in-time recovery (PITR) needs the WAL archive.",
     [(("PITR", "Point-in-time recovery"), "acronym")]),
    ("The GitLab Kubernetes Agent Server (`kas`) runs in the cluster.",
     [(("kas", "Kubernetes Agent Server"), "acronym")]),
    ("List the open pull requests (PRs) first.", [(("PRs", "pull requests"), "acronym")]),
    ("GitLab.com (also called dotcom) is the main site.", [(("dotcom", "GitLab.com"), "alias")]),
    ("Sourcegraph Cloud (a.k.a. managed instance) customers get executors.",
     [(("managed instance", "Sourcegraph Cloud"), "alias")]),
    ("The draft stack, also known as Draft Origin, serves previews.",
     [(("Draft Origin", "draft stack"), "alias")]),
    ("Continuous data protection (aka CDP or wal shipping) is on.",
     [(("CDP", "Continuous data protection"), "alias"),
      (("wal shipping", "Continuous data protection"), "alias")]),
])
def test_definitions_in_running_text_are_found(sentence, expected):
    assert pairs(in_sentence(sentence)) == expected


@pytest.mark.parametrize("sentence", [
    "Run the migration again (see below).",
    "Set the retention flag (optional) when the disk is small.",
    "The runbook was written in (2019) after the outage.",
    "Languages with standard builds (e.g. Ruby and Rust) index well.",
    "Check the database (PG) before failing over.",  # initials that do not spell it
    "The primary (DB) is in another zone.",
    "Information Technology (IT) owns the laptops.",  # an acronym that is a stop word
    "Tell the other team (aka it impacts their work) early.",  # a clause, not a name
    "Severity 2 issues under our SLAs (aka, minor issues) go elsewhere.",
    "Week one starts on day 7 (aka Week 1) for new users.",  # a number, not a name
    "Job levels, also known as job grades and classifications, define roles.",  # two names?
    "Sometimes also referred to as precise code intelligence, which is newer.",  # no name
    "Scaling Prometheus (Thanos) is described elsewhere.",  # one capital: a name, not acronym
])
def test_asides_that_define_nothing_are_not_mined(sentence):
    assert in_sentence(sentence) == []


def test_an_acronym_expanded_in_a_heading_is_a_heading_entry():
    assert pairs(in_sentence("Incident Manager On Call (IMOC)", heading=True)) == [
        (("IMOC", "Incident Manager On Call"), "heading")]
    assert pairs(in_sentence("PD (PagerDuty) escalation", heading=True)) == [
        (("PD", "PagerDuty"), "heading")]


def test_a_code_name_in_backticks_is_only_a_candidate():
    """The miner keeps it only beside a service's name, seen together in several documents."""
    assert pairs(in_sentence("Deploy to staging (`gstg`) before production.")) == [
        (("gstg", "staging"), "code_name")]
    assert in_sentence("Deploy to staging (gstg) before production.") == []


def test_definition_items_and_tables():
    assert pairs(in_definition("SRE: Site Reliability Engineering, the team on call")) == [
        (("SRE", "Site Reliability Engineering"), "glossary")]
    assert pairs(in_definition('Sourcegraph.com / "dotcom": the public instance')) == [
        (("dotcom", "Sourcegraph.com"), "glossary")]
    assert pairs(in_definition("QPS - Queries per second.")) == [
        (("QPS", "Queries per second"), "glossary")]
    # A term described, not renamed; a link is no name.
    assert in_definition("Sourcegraph: Main product. Always preferred.") == []
    assert in_definition("Owner: Infrastructure team") == []
    assert in_definition("terraform: https://ops.example.com/infra where the code is") == []
    table = in_table(["Term", "Meaning"], [["EOC", "Engineer On Call"],
                                           ["dotcom", "GitLab.com"],
                                           ["toil", "Repetitive manual work that scales"]])
    assert pairs(table) == [(("EOC", "Engineer On Call"), "glossary"),
                            (("dotcom", "GitLab.com"), "glossary")]
    # Without a Term header, only an acronym its meaning spells.
    table = in_table(["Service", "Description"], [["redis", "Cache"], ["CDN", "content delivery "
                                                                       "network in front"]])
    assert pairs(table) == [(("CDN", "content delivery network"), "glossary")]


def test_front_matter_aliases_and_a_tag_the_title_spells():
    assert pairs(in_front_matter("Patroni", {"aliases": ["/old/url/", "postgres-ha"]}, [])) == [
        (("postgres-ha", "Patroni"), "front_matter")]
    assert pairs(in_front_matter("Incident Manager On Call", {}, ["imoc", "incidents"])) == [
        (("imoc", "Incident Manager On Call"), "front_matter")]
    assert in_front_matter("Redis cache failover", {}, ["redis", "failover"]) == []


def test_initials_spell_an_acronym_only_in_order_and_whole():
    assert spells("ssot", ["Single", "Source", "of", "Truth"])
    assert spells("dod", ["Definition", "of", "Done"])
    assert spells("pd", ["PagerDuty"])
    assert spells("oc", ["on-call"])
    assert not spells("pg", ["database"])
    assert not spells("ic", ["commander", "incident"])
    assert not spells("ic", ["the", "incident", "commander"])
