"""The one-pass test for text naming a document the caller may not read
(``retrieval/answering/hidden.py``) means exactly what asking title by title meant."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from citewise.retrieval.answering.hidden import HiddenTitles, titles_matcher

# Few letters, so that titles share prefixes, nest in each other and occur in the texts.
_TEXT = st.text(alphabet="ab .(*[\\?$", max_size=40)


@settings(max_examples=400, deadline=None)
@given(titles=st.lists(_TEXT, max_size=12), text=_TEXT)
def test_it_finds_a_title_exactly_when_asking_title_by_title_would(titles, text):
    hidden = HiddenTitles(titles)
    assert hidden.named_in(text) == any(t and t in text for t in titles)
    assert hidden.all_named_in(text) == {t for t in titles if t and t in text}


def test_titles_that_are_prefixes_of_each_other_and_regex_characters_are_literal():
    hidden = HiddenTitles(["Rotate the keys", "Rotate the keys (prod)", "Fix [disk].*", ""])
    assert hidden.named_in("see Rotate the keys first")
    assert hidden.all_named_in("see Rotate the keys (prod) now") == {
        "Rotate the keys", "Rotate the keys (prod)"}
    assert hidden.named_in("run Fix [disk].* again")
    assert not hidden.named_in("Fix disk again")  # "[disk]" is not a character class
    assert not hidden.named_in("Rotate the key")
    assert "" not in hidden and len(hidden) == 3


def test_no_titles_hide_nothing():
    assert not HiddenTitles().named_in("anything at all")
    assert HiddenTitles().all_named_in("anything") == set()


def test_titles_branching_too_deep_for_one_pattern_are_asked_one_by_one():
    # Each title branches off the previous one a character later: the trie's alternations
    # nest 1,500 deep, past what the pattern builder recurses into.
    titles = ["a" * k + "b" for k in range(1500)]
    hidden = HiddenTitles(titles)
    assert hidden._pattern is None
    assert hidden.named_in("x" + "a" * 700 + "b")
    assert not hidden.named_in("a" * 2000)


def test_a_set_of_titles_is_built_once():
    titles = frozenset({"Rotating payment provider API keys", "Break-glass access"})
    assert titles_matcher(titles) is titles_matcher(frozenset(set(titles)))
