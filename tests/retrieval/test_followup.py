"""Follow-ups rewritten to stand alone: by rule, and by a model when one is configured (with the
rule as the fallback when it fails)."""

from __future__ import annotations

import pytest

from citewise.gateway import Gateway
from citewise.gateway.provider import Provider, ProviderSpec
from citewise.retrieval.answering.followup import Previous, leans_on_previous, standalone
from tests.fakes.openai_provider import OpenAIProvider

PREVIOUS = Previous("How do I deploy a service with shipit?", "Deploying a service with shipit")


@pytest.mark.parametrize("question, leans", [
    ("and how do I roll it back?", True),
    ("what about staging?", True),
    ("how do I renew it?", True),
    ("How do I fail over the redis cache in eu-west-1?", False),
])
def test_which_questions_lean_on_the_one_before(question, leans):
    assert leans_on_previous(question) is leans


def test_the_rule_puts_the_previous_subject_where_the_question_points_back():
    question, how = standalone("and how do I roll it back?", PREVIOUS)
    assert how == "rule"
    assert "shipit" in question and "roll" in question
    assert question.endswith("(Deploying a service with shipit)")


def test_a_new_subject_keeps_only_the_previous_action():
    question, _ = standalone("what about postgres?", Previous("How do I fail over redis?", None))
    assert question == "postgres fail over?"
    question, _ = standalone("what about the postgres WAL volume filling up?", PREVIOUS)
    assert question == "the postgres WAL volume filling up?"


def test_a_question_that_stands_alone_is_searched_as_asked():
    q = "How do I fail over the redis cache in eu-west-1?"
    assert standalone(q, PREVIOUS) == (q, "asked")
    assert standalone("and then?", None) == ("and then?", "asked")


def test_a_model_rewrites_when_configured_and_the_rule_steps_in_when_it_fails():
    fake = OpenAIProvider().start()
    try:
        fake.reply = "How do I roll back a service deployed with shipit?"
        gateway = Gateway([Provider(ProviderSpec(name="m", base_url=fake.base_url,
                                                 model=fake.model))], backoff=0.01)
        history = [{"role": "user", "content": PREVIOUS.question},
                   {"role": "assistant", "content": "Run `shipit deploy` [1]."}]
        assert standalone("and how do I roll it back?", PREVIOUS, gateway=gateway,
                          history=history) == (fake.reply, "model")
        sent = fake.requests[-1]["messages"]
        assert sent[0]["role"] == "system" and sent[1:3] == history
        assert sent[-1] == {"role": "user", "content": "and how do I roll it back?"}
        fake.mode = "500"
        question, how = standalone("and how do I roll it back?", PREVIOUS, gateway=gateway)
        assert how == "rule" and "shipit" in question
    finally:
        fake.stop()
