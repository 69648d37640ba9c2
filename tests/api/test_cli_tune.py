"""`citewise tune` as an operator meets it: the pairs for review (a helpful answer's question
among them), a short run that writes a model folder with its card and leaves the live index
alone, and adoption through `citewise reindex` with the model setting pointing at the folder."""

from __future__ import annotations

import json
import logging
import os

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.cli import cli
from citewise.api.composition import build_services, build_stores
from citewise.api.settings import Settings
from citewise.ingest.jobs import run_source
from tests.kb import POSTGRES, REDIS, folder_source, write_kb

DANA = {"X-Citewise-User": "dana"}
HELPFUL = "redis primary stopped answering health checks, what now"


def invoke(*args: str, **env: str):
    """The CLI in this process (the model is loaded once per test session), with no stray
    CITEWISE_* setting, in the repository root (where the golden sets are)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        clean = {k: None for k in os.environ if k.startswith("CITEWISE_")}
        return CliRunner().invoke(cli, list(args), env={**clean, **env})
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture
def data(tmp_path, dense):
    """The test knowledge base, ingested, with one answer rated helpful and one not."""
    kb = write_kb(tmp_path / "kb")
    services = build_services(Settings(data_dir=tmp_path / "data"))
    try:
        assert run_source(services.pipeline, folder_source(kb), trigger="t").status \
            == "succeeded"
        with TestClient(create_app(services=services), client=("127.0.0.1", 5000)) as c:
            for question, helpful in ((HELPFUL, True), ("postgres disk is filling up", False)):
                answer = c.post("/v1/answer", json={"question": question}, headers=DANA).json()
                assert c.post(f"/v1/answers/{answer['answer_id']}/feedback",
                              json={"helpful": helpful}, headers=DANA).status_code == 201
    finally:
        services.close()
    return tmp_path / "data"


def live_state(data) -> tuple[str | None, set[str]]:
    stores = build_stores(Settings(data_dir=data))
    try:
        return stores.catalog.meta("embedding_model"), {
            pid for _, ids in stores.catalog.live_points().values() for pid in ids}
    finally:
        stores.close()


def test_dry_run_writes_the_pairs_for_review(data, tmp_path):
    out = tmp_path / "pairs.jsonl"
    result = invoke("--data-dir", str(data), "tune", "--dry-run", "--pairs-out", str(out))
    assert result.exit_code == 0, result.output
    assert "leakage guard:" in result.output and "demo/golden-set.jsonl" in result.output
    assert "for leakage" in result.output and "pairs from 5 documents" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["split"] for r in rows} <= {"train", "validation"} and rows
    assert {"title", "heading", "alert", "service"} <= {r["kind"] for r in rows}
    feedback = [r for r in rows if r["kind"] == "feedback"]
    assert [r["anchor"] for r in feedback] == [HELPFUL]  # the unhelpful one is not a pair
    assert feedback[0]["path"] == REDIS and feedback[0]["positive"]
    assert not (data / "models").exists()  # a dry run writes no model


def test_help_says_what_it_learns_how_long_where_and_how_to_adopt():
    result = invoke("tune", "--help")
    assert result.exit_code == 0
    for phrase in ("title -> body start", "alert name", "golden-set question", "--minutes",
                   "<data dir>/models/tuned-", "tuning.json",
                   "CITEWISE_EMBEDDING_MODEL_PATH=<the folder> citewise reindex",
                   "bench/golden/shared-corpora.jsonl"):
        assert phrase in result.output, phrase


def test_a_short_run_writes_a_model_that_reindex_adopts(data, tmp_path):
    before = live_state(data)
    out = tmp_path / "models" / "tuned-a"
    result = invoke("--data-dir", str(data), "tune", "--minutes", "2", "--max-steps", "2",
                    "--eval-every", "1", "--batch-size", "4", "--max-seq-length", "32",
                    "--threads", "2", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert live_state(data) == before  # the live index is not touched
    assert {"model.safetensors", "tokenizer.json", "modules.json", "README.md",
            "tuning.json"} <= {p.name for p in out.iterdir()}
    card = json.loads((out / "tuning.json").read_text())
    assert json.loads(result.stdout) == card  # --json: stdout is the card, and nothing else
    assert card["base_model"].endswith("model") and card["result"]["steps"] == 2
    assert card["pairs"]["train"]["title"] > 0 and "dropped_for_leakage_total" in card["pairs"]
    assert card["result"]["before"]["step"] == 0 and card["result"]["best"] is not None
    assert [v["step"] for v in card["result"]["history"]] == [0, 1, 2]
    assert card["result"]["peak_rss_mb"] > 100 and card["result"]["pairs_per_second"] > 0
    assert "## Adopting it" in (out / "README.md").read_text()
    assert f"CITEWISE_EMBEDDING_MODEL_PATH={out} citewise reindex" in result.output

    again = invoke("--data-dir", str(data), "tune", "--out", str(out))
    assert again.exit_code == 1 and "never reuse one" in again.output

    adopted = invoke("--data-dir", str(data), "reindex", "--json",
                     CITEWISE_EMBEDDING_MODEL_PATH=str(out))
    assert adopted.exit_code == 0, adopted.output
    report = json.loads(adopted.output[adopted.output.index("{"):])
    assert report["status"] == "switched" and report["model"] == "tuned-a"
    model, points = live_state(data)
    assert model == "tuned-a" and points and not points & before[1]
    found = invoke("--data-dir", str(data), "search", "redis failover sentinel", "--json",
                   CITEWISE_EMBEDDING_MODEL_PATH=str(out))
    assert found.exit_code == 0, found.output
    hits = json.loads(found.output[found.output.index("{"):])["results"]
    assert hits and hits[0]["path"] == REDIS


def test_labelled_questions_judge_the_steps_when_given(data, tmp_path):
    """--validate-qa: the dev questions' search candidates, re-ranked by the model at each
    validation, judge which state is kept; test rows are left out and a blind set refused."""
    rows = [
        {"question": "the redis primary died, how do I promote a replica", "split": "dev",
         "relevant": [f"kb/{REDIS}"], "answerable": True},
        {"question": "postgres volume is out of space", "split": "dev",
         "relevant": [f"kb/{POSTGRES}"], "answerable": True},
        {"question": "how do I fail over redis", "split": "test",
         "relevant": [f"kb/{REDIS}"], "answerable": True},
    ]
    golden = tmp_path / "dev-questions.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "models" / "tuned-q"
    result = invoke("--data-dir", str(data), "tune", "--minutes", "2", "--max-steps", "2",
                    "--eval-every", "1", "--batch-size", "4", "--max-seq-length", "32",
                    "--threads", "2", "--validate-qa", str(golden), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    card = json.loads((out / "tuning.json").read_text())
    history = card["result"]["history"]
    assert [v["step"] for v in history] == [0, 1, 2]
    assert {v["of"] for v in history} == {"questions"} and {v["pairs"] for v in history} == {2}
    assert card["validated_on"]["left_out"]["no relevant candidate"] == 0
    assert 0 < history[0]["mrr"] <= 1
    assert card["validated_on"]["questions"] == 2
    assert str(golden) in card["guard_files"]  # what judges is kept out of the pairs too
    assert card["validated_on"]["left_out"]["split 'test' (only tune, train, dev and feedback "
                                            "rows train)"] == 1
    assert "2 labelled questions of" in (out / "README.md").read_text()
    assert "validation: 2 questions" in result.output

    blind = tmp_path / "blind.jsonl"
    blind.write_text(golden.read_text())
    refused = invoke("--data-dir", str(data), "tune", "--max-steps", "1", "--validate-qa",
                     str(blind), "--out", str(tmp_path / "models" / "tuned-b"))
    assert refused.exit_code == 1 and "blind set" in refused.output
    assert not (tmp_path / "models" / "tuned-b").exists()
