"""The leakage guard: no evaluation question, or a long run of its words, in any training pair.

A model tuned on pairs that contain the golden sets' questions would be measured on what it
was taught: its figures would flatter it. The guard reads the questions (and paraphrases, and
follow-up turns) of every golden set it is given and drops a pair when

* its anchor *is* a question (compared normalised: lower case, words only), or
* its anchor or passage shares a run of ``ngram`` words with a question (6 by default: long
  enough that ordinary phrases such as "how do i restart the" do not count, short enough that
  a question copied with a word changed does), or
* its anchor or passage holds a whole question shorter than that run.

The counts of what it dropped, by reason, go into the model card.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

NGRAM = 6
_WORD = re.compile(r"[a-z0-9]+")
# The fields of a golden set's lines that hold what someone asks (`citewise eval`'s formats:
# a question, its paraphrase, a conversation's turns).
QUESTION_FIELDS = ("question", "paraphrase", "standalone", "asked_as", "turns", "questions")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def normalise(text: str) -> str:
    return " ".join(words(text))


def questions_in(path: Path) -> list[str]:
    """Every question a golden set's JSON lines hold (the fields above, strings or lists)."""
    found: list[str] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON line ({e.msg})") from e
            if isinstance(entry, dict):
                found.extend(_strings(entry.get(key) for key in QUESTION_FIELDS))
    return found


def _strings(values: Iterable[Any]) -> Iterator[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from _strings(value)
        elif isinstance(value, dict):
            yield from _strings(value.get(key) for key in QUESTION_FIELDS)


class LeakageGuard:
    """Says why a pair must not be trained on, or None."""

    def __init__(self, questions: Iterable[str], ngram: int = NGRAM) -> None:
        self.ngram = ngram
        self.exact: set[str] = set()
        self.grams: set[tuple[str, ...]] = set()
        self.short: list[str] = []  # questions with fewer words than a run: matched whole
        for q in questions:
            w = words(q)
            if not w:
                continue
            self.exact.add(" ".join(w))
            if len(w) >= ngram:
                self.grams.update(_grams(w, ngram))
            else:
                self.short.append(" ".join(w))
        self.questions = len(self.exact)
        self.dropped: Counter[str] = Counter()

    def reason(self, anchor: str, positive: str) -> str | None:
        a = words(anchor)
        if " ".join(a) in self.exact:
            return "anchor is a golden question"
        for side, w in (("anchor", a), ("passage", words(positive))):
            if self.grams and not self.grams.isdisjoint(_grams(w, self.ngram)):
                return f"{side} shares {self.ngram} words with a golden question"
            if self.short:
                text = f" {' '.join(w)} "
                if any(f" {q} " in text for q in self.short):
                    return f"{side} holds a golden question"
        return None

    def allows(self, anchor: str, positive: str) -> bool:
        """Whether the pair may be trained on; counts the reason when it may not."""
        why = self.reason(anchor, positive)
        if why is not None:
            self.dropped[why] += 1
        return why is None


def _grams(w: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
