"""The bundled demo knowledge base, ingested exactly as `make run` does (citewise.toml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from citewise.types import Identity

ROOT = Path(__file__).resolve().parents[2]
ANON = Identity.anonymous()


@pytest.fixture(scope="module")
def demo(demo_kb):
    return demo_kb


def test_demo_runbooks_are_complete():
    runbooks = sorted((ROOT / "demo" / "runbooks").glob("*.md"))
    assert len(runbooks) >= 25
    for path in runbooks:
        meta = yaml.safe_load(re.match(r"---\n(.*?)\n---", path.read_text(), re.S).group(1))
        for key in ("title", "service", "owner", "severity", "alerts"):
            assert meta.get(key), f"{path.name} lacks {key}"
        assert meta["severity"] in ("critical", "high", "medium", "low")
    wiki = [p for p in (ROOT / "demo" / "wiki").iterdir() if p.suffix in (".md", ".html", ".txt")]
    assert len(wiki) >= 12


def test_every_demo_document_ingests(demo):
    _, reports = demo
    assert {r.source for r in reports} == {"runbooks", "wiki", "citewise"}
    for r in reports:
        assert r.status == "succeeded", r.summary()
        assert r.counts.failed == 0 and r.counts.added > 0


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # Phrased without the words of the runbook's title or headings.
        ("Buyers' cards spin forever and then fail at the pay step; how do we move card "
         "traffic to the backup acquirer?", "payments-gateway-provider-timeouts.md"),
        ("Sellers complain that listings they created an hour ago don't show up when buyers "
         "look for them", "search-indexer-lag.md"),
        ("Users say password reset messages take ages to arrive in their inbox",
         "notification-service-queue-backlog.md"),
        ("We sold more units of an item than the seller actually had in the warehouse",
         "inventory-service-stock-drift.md"),
        ("Our containers keep restarting every few minutes and exit with code 137",
         "k8s-pod-crashloopbackoff.md"),
        ("Seller payouts may be a day late because the bank file wasn't sent overnight",
         "settlement-nightly-job-failed.md"),
        # Naming the alert.
        ("What should I do when PgBouncerClientWaitHigh fires?",
         "postgres-main-connection-exhaustion.md"),
        ("We got paged for LedgerDoubleEntryImbalance, what's the first thing to do?",
         "ledger-service-imbalance.md"),
        ("OpenSearchDiskWatermarkHigh is firing on search-prod; how do I free space?",
         "opensearch-cluster-red.md"),
    ],
)
def test_questions_find_their_runbook_and_answer_with_it(demo, question, expected):
    services, _ = demo
    hits = services.search.search(question, ANON, top_k=3)
    assert hits[0].path == expected, [h.path for h in hits]
    answer = services.answers.answer(question, ANON)
    assert not answer.abstained
    assert answer.citations[0].path == expected
    assert re.search(r"\[1\]", answer.answer)


@pytest.mark.parametrize(
    "question",
    ["What is the boiling point of ethanol at sea level?", "Who won the 1998 FIFA World Cup?",
     "How do I make sourdough bread starter from scratch?"],
)
def test_questions_outside_the_knowledge_base_abstain(demo, question):
    answer = demo[0].answers.answer(question, ANON)
    assert answer.abstained and not answer.citations


def test_restricted_runbooks_only_reach_their_group(demo):
    services, _ = demo
    q = "How do I swap in a new Northpay API key without downtime?"
    secret = "payments-provider-api-key-rotation.md"
    for who in (ANON, Identity(user="eve", groups=("sre-oncall", "payments"))):
        assert all(h.path != secret for h in services.search.search(q, who, top_k=50))
        assert all(c.path != secret for c in services.answers.answer(q, who).citations)
    security = Identity(user="sam", groups=("security",))
    assert services.search.search(q, security, top_k=1)[0].path == secret


def test_citewise_docs_answer_questions_about_citewise(demo):
    services, _ = demo
    answer = services.answers.answer(
        "How does citewise keep restricted documents out of search results?", ANON
    )
    assert not answer.abstained
    assert answer.citations[0].source == "citewise"
    assert answer.citations[0].path == "docs/permissions.md"


def test_a_question_about_citewise_code_is_answered_with_its_lines(demo):
    """The demo reads this repository through the git connector: code answers cite lines."""
    services, _ = demo
    question = "Which function refuses an ingest run that would delete most of a source?"
    hit = services.search.search(question, ANON, top_k=1)[0]
    assert (hit.source, hit.path) == ("citewise", "ingest/pipeline.py")
    assert hit.symbol.endswith("def _check_mass_deletion")
    lines = (ROOT / "ingest" / "pipeline.py").read_text().split("\n")
    assert lines[hit.start_line - 1].lstrip().startswith("def _check_mass_deletion(")
    assert "Refuse a run" in "\n".join(lines[hit.start_line - 1 : hit.end_line])
    assert hit.metadata["language"] == "python" and len(hit.metadata["last_commit"]["sha"]) == 40
    answer = services.answers.answer(question, ANON)
    assert not answer.abstained
    assert "Refuse a run" in answer.answer and '"""' not in answer.answer
    cited = answer.citations[0]
    assert (cited.path, cited.start_line, cited.end_line) == (
        "ingest/pipeline.py", hit.start_line, hit.end_line)


def _restricted_and_public_texts() -> tuple[dict[str, str], dict[str, str]]:
    """The demo's restricted documents, and every public document a demo user can read: the
    other demo files, and this repository's docs that the demo indexes through git."""
    import re

    restricted, public = {}, {}
    for path in sorted((ROOT / "demo").glob("*/*")):
        text = path.read_text(encoding="utf-8")
        is_restricted = re.search(r"^readers:", text, re.M) or "citewise-readers" in text
        (restricted if is_restricted else public)[str(path.relative_to(ROOT))] = text
    for path in [ROOT / "README.md", ROOT / "connectors" / "README.md",
                 *sorted((ROOT / "docs").glob("*.md"))]:
        public[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return restricted, public


def test_public_demo_content_quotes_no_restricted_document():
    """A public page that quotes a restricted runbook's steps answers for it (the probe found
    the README doing exactly that). No 8-word run of a restricted file's prose may appear in
    public, in its text or its examples. (A restricted file's command blocks are left out:
    runbooks share `kubectl exec` lines, not secrets.)"""
    import re

    restricted, public = _restricted_and_public_texts()
    assert len(restricted) == 5

    def shingles(text: str, *, prose_only: bool) -> set[str]:
        if prose_only:
            text = re.sub(r"```.*?```", " | ", text, flags=re.S)
        words = re.findall(r"[a-z0-9#@.:/_|-]+", text.replace("`", "").lower())
        runs = (" ".join(words[i:i + 8]) for i in range(len(words) - 7))
        return {r for r in runs if "|" not in r}

    public_runs = {name: shingles(text, prose_only=False) for name, text in public.items()}
    for name, text in restricted.items():
        body = text.split("---", 2)[-1]  # not the front matter (titles are shared on purpose)
        secret = shingles(body, prose_only=True)
        for other, runs in public_runs.items():
            shared = secret & runs
            assert not shared, f"{other} quotes the restricted {name}: {sorted(shared)[:3]}"
