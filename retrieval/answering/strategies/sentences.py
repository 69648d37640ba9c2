"""Anything else, and a fact no table or field holds: the best whole sentences.

Units (sentences, list items, table rows with their headers) of the sections the search hit are
ranked by the model, the question's rarer words, and for a value asked after ("how long", "what
threshold") by whether they state a number. A fact is one sentence, a second only when it is
nearly as good; other questions get up to three. Each comes with what it needs to be read: the
sentence it leans on, the list it is an item of.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from citewise.index.dense import embedding_text
from citewise.index.outline import Block, Section
from citewise.index.sparse import tokenize
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
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import (
    SENTENCE,
    block_text,
    introduced_block,
    introduced_blocks,
    item_in_context,
    sentence_in_context,
    trim,
    units_of,
)
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.search import SearchResult

# A value asked for: how long, how many, what threshold. A sentence with a number answers it.
QUANTITY = re.compile(r"\bhow (long|many|much|often|big|large|soon|fast|frequently|far back)\b|"
                      r"\bwhat ?(%|percent\w*)|\b(expiry|ttl|timeout|threshold|limits?|max(imum)?|"
                      r"min(imum)?|values?|size|quota|retention|interval|port|sla|slo|deadline|"
                      r"number of|cap|latest|earliest|version)\b", re.I)
_NUMBER = re.compile(r"(?<![\w.-])\d+([.:,]\d+)*\s*(%|[a-zA-Z]{0,8})(?![\w-])")
# "How often": a sentence that gives a frequency in words says it too.
_FREQUENCY = re.compile(r"\b(every|each|once an?|twice an?|per) (day|night|week|month|hour|"
                        r"minute|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
                        r"morning|evening|weekday|sprint|quarter|year)\b|\b(daily|nightly|"
                        r"hourly|weekly|monthly|yearly|annually)\b", re.I)
_VALUE = re.compile(r"\d|`")

# (document id, section, block, unit text)
Unit = tuple[str, Section, Block, str]


class SentencesStrategy:
    def __init__(self, scorer: Scorer) -> None:
        self.score = scorer

    def compose(self, q: Question, ev: Evidence,
                require: Callable[[str], bool] | None = None,
                subject: set[str] | None = None) -> Composed | None:
        """The best sentences; only those ``require`` accepts, when given, and only those
        whose document title, section path or own words share a term of ``subject``, when
        given."""
        # A fact is one sentence (two at most); anything else may take three.
        limit = 2 if q.kind in ("fact", "yesno") else 3
        units: list[Unit] = []
        for doc_id in ev.documents(limit=2):
            outline = ev.outlines[doc_id]
            hits = ev.hit_sections(doc_id)
            for i, s in enumerate(outline.sections):
                if i not in hits or SKIP_HEADING.match(s.title):
                    continue
                # The subject named by the document's title or the section's path holds for
                # every sentence under them.
                named = subject is None or bool(
                    subject & set(tokenize(f"{ev.records[doc_id].title} {s.path}")))
                for b in s.blocks:
                    for text in units_of(b):
                        if len(text.split()) >= 5 and not ev.hides(text) \
                                and not restates(q, text) and (require is None or require(text)) \
                                and (named or bool(subject and subject & set(tokenize(text)))):
                            units.append((doc_id, s, b, text))
        if not units:
            return None if require is not None else self._chunk_sentences(q, ev, limit)
        scores = self.score([embedding_text(ev.records[d].title, s.path, t)
                             for d, s, b, t in units])
        lexical = lexical_overlap(q.words, [t for *_, t in units])
        rarest = rarest_subject(q, [t for *_, t in units])
        quantity = QUANTITY.search(q.text)
        often = re.search(r"\bhow (often|frequently)\b", q.text, re.I)
        # The attribute asked for by name ("values", "expiry", "retention"), as tokens.
        attribute = {w for m in QUANTITY.finditer(q.text) if m.group(3)
                     for w in tokenize(m.group(3))}
        first_doc = units[0][0]
        ranked = []
        for k, (d, _s, _b, t) in enumerate(units):
            bonus = LEXICAL_WEIGHT * lexical[k]
            if d == first_doc:
                bonus += TOP_DOCUMENT_BONUS
            bonus += name_bonus(q, t)
            if q.kind == "fact" and _VALUE.search(t):
                bonus += 0.05
            if quantity and (_NUMBER.search(t) or often and _FREQUENCY.search(t)):
                bonus += 0.1  # "how long", "what expiry": a sentence with a number says it
                if attribute and attribute & set(tokenize(t)):
                    bonus += 0.1  # "the values are 250:30:300" for "what values"
                    if _states_value(attribute, t):
                        bonus += 0.1  # ... and says it: "the values are <value>"
            if q.kind == "fact":
                bonus += subject_bonus(q, "", t, rarest) / 2
            ranked.append((float(scores[k]) + bonus, k))
        ranked.sort(reverse=True)
        best = ranked[0][0]
        # A fact is one sentence; a second only when it is nearly as good (it may be the one).
        margin = 0.04 if q.kind in ("fact", "yesno") else 0.08
        chosen = [units[k] for score, k in ranked[:limit] if score >= best - margin]
        chosen.sort(key=lambda u: (u[0], u[2].start_line or 0))
        cites = Citations(ev)
        blocks: list[AnswerBlock] = []
        lists_shown: set[int] = set()
        for d, s, b, t in chosen:
            if b.kind == "list":
                if id(b) not in lists_shown:
                    lists_shown.add(id(b))
                    blocks.extend(item_in_context(ev, cites, d, s, b, t))
                continue
            if b.kind == "table" and (pairs := _row_pairs(b, t)):
                # A row is shown as what it is: its cells under their column headers.
                n = cites.cite(d, s.path, s.anchor, b.start_line, b.end_line, t)
                blocks.extend(AnswerBlock(type="fact", label=h, value=v, citations=[n])
                              for h, v in pairs)
                continue
            text = sentence_in_context(b, t)
            if blocks and blocks[-1].text and (text in blocks[-1].text or blocks[-1].text in text):
                blocks[-1].text = max(text, blocks[-1].text, key=len)  # one passage, once
                continue
            after = introduced_block(ev, s, b, text)
            end = after.end_line if after is not None and after.end_line else b.end_line
            n = cites.cite(d, s.path, s.anchor, b.start_line, end,
                           text if after is None else f"{text}\n{block_text(after)}")
            blocks.append(AnswerBlock(type="paragraph", text=trim(text), citations=[n]))
            if after is not None:
                if after.kind == "list":
                    lists_shown.add(id(after))
                for x in introduced_blocks(ev, after):
                    x.citations = [n]
                    blocks.append(x)
        return Composed(blocks, cites.all(), best, list(dict.fromkeys(u[0] for u in chosen)))

    def _chunk_sentences(self, q: Question, ev: Evidence, limit: int) -> Composed | None:
        """Documents without an outline (plain chunks): their best sentences."""
        units: list[tuple[SearchResult, str]] = []
        for r in ev.results[:3]:
            for line in r.text.split("\n"):
                for text in SENTENCE.split(line.strip().lstrip("-* ")):
                    if len(text.split()) >= 5 and not ev.hides(text) and \
                            not restates(q, text):
                        units.append((r, text))
        if not units:
            return None
        scores = self.score([embedding_text(r.title, r.heading, t) for r, t in units])
        order = np.argsort(-scores)[:limit]
        cites = Citations(ev)
        blocks = []
        for k in sorted(order.tolist()):
            r, t = units[k]
            n = cites.cite(r.document_id, r.heading, r.anchor, r.start_line, r.end_line, t,
                           symbol=r.symbol, score=r.score)
            blocks.append(AnswerBlock(type="paragraph", text=trim(t), citations=[n]))
        return Composed(blocks, cites.all(), float(scores[order[0]]),
                        [units[order[0]][0].document_id])


def _row_pairs(block: Block, unit: str) -> list[tuple[str, str]]:
    """(header, cell) of the table row that ``units_of`` spelled out as ``unit``."""
    for row in block.rows:
        pairs = [(h, v) for h, v in zip(block.header, row, strict=False) if v.strip()]
        if "; ".join(f"{h}: {v}" for h, v in pairs) == unit:
            return pairs
    return []


def _states_value(attribute: set[str], text: str) -> bool:
    """Whether ``text`` states the attribute's value: "the values are 250:30:300",
    "timeout = 30s", "expiry: 24 hours"."""
    for m in re.finditer(r"([A-Za-z_]+)\s*(?:is|are|was|of|=|:)\s*`?[\d]", text):
        if attribute & set(tokenize(m.group(1))):
            return True
    return False
