""""What does IC stand for?": the words whose initials spell it, where the documents name them
(a heading, "incident commander (IC)"), then what that section says first.

Documents use an abbreviation far more often than they spell it out, so the sentences that
mention it rarely say what it stands for; the words that spell it do.
"""

from __future__ import annotations

import re

from citewise.index.dense import embedding_text
from citewise.index.outline import Outline, Section
from citewise.index.sparse import STOPWORDS
from citewise.retrieval.answering.evidence import Citations, Composed, Evidence
from citewise.retrieval.answering.lexical import restates
from citewise.retrieval.answering.model import AnswerBlock
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import first_sentence
from citewise.retrieval.answering.strategies.protocol import Scorer

# "What does IC stand for", "what is SRE short for": an abbreviation of 2 to 6 capitals.
STANDS_FOR = re.compile(r"\b(?i:what (does|do|is|'s) (an? |the )?)(?P<short>[A-Z][A-Z0-9]{1,5}) "
                        r"(?i:stand for|short for)\b")


class ExpansionStrategy:
    def __init__(self, scorer: Scorer) -> None:
        self.score = scorer

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        m = STANDS_FOR.search(q.text)
        if m is None:
            return None
        short = m.group("short")
        found = next(((doc_id, *where) for doc_id in ev.documents(limit=2)
                      if (where := _where_spelled_out(short, ev.outlines[doc_id]))), None)
        if found is None:
            return None
        doc_id, s, words = found
        cites = Citations(ev)
        n = cites.cite(doc_id, s.path, s.anchor, s.start_line, s.end_line,
                       f"{short}: {words}")
        blocks = [AnswerBlock(type="fact", label=short, value=words, citations=[n])]
        first = first_sentence(s)
        if first and not restates(q, first):
            blocks.append(AnswerBlock(type="paragraph", text=first, citations=[n]))
        score = float(self.score([embedding_text(ev.records[doc_id].title, s.path,
                                                 f"{short} {words}")])[0])
        return Composed(blocks, cites.all(), score, [doc_id])


def _where_spelled_out(short: str, outline: Outline) -> tuple[Section, str] | None:
    """The section whose heading spells ``short`` out, else the one whose prose does before
    "(IC)"; with the words."""
    for s in outline.sections:
        if (words := spelled_out(short, s.title)) is not None:
            return s, words
    marker = f"({short})"
    for s in outline.sections:
        for b in s.blocks:
            if b.kind == "paragraph" and marker in b.text and (words := spelled_out(
                    short, b.text.split(marker, 1)[0], at_end=True)) is not None:
                return s, words
    return None


def spelled_out(short: str, text: str, *, at_end: bool = False) -> str | None:
    """The words of ``text`` whose initials spell ``short`` ("incident commander" for IC): whole
    words of three letters or more, none a stop word; with ``at_end``, the words that end
    ``text`` (what comes before "(IC)")."""
    words = re.findall(r"[A-Za-z][\w-]*", text)
    letters = short.lower()
    starts = [len(words) - len(letters)] if at_end else range(len(words) - len(letters) + 1)
    for i in starts:
        run = words[i:i + len(letters)] if i >= 0 else []
        if len(run) == len(letters) and "".join(w[0].lower() for w in run) == letters and all(
                len(w) >= 3 and w.lower() not in STOPWORDS for w in run):
            return " ".join(run)
    return None
