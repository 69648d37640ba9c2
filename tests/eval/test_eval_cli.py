"""``citewise eval`` end to end on a tiny BEIR folder written here: the real pipeline, the real
model, the embedded engine, the metrics, the table and the JSON file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.test_cli import invoke

DOCS = {
    "d1": ("Redis cache failover", "Promote a replica with a manual Sentinel failover when the "
           "Redis primary stops answering health checks."),
    "d2": ("Postgres disk almost full", "Delete old WAL archives already shipped to object "
           "storage, then grow the persistent volume claim."),
    "d3": ("Kafka consumer lag", "Scale the consumer group up to the number of partitions when "
           "lag keeps growing on a topic."),
    "d4": ("Rotating TLS certificates", "cert-manager renews certificates twenty days before "
           "they expire; a stuck renewal shows Ready=False."),
    "d5": ("Sourdough starter", "Mix flour and water, discard half daily, and feed it until it "
           "doubles within eight hours."),
    "d6": ("Onboarding week", "New engineers set up a laptop, request VPN access and shadow an "
           "on-call shift in their first week."),
}
QUERIES = {
    "q1": ("the redis primary is down, how do I fail over", {"d1": 1}),
    "q2": ("database volume running out of space", {"d2": 1}),
    "q3": ("consumers fall behind on a kafka topic", {"d3": 1}),
    "q4": ("certificate renewal is stuck", {"d4": 1}),
    "q5": ("how to bake bread with a starter", {"d5": 1}),
}


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as f:
        for doc_id, (title, text) in DOCS.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as f:
        for qid, (text, _) in QUERIES.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, (_, rel) in QUERIES.items() for d, g in rel.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def beir(tmp_path, monkeypatch, dense):
    monkeypatch.chdir(tmp_path)  # no stray citewise.toml applies
    return write_beir(tmp_path / "tiny-beir")


def test_eval_ranks_a_tiny_benchmark_and_writes_the_table(beir, tmp_path):
    out = tmp_path / "results" / "tiny.json"
    result = invoke("--data-dir", tmp_path / "data", "eval", beir,
                    "--configs", "dense,bm25,default,rrf", "--out", out)
    assert result.exit_code == 0, result.output + repr(result.exception)
    figures = json.loads(out.read_text())["beir"]
    assert figures["split"] == "test" and figures["queries"] == len(QUERIES)
    by_name = {c["config"]: c for c in figures["configs"]}
    assert set(by_name) == {"dense", "bm25", "default", "rrf"}
    assert [c["config"] for c in figures["configs"] if c["default"]] == ["default"]
    # Five unambiguous questions over six documents: every method finds all of them.
    for c in figures["configs"]:
        assert c["recall@100"] == 1.0, c
        assert c["ndcg@10"] > 0.9, c
    assert "| **default** | hybrid, convex" in out.with_suffix(".md").read_text()
    assert "nDCG@10" in result.stdout
    # The isolated index is keyed by the corpus and settings, and a second run reuses it.
    again = invoke("--data-dir", tmp_path / "data", "eval", beir, "--configs", "bm25")
    assert again.exit_code == 0, again.output
    assert "0 added" in again.stderr and "6 unchanged" in again.stderr
    assert len(list((tmp_path / "data" / "eval").glob("tiny-beir-*"))) == 1


def test_eval_explains_bad_input(beir, tmp_path):
    no_split = invoke("eval", beir, "--split", "dev")
    assert no_split.exit_code == 1 and "has no split 'dev'" in no_split.stderr
    bad = invoke("eval", beir, "--configs", "dense,magic")
    assert bad.exit_code == 2 and "unknown configuration 'magic'" in bad.output
    assert invoke("eval").exit_code == 2
    not_beir = tmp_path / "empty"
    not_beir.mkdir()
    res = invoke("eval", not_beir)
    assert res.exit_code == 1 and "not a BEIR dataset folder" in res.stderr
