""""What was the root cause of the outage?", "why does the compactor crash?": the section that
says why (Root cause, Possible causes), its opening prose whole and its list, not the sentences
of the Timeline that share the most words with the question.
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
from citewise.retrieval.answering.model import AnswerBlock, Step
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import SENTENCE, section_text, trim
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.answering.strategies.steps import MAX_STEPS

# Where a document says why: a postmortem's Root cause, a runbook's Possible causes.
CAUSE_HEADING = re.compile(r"\b(root[ -]?causes?|causes?|caused by|why (it|this) happen\w*|"
                           r"reasons?)\b", re.I)

# (document id, section, its first paragraph, its first list, the best hit's relevance in it)
Candidate = tuple[str, Section, Block | None, Block | None, float]


class CauseStrategy:
    def __init__(self, scorer: Scorer) -> None:
        self.score = scorer

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        candidates: list[Candidate] = []
        for doc_id in ev.documents(limit=2):
            outline = ev.outlines[doc_id]
            hits = ev.hit_sections(doc_id)
            for i, s in enumerate(outline.sections):
                if not CAUSE_HEADING.search(s.title) or SKIP_HEADING.match(s.title):
                    continue
                paragraph = next((b for b in s.blocks if b.kind == "paragraph"
                                  and not ev.hides(b.text)), None)
                listed = next((b for b in s.blocks if b.kind == "list" and b.items), None)
                if paragraph is None and listed is None:
                    continue
                candidates.append((doc_id, s, paragraph, listed, hits.get(i, 0.0)))
        if not candidates:
            return None
        first_doc = ev.documents(limit=1)[0]
        scores = self.score([embedding_text(ev.records[d].title, s.path,
                                            section_text(ev.outlines[d], s))
                             for d, s, *_ in candidates])
        scores = scores + np.array([0.5 * hit + (TOP_DOCUMENT_BONUS if d == first_doc else 0.0)
                                    for d, _s, _p, _l, hit in candidates])
        k = int(np.argmax(scores))
        doc_id, s, paragraph, listed, _hit = candidates[k]
        cites = Citations(ev)
        quoted = []
        if paragraph is not None:
            quoted.append(trim(" ".join(SENTENCE.split(paragraph.text)[:4])))
        steps = [Step(text=it.text) for it in listed.items[:MAX_STEPS]] if listed else []
        n = cites.cite(doc_id, s.path, s.anchor, s.start_line, s.end_line,
                       "\n".join(quoted + [st.text for st in steps]))
        blocks = [AnswerBlock(type="paragraph", text=t, citations=[n]) for t in quoted]
        if steps and listed is not None:
            blocks.append(AnswerBlock(type="steps", steps=steps, ordered=listed.ordered,
                                      citations=[n]))
        return Composed(blocks, cites.all(), float(scores[k]), [doc_id])
