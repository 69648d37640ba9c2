"""The titles of documents a caller may not read, and whether a text names one of them.

An extractive answer drops every line and sentence that names such a document (it says nothing
to the caller, and tells them the document exists). Asked title by title, that check was most
of an answer's own CPU at 113k chunks: the scale bench's caller is hidden ~1,200 titles, and an
answer tests a few hundred lines and units; ~10 ms of a 17 ms answer whose units were already
embedded (cProfile of 100 answers, Dec 7). One regular expression built from a trie of the
titles asks all of them in one pass of the regex engine, in C, following at each position only
the titles that continue with the next character: 1.6 µs a line where asking title by title
took 137 µs (8.5k lines of the corpora; bench/results/answer-core.md for whole answers).

The meaning is exactly "some title occurs in the text" (a substring, as ``title in text``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

_END = ""  # a trie node's key for "a title ends here"

# A character trie: each node maps a next character (or _END) to the node after it.
_Trie = dict[str, "_Trie"]


class HiddenTitles:
    """An immutable set of titles with a one-pass test for any of them occurring in a text."""

    def __init__(self, titles: Iterable[str] = ()) -> None:
        self.titles = frozenset(t for t in titles if t)
        self._pattern: re.Pattern[str] | None = None
        if self.titles:
            try:
                self._pattern = re.compile(_trie_regex(self.titles))
            except (RecursionError, re.error, OverflowError):
                # Titles sharing prefixes thousands of branches deep: asked one by one.
                self._pattern = None

    def named_in(self, text: str) -> bool:
        """Whether any of the titles occurs in ``text``."""
        if self._pattern is not None:
            return self._pattern.search(text) is not None
        return any(t in text for t in self.titles)

    def all_named_in(self, text: str) -> set[str]:
        """Every title that occurs in ``text`` (overlapping ones too)."""
        if not self.named_in(text):
            return set()
        return {t for t in self.titles if t in text}

    def __iter__(self) -> Iterator[str]:
        return iter(self.titles)

    def __len__(self) -> int:
        return len(self.titles)

    def __contains__(self, title: object) -> bool:
        return title in self.titles


@lru_cache(maxsize=32)
def titles_matcher(titles: frozenset[str]) -> HiddenTitles:
    """The matcher of ``titles``, built once for each set: building it takes ~50 ms for 1,200
    titles, and every caller of the same groups is hidden the same titles (the set is read
    again every half minute per caller, ``AnswerService._hidden_titles``)."""
    return HiddenTitles(titles)


def _trie_regex(titles: Iterable[str]) -> str:
    """A pattern that matches wherever one of ``titles`` starts.

    Built from a character trie: a chain of single children is one escaped literal, a node with
    several children an alternation of them. A node where a title ends matches there and then,
    so the longer titles under it are left out: the shorter one already answers "some title
    occurs" (the pattern is only asked for existence)."""
    root: _Trie = {}
    for title in titles:
        node = root
        for ch in title:
            if _END in node:
                break  # a shorter title is a prefix of this one: it already matches here
            node = node.setdefault(ch, {})
        else:
            node.clear()
            node[_END] = {}
    return _node_regex(root)


def _node_regex(node: _Trie) -> str:
    # Iterative over single-child chains, recursive only at branches: a branch per level is
    # shallow, where a title's characters are not (a 200-character title would be 200 deep).
    literal = []
    while len(node) == 1 and _END not in node:
        (ch, child), = node.items()
        literal.append(re.escape(ch))
        node = child
    head = "".join(literal)
    if _END in node:
        return head
    branches = [re.escape(ch) + _node_regex(child) for ch, child in sorted(node.items())]
    return head + "(?:" + "|".join(branches) + ")"
