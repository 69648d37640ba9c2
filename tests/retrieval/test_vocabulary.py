"""The vocabulary mined from an installation's own documents: mined from the catalog of a real
ingest, written to a reviewable file by `citewise vocabulary mine`, vetoed for good, and applied
to real searches (the real model and index) beside the hand-written synonyms, which win."""

from __future__ import annotations

import logging
import os
import stat
import tomllib

import pytest
from click.testing import CliRunner

from citewise.api.cli import cli
from citewise.errors import ConfigError
from citewise.index.catalog import DocumentRecord
from citewise.index.outline import Block, Outline, Section
from citewise.ingest.jobs import run_source
from citewise.retrieval.synonyms import Synonyms
from citewise.retrieval.vocabulary import Entry, Vocabulary
from citewise.retrieval.vocabulary_mining import mine, mine_documents
from citewise.types import Identity
from tests.kb import folder_source, write

ANON = Identity.anonymous()

# The glossary that defines the organisation's words is for staff only, so that a question in
# those words cannot simply find the glossary: it has to find the runbook through the mined
# vocabulary (mining reads every document; search shows each caller only what they may read).
CORPUS = {
    "sites/about.md": """
        ---
        readers: [group:staff]
        ---
        # About our sites

        GitLab.com (also called dotcom) is the site our customers sign in to. The incident
        commander (IC) runs every incident call. Deploy to staging (`gstg`) first.

        - SRE: Site Reliability Engineering, the team that holds the pager.
        - Owner: the infrastructure team

        | Term | Meaning |
        | --- | --- |
        | wh | Whitehall |

        Run the migration again (see below). Set the retention flag (optional). Written in
        (2019). Check the database (DB) before failing over. Ask the team (aka it is urgent).
        """,
    "runbooks/web-502.md": """
        # GitLab.com returns 502 errors

        When GitLab.com returns 502 errors, the workhorse processes on the web fleet are
        saturated. Restart workhorse on each web node, one at a time, and watch the error
        ratio fall.
        """,
    "runbooks/staging-502.md": """
        # Staging returns 502 errors

        When staging returns 502 errors, the staging proxy has lost its upstreams. Restart the
        staging proxy and check its upstream list.
        """,
    "runbooks/imoc.md": """
        ---
        tags: [imoc]
        ---
        # Incident Manager On Call

        Page the incident manager through the escalation policy for every severity 1 incident.
        """,
}


@pytest.fixture
def installation(tmp_path, make_services):
    for rel, text in CORPUS.items():
        write(tmp_path / "kb", rel, text)
    data = tmp_path / "data"
    services = make_services(data)
    assert run_source(services.pipeline, folder_source(tmp_path / "kb"),
                      trigger="test").status == "succeeded"
    return services, data


def invoke(*args):
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    env = {k: None for k in os.environ if k.startswith("CITEWISE_")}
    try:
        return CliRunner().invoke(cli, [str(a) for a in args], env=env)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_mining_reads_the_catalog_and_keeps_only_definitions(installation):
    services, _ = installation
    mined = mine(services.catalog)
    found = {tuple(e.terms): e for e in mined.entries}
    assert set(found) == {("dotcom", "GitLab.com"), ("IC", "incident commander"),
                          ("SRE", "Site Reliability Engineering"), ("wh", "Whitehall"),
                          ("imoc", "Incident Manager On Call")}
    dotcom = found[("dotcom", "GitLab.com")]
    assert (dotcom.kind, dotcom.source, dotcom.count) == ("alias", "kb:sites/about.md", 1)
    assert dotcom.sentence == ("GitLab.com (also called dotcom) is the site our customers "
                               "sign in to.")
    assert found[("IC", "incident commander")].kind == "acronym"
    assert found[("SRE", "Site Reliability Engineering")].kind == "glossary"
    assert found[("wh", "Whitehall")].kind == "glossary"
    assert found[("imoc", "Incident Manager On Call")].kind == "front_matter"
    # A code name beside no service's name is a candidate the rules drop, and say so.
    assert [(r, e.terms) for r, e in mined.rejected] == [
        ("code name of no service", ["gstg", "staging"])]
    # Mining only what the public may read quotes nothing of the staff-only glossary.
    public = mine(services.catalog, principals=["public"])
    assert {tuple(e.terms) for e in public.entries} == {("imoc", "Incident Manager On Call")}


def test_an_alias_finds_the_document_that_only_uses_the_long_form(installation,
                                                                   make_services):
    """Through the real search service: without the vocabulary "dotcom" is in no document the
    caller may read, and the other 502 runbook wins; with it, the GitLab.com one does."""
    services, data = installation
    question = "dotcom is throwing 502s"
    before = [h.path for h in services.search.search(question, ANON, top_k=3)]
    assert before[0] == "runbooks/staging-502.md"
    mine(services.catalog).vocabulary().save(data / "vocabulary.toml")
    services.close()
    again = make_services(data)  # the file is read at start
    after = [h.path for h in again.search.search(question, ANON, top_k=3)]
    assert after[0] == "runbooks/web-502.md"
    assert again.search.synonyms.additions(question) == ["gitlab.com"]
    # A phrase of the question finds its acronym too.
    assert again.search.synonyms.additions("who is the incident commander") == ["ic"]


def test_the_hand_list_wins_where_both_know_a_word():
    synonyms = Synonyms(mined=[("pg", "page"), ("pd", "pagerduty"), ("ic", "incident commander")])
    assert synonyms.additions("pg is down") == ["postgres", "postgresql"]
    assert synonyms.additions("page the team") == []  # no mined "pg" for "page"
    assert synonyms.additions("pd alert") == []  # "pagerduty" is the hand list's word
    assert synonyms.additions("who is the ic") == ["incident commander"]
    assert synonyms.mined == 1
    # "ic" is a whole word of the question, not part of one.
    assert synonyms.additions("a topic for the incident commander") == ["ic"]


def test_mine_show_and_a_veto_that_survives_mining_again(installation):
    services, data = installation
    services.close()
    mined = invoke("--data-dir", data, "vocabulary", "mine")
    assert mined.exit_code == 0, mined.output
    assert "mined 4 documents: 5 entries" in mined.output
    assert "1 code name of no service" in mined.output
    path = data / "vocabulary.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    listing = invoke("--data-dir", data, "vocabulary", "show")
    assert "dotcom = GitLab.com  [alias, 1x]" in listing.output
    assert "kb:sites/about.md: GitLab.com (also called dotcom) is the site" in listing.output

    vetoed = invoke("--data-dir", data, "vocabulary", "veto", "Dotcom")
    assert vetoed.exit_code == 0, vetoed.output
    assert "1 entries taken out" in vetoed.output
    pair = invoke("--data-dir", data, "vocabulary", "veto", "ic", "incident commander")
    assert pair.exit_code == 0, pair.output

    again = invoke("--data-dir", data, "vocabulary", "mine")
    assert again.exit_code == 0, again.output
    assert "2 found again and left out by your vetoes" in again.output
    data_file = tomllib.loads(path.read_text())
    assert data_file["vetoed"] == ["dotcom"]
    assert data_file["vetoed_pairs"] == [["ic", "incident commander"]]
    terms = [e["terms"] for e in data_file["entry"]]
    assert ["dotcom", "GitLab.com"] not in terms and ["IC", "incident commander"] not in terms
    assert ["SRE", "Site Reliability Engineering"] in terms
    shown = invoke("--data-dir", data, "vocabulary", "show").output
    assert "dotcom" not in shown.split("vetoed:")[0]
    assert "vetoed: dotcom, ic + incident commander" in shown

    lifted = invoke("--data-dir", data, "vocabulary", "veto", "--lift", "dotcom")
    assert lifted.exit_code == 0, lifted.output
    assert invoke("--data-dir", data, "vocabulary", "mine").exit_code == 0
    assert ["dotcom", "GitLab.com"] in [e["terms"] for e in
                                        tomllib.loads(path.read_text())["entry"]]


def test_no_file_no_mined_vocabulary_and_a_broken_file_says_what_to_do(tmp_path):
    assert Vocabulary.load(tmp_path / "vocabulary.toml") is None
    bad = tmp_path / "bad.toml"
    bad.write_text("[[entry]]\nterms = [\"only\"]\nkind = \"alias\"\ncount = 1\n"
                   "source = \"s:x\"\nsentence = \"x\"\n")
    with pytest.raises(ConfigError, match="has an entry that is not one.*fewer than two"):
        Vocabulary.load(bad)
    bad.write_text("vetoed = [\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        Vocabulary.load(bad)


def test_the_file_round_trips_text_that_needs_escaping(tmp_path):
    entry = Entry(terms=["Women’s Health Act", "WHA"], kind="acronym", source="kb:a \"b\".md",
                  sentence='He said "hi"\\there\ttab \x7f end', count=3)
    path = tmp_path / "vocabulary.toml"
    Vocabulary(entries=[entry], vetoed=["x"]).save(path)
    assert Vocabulary.load(path).entries == [entry]  # type: ignore[union-attr]


def record(path: str, title: str, service: str | None = None) -> DocumentRecord:
    return DocumentRecord(id=path, source="kb", external_id=path, title=title,
                          media_type="text/markdown", content_hash="", version="",
                          index_signature="", readers=["public"], blob_key="", indexed_at="",
                          path=path, service=service)


def outline(*paragraphs: str) -> Outline:
    return Outline([Section(title="", path="", level=0,
                            blocks=[Block(kind="paragraph", text=p) for p in paragraphs])])


def test_a_code_name_needs_a_service_and_company():
    """"the web fleet (`web-fe`)" is kept once `web-fe` is a runbook's service and the two are
    seen together in three documents; in two, or with no such service, it is not."""
    docs = [(record("web-fe.md", "Web frontend", service="web-fe"),
             outline("The web fleet (`web-fe`) serves every page.")),
            (record("deploy.md", "Deploys"), outline("Drain the web fleet before `web-fe` "
                                                     "restarts.")),
            (record("scale.md", "Scaling"), outline("Scale the web fleet when web-fe is hot."))]
    kept = mine_documents(docs)
    assert [(e.terms, e.kind, e.count) for e in kept.entries] == [
        (["web-fe", "web fleet"], "code_name", 1)]
    assert [r for r, _ in mine_documents(docs[:2]).rejected] == [
        "code name seen together too rarely"]
    docs[0] = (record("web-fe.md", "Web frontend"), docs[0][1])
    assert [r for r, _ in mine_documents(docs).rejected] == ["code name of no service"]
