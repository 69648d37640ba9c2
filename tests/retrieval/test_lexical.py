"""The question's words in a passage: what the answer strategies add to the model's similarity."""

from __future__ import annotations

from citewise.retrieval.answering.lexical import (
    content_words,
    lexical_overlap,
    rarest_subject,
    restates,
)
from citewise.retrieval.answering.question import analyse


def test_a_rare_shared_word_counts_more_than_a_common_one():
    texts = ["The hostPrefix of the pod network is 23 on every cluster.",
             "Each cluster has its own pod network.",
             "Nodes join the cluster through the bootstrap token."]
    scores = lexical_overlap("what hostPrefix does the pod network use", texts)
    assert scores[0] > scores[1] > scores[2] == 0.0
    assert 0.0 <= min(scores) and max(scores) <= 1.0
    assert list(lexical_overlap("", texts)) == [0.0, 0.0, 0.0]


def test_the_rarest_subject_word_tells_units_apart():
    q = analyse("es cluster health yellow, what does that mean")
    texts = ["Cluster health green: all shards are assigned.",
             "Cluster health yellow: all primary shards are assigned, some replicas are not.",
             "Cluster health red: some primary shards are not assigned."]
    assert rarest_subject(q, texts) == {"yellow"}


def test_a_passage_that_only_restates_the_question_is_recognised():
    q = analyse("How do I rotate the provider signing keys?")
    assert restates(q, 'Ask it: "How do I rotate the provider signing keys?"')
    assert not restates(q, "Generate the new key in the provider portal, then switch traffic.")
    assert content_words("How do I rotate the keys?") == {"rotate", "keys"}
