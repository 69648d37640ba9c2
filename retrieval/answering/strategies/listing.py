""""What are the severity levels?": the section named so, as the list it is.

A question that asks for the members of something names a section ("Severity levels"); its
list, or its subsections each with what they say first, is the answer. A table row or sentence
that only shares the word answers less.
"""

from __future__ import annotations

import re

from citewise.index.sparse import tokenize
from citewise.retrieval.answering.evidence import Citations, Composed, Evidence
from citewise.retrieval.answering.model import AnswerBlock, Step
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import first_sentence

LISTING = re.compile(r"^\s*(what|which) are\b|^\s*(list|name) (the|all)\b", re.I)


class ListingStrategy:
    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        if not LISTING.search(q.text):
            return None
        asked = set(tokenize(q.text))
        for doc_id in ev.documents(limit=2):
            outline = ev.outlines[doc_id]
            hits = ev.hit_sections(doc_id)
            for i, s in enumerate(outline.sections):
                title = set(tokenize(s.title))
                if not s.level or not title or not title <= asked or i not in hits:
                    continue
                subs = [x for x in outline.subsections(s) if x.level == s.level + 1]
                lists = [b for b in s.blocks if b.kind == "list" and b.items]
                if lists:
                    items = [Step(text=it.text) for it in lists[0].items]
                    ordered = lists[0].ordered
                elif subs:
                    items = [Step(text=x.title + (f": {first_sentence(x)}"
                                                  if first_sentence(x) else ""))
                             for x in subs]
                    ordered = False
                else:
                    continue
                cites = Citations(ev)
                quote = "\n".join(it.text for it in items)
                n = cites.cite(doc_id, s.path, s.anchor, s.start_line, s.end_line, quote)
                blocks = [AnswerBlock(type="steps", steps=items, ordered=ordered,
                                      citations=[n])]
                return Composed(blocks, cites.all(), hits[i], [doc_id])
        return None
