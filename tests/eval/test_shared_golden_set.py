"""The shared-corpora golden set is what it says it is.

``bench/golden/shared-corpora.jsonl`` holds on-call questions over the five openly licensed
corpora of ``../shared/corpora`` (``make eval`` scores it; CI does not, the corpora take
minutes to ingest). Its figures only mean something if the set is honest: every key fact an
answer must carry really is in a relevant document, the near misses really are not answered
by the corpora's words, and the thresholds can be tuned on one half and measured on the other.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from citewise.api.evaluation.qa import load_golden_set
from tests.conftest import SHARED

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "bench" / "golden" / "shared-corpora.jsonl"
CORPORA = SHARED / "corpora"


def _text(key: str) -> str:
    return (CORPORA / key).read_text(encoding="utf-8")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).lower()


def test_the_set_has_the_shape_the_measure_needs():
    questions = load_golden_set(GOLDEN)
    answerable = [q for q in questions if q.answerable]
    assert len(answerable) >= 60
    assert len(questions) - len(answerable) >= 4
    for split in ("tune", "test"):
        part = [q for q in questions if q.split == split]
        assert any(not q.answerable for q in part), f"the {split} split has no near miss"
        assert len(part) * 3 >= len(questions), f"the {split} split is too small"
    assert all(q.must_contain_any for q in answerable), "every answerable question needs a key fact"
    assert {q.kind for q in answerable} >= {"action", "alert", "fact", "definition"}


def test_every_key_fact_is_in_a_relevant_document():
    if not CORPORA.is_dir():
        pytest.skip(f"{CORPORA} is absent: the shared corpora are not on this machine")
    missing = []
    for q in load_golden_set(GOLDEN):
        if not q.answerable:
            continue
        for key in q.relevant:
            assert (CORPORA / key).is_file(), f"{key} does not exist"
        texts = [_squash(_text(key)) for key in q.relevant]
        if not any(_squash(fact) in text for fact in q.must_contain_any for text in texts):
            missing.append((q.question, q.must_contain_any))
    assert not missing, missing


def test_near_misses_name_something_the_corpora_never_mention():
    """A near miss is about another product: its name appears in no corpus document."""
    if not CORPORA.is_dir():
        pytest.skip(f"{CORPORA} is absent: the shared corpora are not on this machine")
    names = {"vitess", "victorops", "clickhousereplicaslagging", "dynatrace", "spinnaker",
             "launchdarkly"}
    questions = [q for q in load_golden_set(GOLDEN) if not q.answerable]
    asked = {n for q in questions for n in names if n in q.question.lower()}
    assert asked == names, "update the list of near-miss names with the set"
    found = set()
    for path in CORPORA.rglob("*.md"):
        low = path.read_text(encoding="utf-8", errors="replace").lower()
        found |= {n for n in names if n in low}
    assert not found, f"the corpora do mention {sorted(found)}: not a near miss"


BLIND = ROOT / "bench" / "golden" / "blind.jsonl"


def test_the_blind_set_loads_and_its_key_facts_are_in_its_documents():
    """``blind.jsonl`` (written from the documents alone, frozen, reported apart) is honest
    the same way, and shares no question with the set we tuned on."""
    blind = load_golden_set(BLIND)
    answerable = [q for q in blind if q.answerable]
    assert len(answerable) >= 60 and len(blind) - len(answerable) >= 4
    assert {q.split for q in blind} == {"blind"}
    assert all(q.must_contain_any and q.relevant for q in answerable)
    assert not [q for q in blind if not q.answerable and (q.relevant or q.must_contain_any)]
    tuned_on = {_squash(q.question) for q in load_golden_set(GOLDEN)}
    assert not [q.question for q in blind if _squash(q.question) in tuned_on]
    if not CORPORA.is_dir():
        pytest.skip(f"{CORPORA} is absent: the shared corpora are not on this machine")
    missing = []
    for q in answerable:
        texts = [_squash(_text(key)) for key in q.relevant]
        if not any(_squash(fact) in text for fact in q.must_contain_any for text in texts):
            missing.append((q.question, q.must_contain_any))
    assert not missing, missing


DEV = ROOT / "bench" / "golden" / "dev.jsonl"
DEV2 = ROOT / "bench" / "golden" / "dev2.jsonl"
# What the dev set's near misses are about: each appears in no corpus document.
DEV_NEAR_MISS_NAMES = ("KubeletEvictionThresholdBreached", "PrometheusRemoteWriteQueueStalled",
                       "CephRGWBucketIndexOversized", "AlertmanagerSilenceExpiringSoon",
                       "OVNNorthboundLeaderFlapping", "graylog", "rundeck", "linkerd", "rollbar",
                       "pulumi", "LoginGraceTime")
DEV2_NEAR_MISS_NAMES = ("PatroniReplicationSlotOverflow", "KubeletEvictionThresholdMet",
                        "flagger", "bugsnag", "SentryEventQuotaExceeded", "kyverno")


@pytest.mark.parametrize("path", [DEV, DEV2], ids=["dev", "dev2"])
def test_a_dev_set_is_honest_and_apart_from_the_others(path):
    """``dev.jsonl`` and ``dev2.jsonl`` (written from the documents alone, tuned on, never
    blind) have their key facts in their documents, share no question with the other sets, and
    ``dev.jsonl``'s near misses' names are in no document."""
    dev = load_golden_set(path)
    assert {q.split for q in dev} == {path.stem}
    answerable = [q for q in dev if q.answerable]
    assert all(q.must_contain_any and q.relevant for q in answerable)
    others = {_squash(q.question) for other in (GOLDEN, BLIND, DEV, DEV2) if other != path
              for q in load_golden_set(other)}
    assert not [q.question for q in dev if _squash(q.question) in others]
    names = DEV_NEAR_MISS_NAMES if path == DEV else DEV2_NEAR_MISS_NAMES
    near = " ".join(q.question.lower() for q in dev if not q.answerable)
    assert all(n.lower() in near for n in names)
    if not CORPORA.is_dir():
        pytest.skip(f"{CORPORA} is absent: the shared corpora are not on this machine")
    missing = [(q.question, q.must_contain_any) for q in answerable
               if not any(_squash(fact) in _squash(_text(key))
                          for fact in q.must_contain_any for key in q.relevant)]
    assert not missing, missing
    found = set()
    for path in CORPORA.rglob("*"):
        if path.is_file():
            low = path.read_text(encoding="utf-8", errors="replace").lower()
            found |= {n for n in names if n.lower() in low}
    assert not found, f"the corpora do mention {sorted(found)}: not a near miss"
