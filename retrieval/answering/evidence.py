"""What every answer strategy works from and hands back: the evidence, the citations, the answer.

``Evidence`` holds only what the caller may read (the service built it after the permission
filter); a strategy never reaches past it to the catalog or the index. ``Citations`` numbers the
passages a strategy quotes, one number per document section, so that two strategies that quote
the same section the same way cite it the same way. ``Composed`` is a strategy's answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from citewise.index.catalog import DocumentRecord
from citewise.index.outline import Outline
from citewise.retrieval.answering.hidden import HiddenTitles
from citewise.retrieval.answering.model import AnswerBlock, Citation
from citewise.retrieval.search import SearchResult, line_link

# "Related", "See also" and their kin: sections that point at other documents instead of saying
# something themselves. Their words find the document they name, not an answer.
SKIP_HEADING = re.compile(r"^(related|see also|references|further reading|links|"
                          r"related (alerts|links|runbooks|documents|pages)( and links)?)\b", re.I)
# A chunk packs short sections together, and a hit may be in any of them (which one, the chunk
# cannot say): the sections that start inside the chunk after its first count this share.
SPANNED_SECTION_SHARE = 0.5
# Search ranked the documents on more than one sentence can show (title, whole sections, BM25
# over the corpus): a unit of the best document starts a little ahead.
TOP_DOCUMENT_BONUS = 0.05


def points_elsewhere(result: SearchResult) -> bool:
    """A passage of a "Related" / "See also" list: it names another document's subject, so it
    finds that document's words without being an answer itself."""
    return bool(SKIP_HEADING.match(result.heading.rsplit(" > ", 1)[-1].strip()))


@dataclass
class Evidence:
    """What the composer may draw on: only passages and documents the caller may read."""

    results: list[SearchResult]
    outlines: dict[str, Outline]
    records: dict[str, DocumentRecord]
    relevance: dict[str, float]  # chunk id -> similarity to the question
    # Titles of documents the caller may not read.
    hidden_titles: HiddenTitles = field(default_factory=HiddenTitles)
    strip_injected: bool = False  # leave out lines aimed at a model (the injection guardrail)

    def documents(self, limit: int = 3) -> list[str]:
        """The documents with an outline to answer from, best first. A document found only by
        its "Related" list is found by a pointer to another one ("see Postgres connection
        exhaustion: apps time out waiting for a slot"): it comes after those found by what they
        say."""
        docs: list[str] = []
        pointing: list[str] = []
        for r in self.results:
            if r.document_id not in self.outlines:
                continue
            if points_elsewhere(r):
                if r.document_id not in pointing:
                    pointing.append(r.document_id)
            elif r.document_id not in docs:
                docs.append(r.document_id)
        docs += [d for d in pointing if d not in docs]
        return docs[:limit]

    def hit_sections(self, doc_id: str) -> dict[int, float]:
        """Section index -> the best relevance of a search hit inside it."""
        outline = self.outlines[doc_id]
        out: dict[int, float] = {}
        for r in self.results:
            if r.document_id != doc_id:
                continue
            relevance = self.relevance.get(r.chunk_id, r.score)
            # The section the chunk starts in, and every section that starts inside it.
            first = outline.section_at(r.start_line)
            for i, s in enumerate(outline.sections):
                if s is first:
                    out[i] = max(out.get(i, 0.0), relevance)
                elif (r.start_line is not None and r.end_line is not None
                      and s.start_line is not None and r.start_line < s.start_line <= r.end_line):
                    out[i] = max(out.get(i, 0.0), SPANNED_SECTION_SHARE * relevance)
        return out

    def hides(self, text: str) -> bool:
        """A sentence that only points at a document the caller may not read says nothing to
        them (and tells them it exists)."""
        return self.hidden_titles.named_in(text)


@dataclass
class Composed:
    """A strategy's answer: its blocks, the passages they cite, and how close its unit is."""

    blocks: list[AnswerBlock]
    citations: list[Citation]
    unit_score: float  # how close the chosen unit is to the question
    documents: list[str]  # document ids the answer quotes


class Citations:
    """Numbers passages as they are first quoted: one per document section."""

    def __init__(self, evidence: Evidence) -> None:
        self.ev = evidence
        self.items: dict[tuple[str, str], Citation] = {}

    def cite(self, doc_id: str, heading: str, anchor: str | None, start: int | None,
             end: int | None, quote: str, *, symbol: str | None = None,
             score: float = 0.0) -> int:
        key = (doc_id, heading)
        record = self.ev.records[doc_id]
        if not score:
            score = self._score(doc_id, heading)
        if key not in self.items:
            self.items[key] = Citation(
                n=len(self.items) + 1, document_id=doc_id, source=record.source,
                title=record.title, heading=heading, path=record.path,
                url=line_link(record.url, record.link_template, anchor, start, end),
                start_line=start, end_line=end, symbol=symbol, score=round(score, 6),
                quote=quote.strip())
            return self.items[key].n
        c = self.items[key]
        if quote.strip() and quote.strip() not in c.quote:
            c.quote = f"{c.quote}\n{quote.strip()}".strip()
        if start is not None:
            c.start_line = min(filter(None, [c.start_line, start]))
        if end is not None:
            c.end_line = max(filter(None, [c.end_line, end]))
        c.url = line_link(record.url, record.link_template, anchor, c.start_line, c.end_line)
        return c.n

    def all(self) -> list[Citation]:
        return sorted(self.items.values(), key=lambda c: c.n)

    def _score(self, doc_id: str, heading: str) -> float:
        """The search score of the best hit in the cited section (or, failing that, in its
        document): what the citation's passage scored when it was found."""
        hits = [r for r in self.ev.results if r.document_id == doc_id]
        inside = [r.score for r in hits if r.heading == heading
                  or heading and r.heading.startswith(heading + " > ")]
        return max(inside or [r.score for r in hits] or [0.0])
