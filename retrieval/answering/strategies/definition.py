"""Definitions ("what is an error budget?"): the paragraph, list item or table row (with its
headers) that defines the term.

Candidates come from the sections the search hit, the sections headed as definitions (Overview,
Glossary...), the document's opening prose and, for a short best document, all of it: a term is
often defined in a list the hit only sits next to. They are matched against the clause that
asks for the definition when the question says more ("what is X for? it's down and ..."), and
a unit that opens with the term or is worded as a definition ("X is responsible for") comes
first.
"""

from __future__ import annotations

import re

import numpy as np

from citewise.index.dense import embedding_text
from citewise.index.outline import Block, Section
from citewise.retrieval.answering.evidence import (
    SKIP_HEADING,
    TOP_DOCUMENT_BONUS,
    Citations,
    Composed,
    Evidence,
)
from citewise.retrieval.answering.lexical import (
    LEXICAL_WEIGHT,
    lexical_overlap,
    name_bonus,
    rarest_subject,
    restates,
    subject_bonus,
)
from citewise.retrieval.answering.model import AnswerBlock
from citewise.retrieval.answering.question import Question, defining_clause
from citewise.retrieval.answering.quoting import SENTENCE, item_in_context, trim, units_of
from citewise.retrieval.answering.strategies.protocol import Scorer

DEFINITION_HEADING = re.compile(r"(what is|overview|summary|introduction|about|glossary|"
                                r"definition|background|concepts?|meaning)", re.I)
_DEFINES = re.compile(r"\b(is|are) (responsible for|used (to|for)|an?|the)\b|\brefers? to\b|"
                      r"\bstands? for\b|\bmeans\b|^\W*\w+\W*\s+[-–—:]\s", re.I)
# The best document is read whole when it has at most this many sections.
WHOLE_DOCUMENT_SECTIONS = 12

# (document id, section, block, unit text)
Unit = tuple[str, Section, Block, str]


class DefinitionStrategy:
    def __init__(self, scorer: Scorer) -> None:
        self.score = scorer

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        candidates: list[Unit] = []
        for rank, doc_id in enumerate(ev.documents(limit=2)):
            outline = ev.outlines[doc_id]
            hits = ev.hit_sections(doc_id)
            # The best document is read whole when it is short: a term is often defined in a
            # list the search hit only sits next to ("`yellow` - at least one replica ...").
            whole = rank == 0 and len(outline.sections) <= WHOLE_DOCUMENT_SECTIONS
            # Its opening prose too: where a page says what its subject is ("A GOV.UK mirror
            # is a static copy of ..."), whichever section the search hit.
            lead = next((i for i, s in enumerate(outline.sections)
                         if any(b.kind == "paragraph" for b in s.blocks)), None)
            for i, s in enumerate(outline.sections):
                if not whole and i not in hits and not DEFINITION_HEADING.search(s.title) \
                        and i != lead:
                    continue
                if SKIP_HEADING.match(s.title):
                    continue
                for b in s.blocks:
                    for text in units_of(b, paragraphs_whole=True):
                        if len(text.split()) >= 4 and not ev.hides(text) \
                                and not restates(q, text):
                            candidates.append((doc_id, s, b, text))
        if not candidates:
            return None
        # Matched against the clause that asks for the definition, when there is one.
        asked = defining_clause(q.text)
        scores = self.score([embedding_text(ev.records[d].title, s.path, t)
                             for d, s, b, t in candidates], asked)
        words = f"{asked} {' '.join(q.synonyms)}" if asked else q.words
        lexical = lexical_overlap(words, [t for *_, t in candidates])
        rarest = rarest_subject(q, [t for *_, t in candidates])
        first_doc = candidates[0][0]
        scores = scores + LEXICAL_WEIGHT * lexical + np.array(
            [name_bonus(q, t) + subject_bonus(q, s.title, t, rarest)
             + _defining_bonus(s.title, t)
             + (TOP_DOCUMENT_BONUS if d == first_doc else 0.0) for d, s, _b, t in candidates])
        k = int(np.argmax(scores))
        doc_id, s, b, text = candidates[k]
        cites = Citations(ev)
        if b.kind == "list":
            return Composed(item_in_context(ev, cites, doc_id, s, b, text), cites.all(),
                            float(scores[k]), [doc_id])
        text = trim(" ".join(SENTENCE.split(text)[:3]))
        n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, text)
        return Composed([AnswerBlock(type="paragraph", text=text, citations=[n])], cites.all(),
                        float(scores[k]), [doc_id])


def _defining_bonus(heading: str, text: str) -> float:
    """A unit under a Meaning or Overview heading, or worded as a definition ("X is responsible
    for", "`yellow` - all primary shards ..."), defines rather than mentions."""
    bonus = 0.05 if DEFINITION_HEADING.search(heading) else 0.0
    if _DEFINES.search(" ".join(text.split()[:12])):
        bonus += 0.05
    return bonus
