"""`citewise tune`'s parts: pairs mined from a catalog the real pipeline wrote, the leakage guard
against every golden set, and a few steps of training whose model citewise's own encoder loads.

* A small corpus (runbooks with front matter, an alert runbook, links between pages, a git
  repository of code) is ingested through the real pipeline; every kind of pair comes out of
  its catalog, each tied to the right passage, without its anchor's words.
* A page that asks a golden-set question (read from the golden files, never written here) is
  dropped by the guard; no kept pair shares six words in a row with any golden question,
  checked by a plain implementation of its own here.
* The shared corpora (when /work/shared is present) are ingested through the pipeline with a
  stand-in embeddings endpoint (vectors do not matter to mining) and their pairs checked the
  same way.
* Training: a few steps with validation, the best state kept, seeded runs equal, the saved
  folder loaded by ``DenseEncoder``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from citewise.api.composition import build_blobs, build_services
from citewise.api.settings import Settings
from citewise.index.dense import DenseEncoder, packaged_model_path
from citewise.ingest.jobs import run_source
from citewise.ingest.tuning.leakage import LeakageGuard, questions_in
from citewise.ingest.tuning.pairs import Pair, PairMiner, select
from citewise.ingest.tuning.train import QuestionCheck, TuneOptions, save, tune
from citewise.settings import SourceConfig
from tests.conftest import SHARED

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = [ROOT / "bench/golden/shared-corpora.jsonl", ROOT / "bench/golden/paraphrases.jsonl",
          ROOT / "bench/golden/blind.jsonl", ROOT / "bench/golden/dev.jsonl",
          ROOT / "bench/golden/dev2.jsonl",
          ROOT / "demo/golden-set.jsonl",
          ROOT / "demo/followups.jsonl"]


def golden_questions() -> list[str]:
    return [q for path in GOLDEN if path.exists() for q in questions_in(path)]


def planted_question() -> str:
    """A demo golden-set question, read from its file: the page below asks it word for word."""
    return questions_in(ROOT / "demo/golden-set.jsonl")[0]


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def write_corpus(root: Path) -> None:
    write(root, "docs/runbooks/payments-queue-backlog.md", """
        ---
        title: PaymentsQueueBacklog
        service: payments-worker
        summary: What to do when captures pile up faster than the workers drain them.
        alerts: [PaymentsQueueBacklog]
        ---
        # PaymentsQueueBacklog

        ## Meaning

        The capture queue in Rabbit holds more than five thousand messages for ten minutes.
        Card captures are late, and customers see pending charges for longer than usual.

        ## Mitigation

        1. Scale the capture workers to twelve replicas with the deploy tool.
        2. Pause the nightly reconciliation job so it stops competing for the ledger locks.
        3. Watch the queue depth panel until it falls under five hundred messages.

        ## Related

        - [Ledger replica lag](ledger-replica-lag.md)
        """)
    write(root, "docs/runbooks/ledger-replica-lag.md", """
        ---
        title: Ledger replica lag
        service: ledger-db
        ---
        # Ledger replica lag

        **Table of Contents**  *generated with [DocToc](https://github.com/thlorenz/doctoc)*

        - [Checking the lag](#checking-the-lag)
        - [When captures are also late](#when-captures-are-also-late)

        The reporting replica of the ledger database falls behind its primary when long
        analytical queries hold back the replay of the write-ahead log.

        ## Checking the lag

        Run the lag query on the replica and compare the replay position with the primary's
        current position; more than sixty seconds behind pages the database team.

        ## When captures are also late

        Late captures make the lag worse, so [drain the capture queue first](
        payments-queue-backlog.md#mitigation), then cancel the longest analytical query.
        """)
    write(root, "docs/wiki/on-call.md", f"""
        # On-call handbook for the payments team

        New to the rotation? Start with the [capture backlog runbook](
        ../runbooks/payments-queue-backlog.md) and the paging policy below (its file is
        [payments-queue-backlog.md](../runbooks/payments-queue-backlog.md)).

        ## Paging policy

        Page the secondary after fifteen minutes without an acknowledgement, and the
        engineering manager after thirty; weekends follow the same clock.

        ## {planted_question()}

        Somebody pasted an evaluation question here as a heading; it must not be trained on,
        whatever this paragraph says about the capture workers and the ledger locks.
        """)


def write_code(root: Path) -> None:
    write(root, "payments/retry.py", '''
        """Retrying failed card captures."""


        def backoff_delay(attempt: int, base: float = 2.0) -> float:
            """Seconds to wait before retrying a failed capture. Doubles each attempt and
            stops growing after the sixth."""
            return base ** min(attempt, 6)
        ''')
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "code"]):
        subprocess.run(["git", *args], cwd=root, check=True)


@pytest.fixture(scope="module")
def catalog_with_corpus(tmp_path_factory):
    """The corpus ingested through the real pipeline: its settings and services (open)."""
    root = tmp_path_factory.mktemp("tune")
    write_corpus(root / "kb")
    write_code(root / "repo")
    settings = Settings(data_dir=root / "data")
    services = build_services(settings)
    for source in (SourceConfig(name="kb", type="folder", path=str(root / "kb"),
                                readers=["public"]),
                   SourceConfig(name="code", type="git", path=str(root / "repo"),
                                readers=["public"])):
        report = run_source(services.pipeline, source, trigger="test")
        assert report.status == "succeeded", report.summary()
    yield settings, services
    services.close()


def mined_pairs(settings, services) -> list[Pair]:
    return list(PairMiner(services.catalog, build_blobs(settings)).mine())


def grams(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def assert_no_leak(pairs: list[Pair], questions: list[str]) -> None:
    """Checked here without the guard's code: six words in a row, or a whole short question."""
    long_grams = set().union(*(grams(q) for q in questions))
    short = [" ".join(re.findall(r"[a-z0-9]+", q.lower())) for q in questions
             if len(re.findall(r"[a-z0-9]+", q)) < 6]
    for p in pairs:
        for text in (p.anchor, p.positive):
            assert not grams(text) & long_grams, (p.kind, p.anchor)
            flat = " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "
            assert not any(f" {q} " in flat for q in short if q), (p.kind, p.anchor)


def test_every_kind_of_pair_comes_from_the_catalog(catalog_with_corpus):
    settings, services = catalog_with_corpus
    pairs = mined_pairs(settings, services)
    by_anchor = {(p.kind, p.anchor): p for p in pairs}
    assert {p.kind for p in pairs} >= {"title", "heading", "alert", "link", "summary",
                                        "service", "code"}

    meaning = by_anchor[("alert", "PaymentsQueueBacklog")]
    assert "five thousand messages" in meaning.positive
    mitigation = by_anchor[("alert", "PaymentsQueueBacklog mitigation")]
    assert "twelve replicas" in mitigation.positive and "Meaning" not in mitigation.positive

    # A link's text -> the section its fragment names, in another document.
    link = by_anchor[("link", "drain the capture queue first")]
    assert "twelve replicas" in link.positive
    assert link.path.endswith("payments-queue-backlog.md")  # the passage's document
    assert by_anchor[("link", "capture backlog runbook")].positive.startswith("## Meaning") \
        is False  # the body's text, not its Markdown
    assert "five thousand" in by_anchor[("link", "capture backlog runbook")].positive

    heading = by_anchor[("heading", "Ledger replica lag > Checking the lag")]
    assert "replay position" in heading.positive and "Checking the lag" not in heading.positive
    # The body starts after its table of contents; a file name is no link text to learn.
    title = by_anchor[("title", "Ledger replica lag")]
    assert title.positive.startswith("The reporting replica")
    assert not [p for p in pairs if p.kind == "link" and p.anchor.endswith(".md")]
    assert "Ledger replica lag" not in title.positive
    assert "five thousand" in by_anchor[
        ("summary", "What to do when captures pile up faster than the workers drain them.")
    ].positive
    assert by_anchor[("service", "ledger-db")].path.endswith("ledger-replica-lag.md")

    code = next(p for p in pairs if p.kind == "code")
    assert code.anchor == "backoff_delay: Seconds to wait before retrying a failed capture."
    assert "def backoff_delay" in code.positive and "Seconds to wait" not in code.positive
    # The related-links section teaches nothing about its heading.
    assert ("heading", "PaymentsQueueBacklog > Related") not in by_anchor


def test_the_guard_drops_golden_questions_and_the_split_is_by_document(catalog_with_corpus):
    settings, services = catalog_with_corpus
    questions = golden_questions()
    assert len(questions) > 100  # the golden sets were found and read
    pairs = mined_pairs(settings, services)
    planted = [p for p in pairs if planted_question().lower().rstrip("?") in p.anchor.lower()]
    assert planted, "the page asking a golden question gave no pair: nothing was tested"

    guard = LeakageGuard(questions)
    mined = select(pairs, guard, per_document=3, validation_share=0.5, seed=1)
    kept = mined.train + mined.validation
    assert mined.summary()["dropped_for_leakage_total"] >= len(planted)
    assert_no_leak(kept, questions)
    # The cap holds per document, and no document is on both sides of the split.
    per_doc: dict[str, int] = {}
    for p in kept:
        per_doc[p.document_id] = per_doc.get(p.document_id, 0) + 1
    assert max(per_doc.values()) <= 3 and mined.dropped_cap > 0
    assert mined.train and mined.validation
    assert not {p.document_id for p in mined.train} & {p.document_id for p in mined.validation}
    # Seeded: the same pairs in, the same split out.
    again = select(pairs, LeakageGuard(questions), per_document=3, validation_share=0.5, seed=1)
    assert [p.anchor for p in again.train] == [p.anchor for p in mined.train]


def test_the_guard_reads_questions_paraphrases_and_turns(tmp_path):
    golden = tmp_path / "g.jsonl"
    golden.write_text(json.dumps({"question": "Where is the ledger replica lag dashboard?"})
                      + "\n" + json.dumps({"turns": ["who holds the pager", "and after that"]})
                      + "\n" + json.dumps({"question": "q", "paraphrase": "How do I page the "
                                           "payments secondary at night?"}) + "\n")
    guard = LeakageGuard(questions_in(golden))
    assert guard.reason("where is the Ledger replica lag dashboard", "x") == \
        "anchor is a golden question"
    assert guard.reason("Pager", "so tell me: who holds the pager today") == \
        "passage holds a golden question"
    assert guard.reason("Paging", "how do I page the payments secondary at noon") == \
        "passage shares 6 words with a golden question"
    assert guard.reason("Ledger replica lag", "The replica of the ledger falls behind.") is None


@pytest.mark.skipif(not (SHARED / "corpora").is_dir(),
                    reason="the shared corpora (../shared/corpora) are absent")
def test_pairs_mined_from_the_shared_corpora_hold_no_golden_question(tmp_path):
    from tests.fakes.openai_provider import OpenAIProvider

    endpoint = OpenAIProvider(model="hash").start()
    # Mining reads text only: vectors from a hash keep ingesting the corpora quick.
    endpoint.embedder = lambda texts: [
        np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) / 255 + 0.01
        for t in texts]
    settings = Settings(data_dir=tmp_path / "data", embedding_url=endpoint.base_url,
                        embedding_model="hash", embedding_dim=16, embedding_batch_size=256)
    services = build_services(settings)
    try:
        for name in ("gitlab-com-runbooks", "openshift-runbooks", "prometheus-operator-runbooks"):
            source = SourceConfig(name=name, type="folder", path=str(SHARED / "corpora" / name),
                                  readers=["public"], include=["*.md"])
            report = run_source(services.pipeline, source, trigger="test")
            # A few files of the corpora are refused (too large, not text): "partial".
            assert report.status in ("succeeded", "partial"), report.summary()
            print(f"\n{name}: {report.summary()}")
        pairs = mined_pairs(settings, services)
        questions = golden_questions()
        mined = select(pairs, LeakageGuard(questions))
    finally:
        services.close()
        endpoint.stop()
    kept = mined.train + mined.validation
    print(f"\nshared corpora: {mined.summary()}")
    assert len(kept) > 1000 and {p.kind for p in kept} >= {"title", "heading", "alert", "link"}
    assert_no_leak(kept, questions)


# Training ---------------------------------------------------------------------------------------

def small_pairs(settings, services) -> tuple[list[Pair], list[Pair]]:
    mined = select(mined_pairs(settings, services), LeakageGuard(golden_questions()),
                   validation_share=0.34, seed=3)
    return mined.train, mined.validation


def test_a_few_steps_validate_keep_the_best_and_load_through_the_encoder(
        catalog_with_corpus, tmp_path):
    from sentence_transformers import SentenceTransformer

    settings, services = catalog_with_corpus
    train, validation = small_pairs(settings, services)
    assert len(validation) >= 2
    model = SentenceTransformer(str(packaged_model_path()), device="cpu")
    options = TuneOptions(minutes=3, max_steps=4, batch_size=4, max_seq_length=64,
                          eval_every=2, patience=5, warmup_steps=2, learning_rate=1e-4, seed=5)
    result = tune(model, train, validation, options)
    assert result.steps == 4 and result.stopped == "step budget"
    assert [v.step for v in result.history] == [0, 2, 4]
    assert result.before is not None and result.best is not None
    assert 0 < result.before.mrr <= 1 and result.best.mrr >= result.before.mrr
    # Four batches of at most four (an epoch's last batch may be smaller).
    assert 8 <= result.pairs_trained <= 16 and result.peak_rss_mb > 100
    assert model.max_seq_length == 256  # the model keeps its own length for use

    out = tmp_path / "tuned-test"
    save(model, out)
    assert not out.with_name("tuned-test.partial").exists()
    encoder = DenseEncoder(out)
    assert encoder.model_id == "tuned-test" and encoder.dim == 384
    vector = np.asarray(encoder.embed_query("the capture queue is backing up"))
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-4
    assert encoder.count_tokens("capture queue") > 0  # its tokenizer file is there
    base = np.asarray(DenseEncoder().embed_query("the capture queue is backing up"))
    changed = not np.allclose(vector, base, atol=1e-6)
    assert changed == (result.best.step > 0)  # a kept step 0 is the model as it came


def test_training_is_seeded(catalog_with_corpus):
    from sentence_transformers import SentenceTransformer

    settings, services = catalog_with_corpus
    train, _ = small_pairs(settings, services)
    weights = []
    for _ in range(2):
        model = SentenceTransformer(str(packaged_model_path()), device="cpu")
        tune(model, train, [], TuneOptions(max_steps=2, batch_size=4, max_seq_length=32,
                                           warmup_steps=1, learning_rate=1e-4, seed=9,
                                           threads=1))
        weights.append(next(iter(model.parameters())).detach().clone())
    assert np.array_equal(weights[0].numpy(), weights[1].numpy())
    assert not np.array_equal(
        weights[0].numpy(),
        next(iter(SentenceTransformer(str(packaged_model_path()),
                                      device="cpu").parameters())).detach().numpy())


def test_alert_names_are_told_from_product_names():
    from citewise.ingest.tuning.pairs import alert_names

    assert alert_names("Alert: KubeAPIDown fires") == ["KubeAPIDown"]
    assert alert_names("etcdHighNumberOfFailedGRPCRequests") == [
        "etcdHighNumberOfFailedGRPCRequests"]
    assert alert_names("NodeFilesystemSpaceFillingUp") == ["NodeFilesystemSpaceFillingUp"]
    for product in ("PostgreSQL failover", "JavaScript bundles", "OpenShift", "PagerDuty",
                    "HAProxy"):
        assert alert_names(product) == [], product


def test_questions_validate_by_where_their_relevant_passage_ranks(dense):
    """A question check ranks each question's own candidates by the model's cosine and asks
    where the first relevant one lands: first counts to recall@1, second 1/2 to the MRR."""
    check = QuestionCheck(
        questions=["how do I restart the redis server", "what is on the cafeteria menu"],
        passages=["Restart redis with systemctl restart redis-server, then check INFO.",
                  "Tuesday's cafeteria menu: lentil soup, bread and apples.",
                  "Rotate the payment provider keys every ninety days."],
        pools=[[1, 0], [2, 1]],
        # The second question's labelled passage is the payment one: the menu outranks it.
        relevant=[{0}, {2}])
    v = check.validate(dense.model, step=7)
    assert v is not None and v.step == 7 and v.of == "questions" and v.pairs == 2
    assert v.recall_at_1 == 0.5 and v.recall_at_10 == 1.0
    assert v.mrr == pytest.approx(0.75)
    assert "(2 questions)" in v.line()
    assert QuestionCheck([], [], [], []).validate(dense.model, step=0) is None
    with pytest.raises(ValueError, match="no relevant passage"):
        QuestionCheck(["q"], ["a passage"], [[0]], [set()])
