"""`citewise rank train`: what it trains on and what it refuses, and the command run for real
over a small index (``tests/rank_kb.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from citewise.api.cli import cli
from citewise.api.composition import build_services
from citewise.api.ranking.training import TRAINABLE_SPLITS, load_training_questions
from citewise.api.settings import Settings
from citewise.errors import InvalidRequestError
from citewise.ingest.jobs import run_source
from citewise.retrieval.ranking.model import RankModel
from tests.kb import clean_env, folder_source
from tests.rank_kb import TOPICS, golden_rows, write_rank_kb


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_only_tune_train_dev_and_feedback_rows_are_trained_on(tmp_path):
    rows = (golden_rows(TOPICS[:4], "tune") + golden_rows(TOPICS[4:7], "test")
            + golden_rows(TOPICS[7:8], "feedback") + golden_rows(TOPICS[9:10], "dev2")
            + golden_rows(TOPICS[10:11], "development"))  # not a dev set's name
    rows.append({"question": "who won the 1998 world cup", "relevant": [],
                 "answerable": False, "split": "tune"})
    no_split = golden_rows(TOPICS[8:9])[0]
    del no_split["split"]  # a row without a split counts as test
    rows.append(no_split)
    chosen = load_training_questions([_write(tmp_path / "golden.jsonl", rows)])
    assert TRAINABLE_SPLITS == {"tune", "train", "feedback"}
    assert sorted(q.split for q in chosen.questions) == ["dev2", "feedback"] + ["tune"] * 4
    assert {q.question for q in chosen.questions}.isdisjoint(
        {r["question"] for r in rows if r.get("split") not in ("tune", "feedback", "dev2")})
    assert chosen.left_out == {
        "split 'test' (only tune, train, dev and feedback rows train)": 4,
        "split 'development' (only tune, train, dev and feedback rows train)": 1,
        "unanswerable": 1}


def test_a_blind_set_is_refused_and_a_file_of_test_rows_trains_nothing(tmp_path):
    blind = _write(tmp_path / "blind.jsonl", golden_rows(TOPICS[:3], "tune"))
    with pytest.raises(InvalidRequestError, match="blind set") as refused:
        load_training_questions([_write(tmp_path / "ok.jsonl", golden_rows(TOPICS[3:6])),
                                 blind])
    assert "tune split" in refused.value.hint
    # The repository's own blind set, refused by its name before a line of it is read.
    with pytest.raises(InvalidRequestError, match="blind set"):
        load_training_questions([Path(__file__).resolve().parents[2] / "bench" / "golden"
                                 / "blind.jsonl"])
    with pytest.raises(InvalidRequestError, match="no trainable questions"):
        load_training_questions([_write(tmp_path / "test.jsonl",
                                        golden_rows(TOPICS, "test"))])


def test_feedback_that_repeats_a_test_question_is_left_out(tmp_path):
    """Someone asked the golden set's test question for real and rated it: the exported row
    would teach the model what the test measures."""
    golden = _write(tmp_path / "golden.jsonl",
                    golden_rows(TOPICS[:3], "tune") + golden_rows(TOPICS[3:4], "test"))
    echoed = golden_rows(TOPICS[3:4], "feedback")[0]
    echoed["question"] = echoed["question"].upper() + "  "
    feedback = _write(tmp_path / "feedback.jsonl", [echoed, *golden_rows(TOPICS[4:5],
                                                                         "feedback")])
    chosen = load_training_questions([golden, feedback])
    assert len(chosen.questions) == 4
    assert chosen.left_out["the same question as a test row"] == 1


def test_the_command_cross_validates_and_writes_the_model(tmp_path, dense):
    kb = write_rank_kb(tmp_path / "kb")
    data = tmp_path / "data"
    services = build_services(Settings(data_dir=data))
    try:
        assert run_source(services.pipeline, folder_source(kb, name="rank"),
                          trigger="t").status == "succeeded"
    finally:
        services.close()
    golden = _write(tmp_path / "golden.jsonl",
                    golden_rows(TOPICS[:9], "tune") + golden_rows(TOPICS[9:], "test"))
    result = CliRunner().invoke(cli, ["--data-dir", str(data), "rank", "train", "--qa",
                                      str(golden), "--folds", "3", "--trees", "40"],
                                env=clean_env())
    assert result.exit_code == 0, result.output
    assert "left out 3 rows: split 'test'" in result.output
    assert "training on 9 questions" in result.output
    for fold in (1, 2, 3):
        assert f"fold {fold}:   3 questions" in result.output
    assert "the stage adds" in result.output
    model = RankModel.load(data / "rank-model.json")
    assert model.trained["questions"] == 9 and model.trained["left_out"]
    latency = model.trained["stage_latency"]
    assert 0 < latency["cold_p50_ms"] <= latency["cold_p95_ms"]
    assert 0 < latency["warm_p50_ms"] <= latency["warm_p95_ms"]
    assert (data / "rank-model.json").stat().st_mode & 0o077 == 0  # the owner's alone
    helped = CliRunner().invoke(cli, ["rank", "train", "--help"], env=clean_env())
    assert "blind" in helped.output and "--folds" in helped.output
