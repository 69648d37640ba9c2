"""An alert fired ("what do I do when CheckoutAPIHighLatencyP99 fires?"): what the alert means,
then the steps.

An engineer paged at night first needs to know what the alert says is wrong, in the runbook's
own words, and then what to do: the procedure of ``steps.py``, from the same document.
"""

from __future__ import annotations

from citewise.retrieval.answering.evidence import Citations, Composed, Evidence
from citewise.retrieval.answering.model import AnswerBlock
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import SENTENCE, trim
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.answering.strategies.steps import (
    ACTION_HEADING,
    MEANING_HEADING,
    StepsStrategy,
)
from citewise.retrieval.synonyms import Synonyms


class AlertStrategy:
    def __init__(self, scorer: Scorer, synonyms: Synonyms) -> None:
        self._steps = StepsStrategy(scorer, synonyms, lead=alert_meaning)

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        return self._steps.compose(q, ev)


def alert_meaning(q: Question, ev: Evidence, doc_id: str,
                  cites: Citations) -> list[AnswerBlock]:
    """The sentence or list item of the document that names the alert and says what it
    means, preferring the sections about meaning (What the alert means, Summary...)."""
    outline = ev.outlines[doc_id]
    for s in sorted(outline.sections, key=lambda s: not MEANING_HEADING.search(s.title)):
        for b in s.blocks:
            texts = [i.text for i in b.items] if b.kind == "list" else \
                SENTENCE.split(b.text) if b.kind == "paragraph" else []
            for text in texts:
                if any(a in text for a in q.alerts) and len(text.split()) > 5:
                    n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, text)
                    return [AnswerBlock(type="paragraph", text=trim(text), citations=[n])]
    # A runbook about the alert need not repeat its name in the meaning: "[This alert][X]
    # fires when..." reads, once the link is resolved, as "This alert fires when...". The
    # title names the alert, so the meaning section's first real paragraph is the meaning.
    if not any(a in ev.records[doc_id].title for a in q.alerts):
        return []
    for s in outline.sections:
        if not MEANING_HEADING.search(s.title) or ACTION_HEADING.search(s.title):
            continue
        for b in s.blocks:
            if b.kind == "paragraph" and len(b.text.split()) > 5 and not ev.hides(b.text):
                n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, b.text)
                return [AnswerBlock(type="paragraph", text=trim(b.text), citations=[n])]
    return []
