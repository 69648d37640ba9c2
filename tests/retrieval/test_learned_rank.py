"""The learned second stage of search (``retrieval/ranking/``), over a real index of a small
knowledge base (``tests/rank_kb.py``): the features search computes for its candidates, a
model trained on labelled questions that changes the order the way the labels say, the model
file's format and refusals, and search exactly as before when no model is present."""

from __future__ import annotations

import json
import math

import pytest

from citewise.api.composition import build_services, rank_model_path
from citewise.api.ranking import training
from citewise.api.settings import Settings
from citewise.errors import ConfigError
from citewise.ingest.jobs import run_source
from citewise.retrieval.ranking.features import FEATURES, RankFeatures
from citewise.retrieval.ranking.model import RankModel
from citewise.types import Identity
from tests.kb import folder_source
from tests.rank_kb import TOPICS, golden_rows, question, slug, write_rank_kb

ANYONE = Identity.anonymous()
# Trained on the first nine topics; the last three are never seen in training.
SEEN, UNSEEN = TOPICS[:9], TOPICS[9:]
# Learned from nothing (no prior): here the fused order is wrong for most questions.
SMALL = training.Params(trees=60, leaves=7, min_rows_per_leaf=10, prior=0.0)


@pytest.fixture(scope="module")
def data(tmp_path_factory, dense):
    root = tmp_path_factory.mktemp("rank")
    kb = write_rank_kb(root / "kb")
    services = build_services(Settings(data_dir=root / "data"))
    try:
        report = run_source(services.pipeline, folder_source(kb, name="rank"), trigger="t")
        assert report.status == "succeeded", report.summary()
    finally:
        services.close()
    return root / "data"


@pytest.fixture(scope="module")
def golden(data):
    path = data.parent / "golden.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in golden_rows(SEEN)))
    return path


@pytest.fixture(scope="module")
def trained(data, golden):
    """A model trained on the seen topics, written where the services read it at start."""
    services = build_services(Settings(data_dir=data))
    try:
        chosen = training.load_training_questions([golden])
        groups = training.collect(services.search, chosen.questions, depth=50)
        cv = training.summary(training.cross_validate(groups, SMALL, k=3, candidates=50))
        model = training.fit(groups, SMALL, candidates=50, trained=training.metadata(
            chosen, groups, SMALL, cv, candidates=50, index_model=services.dense.model_id))
        model.save(rank_model_path(services.settings))
    finally:
        services.close()
    return cv


def _paths(services, q: str, **kw) -> list[str]:
    return [r.path for r in services.search.search(q, ANYONE, top_k=5, **kw)]


def test_features_of_real_candidates_say_what_each_chunk_is(data):
    services = build_services(Settings(data_dir=data))
    try:
        topic, alert, _ = TOPICS[0]
        q = f"{alert} fired, what do I do"
        results, signals = services.search.candidates(q, ANYONE, depth=50)
        rows = RankFeatures().rows(q, results, signals)
    finally:
        services.close()
    assert len(rows) == len(results) > 10 and all(len(r) == len(FEATURES) for r in rows)
    col = {name: i for i, name in enumerate(FEATURES)}
    by_place = {(r.path, r.heading.split(" > ")[-1]): row for r, row in
                zip(results, rows, strict=True)}
    mitigation = by_place[(f"runbooks/{slug(topic)}.md", "Mitigation")]
    history = by_place[(f"history/{slug(topic)}.md", "Background")]
    # The alert named in the question is the runbook's title; the history page never names it.
    assert mitigation[col["alert_in_title_or_path"]] == 1.0
    assert history[col["alert_in_title_or_path"]] == 0.0
    assert mitigation[col["question_alert"]] == 1.0 and mitigation[col["question_action"]] == 0
    assert mitigation[col["section_procedure"]] == 1.0 and mitigation[col["kind_agrees"]] == 1.0
    assert history[col["section_procedure"]] == 0.0
    # Fusion's own view, as search saw it: ranks from 0, the best fused chunk first.
    assert rows[0][col["fused_rank"]] == 0.0 and rows[0][col["fused_score"]] == results[0].score
    dense_ranks = sorted(row[col["dense_rank"]] for row in rows)
    assert dense_ranks[0] == 0.0
    # A chunk no BM25 term matched is missing from that list: its score is missing, not 0.
    missing = [row for row in rows if math.isnan(row[col["sparse_score"]])]
    assert all(row[col["sparse_rank"]] == signals.depth for row in missing)
    # No git history here: freshness is unknown, not zero days.
    assert math.isnan(rows[0][col["age_days"]])


def test_a_trained_model_puts_the_procedure_first_for_questions_it_never_saw(data, trained):
    pooled = trained["all_folds"]
    # Cross-validated: every fold's questions ranked by a model that never saw them.
    assert pooled["fused"]["hit@1"] <= 0.25
    assert pooled["learned"]["hit@1"] >= 0.75
    assert pooled["learned"]["ndcg@10"] > pooled["fused"]["ndcg@10"]
    services = build_services(Settings(data_dir=data))
    try:
        assert services.search.learned is not None
        for topic, _, _ in UNSEEN:
            q = question(topic)
            fused = _paths(services, q, learned=False)
            learned = _paths(services, q)
            assert fused[0] == f"history/{slug(topic)}.md", (q, fused)
            assert learned[0] == f"runbooks/{slug(topic)}.md", (q, learned)
            # Reordered, nothing new: the page comes from the fused candidates.
            candidates, _ = services.search.candidates(q, ANYONE, depth=50)
            served = services.search.search(q, ANYONE, top_k=10)
            assert {r.chunk_id for r in served} <= {r.chunk_id for r in candidates}
        # The served order is scored by the model, best first.
        results = services.search.search(question(UNSEEN[0][0]), ANYONE, top_k=5)
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    finally:
        services.close()


def test_the_model_file_says_what_it_was_trained_on(data, trained):
    model = RankModel.load(data / "rank-model.json")
    assert model.features == FEATURES and model.candidates == 50
    meta = model.trained
    assert meta["questions"] == len(SEEN) and meta["splits"] == ["tune"]
    assert meta["params"]["trees"] == SMALL.trees
    assert meta["cross_validation"]["all_folds"] == trained["all_folds"]


def test_without_a_model_search_is_the_fused_ranking_exactly(data, trained, tmp_path):
    with_model = build_services(Settings(data_dir=data))
    try:
        assert with_model.search.learned is not None
        fused = {topic: with_model.search.search(question(topic), ANYONE, top_k=10,
                                                 learned=False) for topic, _, _ in TOPICS}
        learned = with_model.search.search(question(TOPICS[0][0]), ANYONE, top_k=10)
    finally:
        with_model.close()
    assert [r.chunk_id for r in learned] != [r.chunk_id for r in fused[TOPICS[0][0]]]

    def same_as_fused(settings: Settings) -> None:
        services = build_services(settings)
        try:
            assert services.search.learned is None
            for topic, _, _ in TOPICS:
                again = services.search.search(question(topic), ANYONE, top_k=10)
                assert [(r.chunk_id, r.score) for r in again] == [
                    (r.chunk_id, r.score) for r in fused[topic]]
        finally:
            services.close()

    same_as_fused(Settings(data_dir=data, rank_learned=False))  # switched off
    model = data / "rank-model.json"
    model.rename(tmp_path / "aside.json")  # no model file: as every installation today
    try:
        same_as_fused(Settings(data_dir=data))
    finally:
        (tmp_path / "aside.json").rename(model)
    with pytest.raises(ConfigError, match="does not exist"):
        build_services(Settings(data_dir=data, rank_model_file=tmp_path / "absent.json"))


def test_a_model_of_other_features_or_format_is_refused_at_start(data, trained, tmp_path):
    document = json.loads((data / "rank-model.json").read_text())
    for change, message in (({"features": [*FEATURES[:-1], "something_new"]}, "other features"),
                            ({"format_version": 99}, "format version 99")):
        path = tmp_path / f"model-{len(message)}.json"
        path.write_text(json.dumps({**document, **change}))
        with pytest.raises(ConfigError, match=message) as refused:
            build_services(Settings(data_dir=data, rank_model_file=path))
        assert "citewise rank train" in (refused.value.hint or "")


def test_the_golden_set_figures_come_per_split_with_and_without_the_model(data, trained):
    """What `citewise eval --qa` reports: the tune split (trained on) and the test split
    (never seen) apart, the learned stage on and off."""
    from citewise.api.evaluation.qa import evaluate_search, load_golden_set
    from citewise.api.evaluation.runner import parse_config

    path = data.parent / "both.jsonl"
    path.write_text("".join(json.dumps(r) + "\n"
                            for r in golden_rows(SEEN) + golden_rows(UNSEEN, "test")))
    questions = load_golden_set(path)
    figures = {}
    for learned in (False, True):
        services = build_services(Settings(data_dir=data, rank_learned=learned))
        try:
            figures[learned] = evaluate_search(services.search, questions,
                                               parse_config("default"))
        finally:
            services.close()
    for f in figures.values():
        assert f["questions"] == len(TOPICS)
        assert {s: v["questions"] for s, v in f["by_split"].items()} == {
            "tune": len(SEEN), "test": len(UNSEEN)}
    assert figures[False]["by_split"]["test"]["hit@1"] == 0.0
    assert figures[True]["by_split"]["test"]["hit@1"] == 1.0


def test_a_model_that_starts_from_the_fused_order_keeps_it_unless_taught_otherwise(data,
                                                                                    golden):
    """``prior``: boosting starts from the fused score, so a model of one shallow tree over a
    heavy prior ranks as fusion does, and the same data without the prior does not."""
    services = build_services(Settings(data_dir=data, rank_learned=False))
    try:
        questions = training.load_training_questions([golden]).questions
        groups = training.collect(services.search, questions, depth=50)
    finally:
        services.close()
    anchored = training.fit(groups, training.Params(trees=1, leaves=2, min_rows_per_leaf=10,
                                                    prior=1000.0), candidates=50)
    assert anchored.prior == 1000.0
    assert all(training.model_order(anchored, g)[:3] == training.fused_order(g)[:3]
               for g in groups)
    free = training.fit(groups, SMALL, candidates=50)
    assert any(training.model_order(free, g)[0] != 0 for g in groups)
