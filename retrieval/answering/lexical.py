"""The words a passage shares with the question, beside the embedding's similarity.

A small embedding model ranks passages by their gist; telling apart two sentences of the same
section ("hostPrefix 23" and its neighbours), or the sentence that opens with the term asked
after from the ones that merely mention it, takes the question's own words. Every strategy that
ranks units adds these scores to the model's.
"""

from __future__ import annotations

import re

import numpy as np

from citewise.index.sparse import tokenize
from citewise.retrieval.answering.question import Question

# How much the shared words count beside the embedding's similarity (0..1 each).
LEXICAL_WEIGHT = 0.2

_STOP = frozenset("""a an and are as at be but by can could do does did for from has have how i
if in into is it its me my of on or our should so that the their them then there these this
those to was we were what when where which who whom why will with would you your i'm it's
what's how's there's""".split())
# Words of asking for a meaning, not of what is asked about.
_GENERIC = frozenset("""mean means meaning actually exactly point purpose used use role job
thing stand stands does define definition explain""".split())


def content_words(text: str) -> set[str]:
    """The words of ``text`` that say something: longer than two letters, not stop words."""
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP and len(w) > 2}


def lexical_overlap(question: str, texts: list[str]) -> np.ndarray:
    """How much of the question each text shares, each shared term weighted by how rare it is
    among the texts (a local IDF): "hostPrefix 23" tells the sentence that holds the value from
    its neighbours better than a small embedding model does. 0..1."""
    asked = set(tokenize(question))
    if not asked or not texts:
        return np.zeros(len(texts))
    bags = [set(tokenize(t)) & asked for t in texts]
    df: dict[str, int] = {}
    for bag in bags:
        for term in bag:
            df[term] = df.get(term, 0) + 1
    idf = {term: np.log(1 + len(texts) / n) for term, n in df.items()}
    total = sum(idf.values())
    if not total:
        return np.zeros(len(texts))
    return np.array([sum(idf[t] for t in bag) / total for bag in bags])


def name_bonus(q: Question, text: str) -> float:
    """Units that name what the question names ("UH", "img.fernhill.com") come first."""
    low = text.lower()
    return 0.1 * sum(1 for n in q.names if n.lower() in low)


def rarest_subject(q: Question, texts: list[str]) -> set[str]:
    """The question's subject words that the fewest candidate units use: in "es cluster health
    yellow, what does that mean" it is "yellow", not "cluster", that tells the units apart."""
    subject = content_words(q.text) - _GENERIC
    bags = [content_words(t) for t in texts]
    df = {w: sum(w in bag for bag in bags) for w in subject}
    used = [n for n in df.values() if n]
    return {w for w, n in df.items() if n and n == min(used)} if used else set()


def subject_bonus(q: Question, heading: str, text: str,
                  rarest: set[str] | None = None) -> float:
    """A unit that is about the term asked after: it opens with it ("`buildchecker` will lock
    ..."), the more so with the term that sets it apart, or its section is named after it."""
    subject = content_words(q.text) - _GENERIC
    if not subject:
        return 0.0
    opening = content_words(" ".join(text.split()[:6]))
    bonus = 0.1 if subject & opening else 0.0
    if rarest and rarest & opening:
        bonus += 0.1
    if subject & content_words(heading):
        bonus += 0.05
    return bonus


def restates(q: Question, text: str) -> bool:
    """A passage that contains the question itself (a README's example of asking it), or says
    nothing the question does not ("Message in #alerts: Large number of overdue jobs")."""
    question = re.sub(r"[^a-z0-9 ]", "", q.text.lower()).strip()
    if len(question) > 20 and question in re.sub(r"[^a-z0-9 ]", "", text.lower()):
        return True
    # A value the question lacks is what it asks for: "Support & Trial channels: 5 years
    # retention" answers "retention for support & trial channels?" in one new word.
    if set(re.findall(r"\d+", text)) - set(re.findall(r"\d+", q.text)):
        return False
    words = content_words(text)
    novel = words - content_words(q.text)
    return len(words) >= 4 and len(novel) <= len(words) // 5
