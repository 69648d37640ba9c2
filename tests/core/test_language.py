"""What counts as an ordinary English word: such a word in a question is never held against it
as a name the documents would have to mention."""

from __future__ import annotations

import pytest

from citewise.language import is_english


@pytest.mark.parametrize("word", ["slot", "lapses", "restarted", "paging", "queries"])
def test_open_class_words_and_their_forms_are_english(word):
    assert is_english(word)


@pytest.mark.parametrize("word", ["per", "the", "itself", "toward", "during", "than", "Via"])
def test_closed_class_words_are_english_too(word):
    # The lemmatizer's tables hold no prepositions, pronouns or determiners; "paid per week"
    # over a knowledge base that never writes "per" must not read as an unknown name.
    assert is_english(word)


@pytest.mark.parametrize("word", ["cockroachdb", "victorops", "gitlab", "pgbouncer", "k8s"])
def test_names_are_not(word):
    assert not is_english(word)
