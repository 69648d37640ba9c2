"""Extractive answers built from the units the sources offer, in the shape the question wants.

* **Steps** ("what do I do", "how do I fail over"): the procedure section of the best document,
  chosen by its heading (Mitigation, Procedure, Steps...) and by where the search hits fall, and
  quoted whole and in order: every step with the commands fenced under it and what it says
  after them, and the sentence that frames the list. An alert question gets what the alert
  means first, then the steps.
* **Facts** ("who owns", "which port", "how long"): a field of the document's front matter
  (owner, service, severity), a table row with its column headers, or the one sentence that
  holds the value.
* **Code** ("which function..."): the function's signature and docstring, with file and lines.
* **Definitions**: the paragraph that defines the term. Anything else: the best whole sentences.

Never a fragment out of context: no "Related"/"See also" link lists, no table row without its
headers, no sentence that only points at a document the caller may not read, nothing that merely
restates the question (as a README's example of asking it does).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from citewise.index.catalog import DocumentRecord
from citewise.index.dense import embedding_text
from citewise.index.outline import Block, Item, Outline, Section
from citewise.index.sparse import STOPWORDS, tokenize
from citewise.retrieval.answering.model import AnswerBlock, Citation, CodeSnippet, Step
from citewise.retrieval.answering.question import Question, defining_clause
from citewise.retrieval.search import SearchResult, line_link
from citewise.retrieval.synonyms import Synonyms

ACTION_HEADING = re.compile(
    r"(mitigat|remediat|resolut|resolv|\bfix|steps|procedure|recover|restor|roll ?back|"
    r"what to do|how to|fail ?over|workaround|solution|response|actions?\b|runbook|repair|"
    r"rotation|rotate|playbook|instructions)", re.I)
MEANING_HEADING = re.compile(r"(alert|meaning|means|summary|overview|what|description|about)",
                             re.I)
DEFINITION_HEADING = re.compile(r"(what is|overview|summary|introduction|about|glossary|"
                                r"definition|background|concepts?|meaning)", re.I)
# Where a document says why: a postmortem's Root cause, a runbook's Possible causes.
CAUSE_HEADING = re.compile(r"\b(root[ -]?causes?|causes?|caused by|why (it|this) happen\w*|"
                           r"reasons?)\b", re.I)
LISTING = re.compile(r"^\s*(what|which) are\b|^\s*(list|name) (the|all)\b", re.I)
SKIP_HEADING = re.compile(r"^(related|see also|references|further reading|links|"
                          r"related (alerts|links|runbooks|documents|pages)( and links)?)\b", re.I)
# A question about finding the cause ("how do I check", "where do I start") wants the
# Diagnosis section's steps, not the Mitigation's.
DIAGNOSE = re.compile(r"\b(check|verify|inspect|diagnos\w*|investigat\w*|debug|troubleshoot\w*|"
                      r"triage|where (do|should|can) (i|we) (start|begin|look)|"
                      r"where to (start|begin|look)|(see|find out|tell) (if|whether)|why)\b",
                      re.I)
DIAGNOSIS_HEADING = re.compile(r"diagnos|investigat|triage|check|troubleshoot", re.I)
# Subsections that are steps or alternatives of a procedure, not its parts (Meaning, Impact).
STEP_HEADING = re.compile(r"^\s*(\d+[.)]|step\b|option\b|case\b|scenario\b|alternative\b|"
                          r"if\b|when\b)", re.I)
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+")
# A value asked for: how long, how many, what threshold. A sentence with a number answers it.
QUANTITY = re.compile(r"\bhow (long|many|much|often|big|large|soon|fast|frequently)\b|"
                      r"\bwhat ?(%|percent\w*)|\b(expiry|ttl|timeout|threshold|limits?|max(imum)?|"
                      r"min(imum)?|values?|size|quota|retention|interval|port|sla|slo|deadline|"
                      r"number of|cap|latest|earliest|version)\b", re.I)
_NUMBER = re.compile(r"(?<![\w.-])\d+([.:,]\d+)*\s*(%|[a-zA-Z]{0,8})(?![\w-])")
# "How often": a sentence that gives a frequency in words says it too.
_FREQUENCY = re.compile(r"\b(every|each|once an?|twice an?|per) (day|night|week|month|hour|"
                        r"minute|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
                        r"morning|evening|weekday|sprint|quarter|year)\b|\b(daily|nightly|"
                        r"hourly|weekly|monthly|yearly|annually)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
_VALUE = re.compile(r"\d|`")
LEXICAL_WEIGHT = 0.2
# Search ranked the documents on more than one sentence can show (title, whole sections, BM25
# over the corpus): a unit of the best document starts a little ahead.
TOP_DOCUMENT_BONUS = 0.05
SECTION_LEXICAL_WEIGHT = 0.3
SPANNED_SECTION_SHARE = 0.5
ROW_MARGIN = 0.1
ASKED_VERB_BONUS = 0.4
WHOLE_DOCUMENT_SECTIONS = 12
MAX_STEPS = 10
MAX_SUBSTEPS = 8
MAX_STEP_CHARS = 3500
# A numbered list a fact's sentence sits in is shown whole when it is this short.
MAX_CONTEXT_ITEMS = 6
MAX_CONTEXT_CHARS = 700
MAX_SENTENCE_CHARS = 500

Scorer = Callable[..., np.ndarray]


@dataclass
class Evidence:
    """What the composer may draw on: only passages and documents the caller may read."""

    results: list[SearchResult]
    outlines: dict[str, Outline]
    records: dict[str, DocumentRecord]
    relevance: dict[str, float]  # chunk id -> similarity to the question
    hidden_titles: set[str] = field(default_factory=set)  # documents the caller may not read
    strip_injected: bool = False  # leave out lines aimed at a model (the injection guardrail)


@dataclass
class Composed:
    blocks: list[AnswerBlock]
    citations: list[Citation]
    unit_score: float  # how close the chosen unit is to the question
    documents: list[str]  # document ids the answer quotes


class _Citations:
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


class Composer:
    def __init__(self, scorer: Scorer, synonyms: Synonyms | None = None) -> None:
        # ``scorer(texts)`` -> similarity of each text to the question (cosine);
        # ``scorer(texts, clause)``: to that part of the question instead.
        self.score = scorer
        # Search's synonyms (the built-in groups and the organisation's file): what the verb
        # of "how do I <verb>" also stands for.
        self.synonyms = synonyms if synonyms is not None else Synonyms()

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        if not ev.results:
            return None
        top = ev.results[0]
        code_hit = next((r for r in ev.results[:5] if r.symbol), None)
        # "How does the git connector hand the token to git?" reads as prose, but when the
        # closest passages are functions, the function is the answer. The closest can be a
        # source file's opening lines (imports, module docstring: no symbol); it is code too.
        top_is_code = top.document_id not in ev.outlines and bool(
            top.symbol or (top.metadata or {}).get("language"))
        if code_hit is not None and (q.kind == "code" or (top_is_code and not q.wants_steps)
                                     or q.kind == "general" and code_hit in ev.results[:3]):
            return self._code(q, ev, code_hit)
        if q.wants_steps:
            steps = self._steps(q, ev)
            if steps is not None:
                return steps
        if q.kind == "fact":
            fact = self._fact(q, ev)
            if fact is not None:
                return fact
        if q.kind == "cause":
            cause = self._cause(q, ev)
            if cause is not None:
                return cause
        if q.kind == "definition":
            definition = self._expansion(q, ev) or self._definition(q, ev)
            if definition is not None:
                return definition
        return self._sentences(q, ev, limit=2 if q.kind in ("fact", "yesno") else 3)

    # Steps ------------------------------------------------------------------------------------
    def _documents(self, ev: Evidence, limit: int = 3) -> list[str]:
        """The documents to answer from, best first. A document found only by its "Related"
        list is found by a pointer to another one ("see Postgres connection exhaustion: apps
        time out waiting for a slot"): it comes after those found by what they say."""
        docs: list[str] = []
        pointing: list[str] = []
        for r in ev.results:
            if r.document_id not in ev.outlines:
                continue
            if points_elsewhere(r):
                if r.document_id not in pointing:
                    pointing.append(r.document_id)
            elif r.document_id not in docs:
                docs.append(r.document_id)
        docs += [d for d in pointing if d not in docs]
        return docs[:limit]

    def _hit_sections(self, ev: Evidence, doc_id: str) -> dict[int, float]:
        """Section index -> the best relevance of a hit inside it."""
        outline = ev.outlines[doc_id]
        out: dict[int, float] = {}
        for r in ev.results:
            if r.document_id != doc_id:
                continue
            relevance = ev.relevance.get(r.chunk_id, r.score)
            # The section the chunk starts in, and every section that starts inside it: a
            # chunk packs short sections together, and the hit may be in any of them (which
            # one, the chunk cannot say: the later ones count half).
            first = outline.section_at(r.start_line)
            for i, s in enumerate(outline.sections):
                if s is first:
                    out[i] = max(out.get(i, 0.0), relevance)
                elif (r.start_line is not None and r.end_line is not None
                      and s.start_line is not None and r.start_line < s.start_line <= r.end_line):
                    out[i] = max(out.get(i, 0.0), SPANNED_SECTION_SHARE * relevance)
        return out

    def _steps(self, q: Question, ev: Evidence) -> Composed | None:
        for doc_id in self._documents(ev, limit=2):
            outline = ev.outlines[doc_id]
            for section in self._procedure_sections(q, ev, doc_id):
                cites = _Citations(ev)
                blocks: list[AnswerBlock] = []
                if q.kind == "alert":
                    blocks.extend(self._alert_meaning(q, ev, doc_id, cites))
                steps = self._steps_of(ev, doc_id, outline, section, cites)
                if steps:
                    break
            else:
                continue
            quoted = " ".join(filter(None, (x.text for x in steps)))
            blocks = [b for b in blocks if not (b.text and b.text in quoted)]
            blocks.extend(steps)
            unit = f"{section.path}\n" + " ".join(
                s.text for b in steps if b.steps for s in b.steps[:4])
            score = float(self.score([embedding_text(ev.records[doc_id].title, section.path,
                                                     unit)])[0])
            return Composed(blocks, cites.all(), score, [doc_id])
        return None

    def _procedure_sections(self, q: Question, ev: Evidence, doc_id: str) -> list[Section]:
        """The sections that may hold what to do, best first: by their heading (Mitigation,
        Procedure, or the question's own words, "Requesting read access"), by where the search
        hits fall, and only among sections that hold steps or commands."""
        outline = ev.outlines[doc_id]
        hits = self._hit_sections(ev, doc_id)
        asked = set(tokenize(q.words))
        # A mitigation written as one paragraph ("Deleting an incorrect Endpoint should
        # trigger its recreation") is what to do all the same.
        candidates = [(i, s) for i, s in enumerate(outline.sections)
                      if s.level and not SKIP_HEADING.match(s.title)
                      and (_has_procedure(outline, s) or _is_remedy(s))]
        # The words of the question the section's text uses ("bounce it": the section that
        # says restart), weighted by how rare they are among the candidates.
        texts = [_section_text(outline, s) for _, s in candidates]
        lexical = _lexical(q.words, texts)
        # "how do I safely bounce it": the section that says restart is the one that does it.
        verbs = _asked_verbs(q, self.synonyms)
        diagnosing = bool(DIAGNOSE.search(q.text))
        ranked: list[tuple[float, int]] = []
        for (i, s), shared, text in zip(candidates, lexical, texts, strict=True):
            score = SECTION_LEXICAL_WEIGHT * float(shared)
            if verbs and verbs & set(tokenize(text)):
                score += ASKED_VERB_BONUS
            if ACTION_HEADING.search(s.title):
                score += 0.5 if diagnosing else 1.0
            title = set(tokenize(s.title))
            if title:
                score += 0.6 * len(title & asked) / len(title)
            score += hits.get(i, 0.0)
            # A parent whose subsections hold the hits is as good as them.
            score += max((hits.get(outline.sections.index(sub), 0.0) * 0.5
                          for sub in outline.subsections(s)), default=0.0)
            if DIAGNOSIS_HEADING.search(s.path) and diagnosing:
                score += 1.0  # "how do I check...": the steps that find the cause
            elif re.search(r"diagnos|investigat|triage|check|before you|prerequisite",
                           s.title, re.I):
                score -= 0.3  # steps that find the cause or prepare, not the ones that fix it
            if MEANING_HEADING.search(s.title) and not ACTION_HEADING.search(s.title):
                score -= 0.5  # what the alerts mean is said first; it is not what to do
            if score > 0.3:
                ranked.append((score, i))
        ranked.sort(key=lambda x: (-x[0], x[1]))
        return [outline.sections[i] for _, i in ranked[:3]]

    def _steps_of(self, ev: Evidence, doc_id: str, outline: Outline, section: Section,
                  cites: _Citations) -> list[AnswerBlock]:
        blocks: list[AnswerBlock] = []
        framing = next((b for b in section.blocks if b.kind == "paragraph"), None)
        lists = [b for b in section.blocks if b.kind == "list" and b.items
                 and not _is_contents(outline, b)]
        if any(b.kind == "code" for b in section.blocks) or len(lists) > 1:
            # Prose and commands, or lists with prose between: the section reads in order.
            return self._section_in_order(ev, doc_id, section, cites,
                                          need_code=len(lists) <= 1)
        steps: list[Step] = []
        start, end = section.start_line, section.end_line
        ordered = True
        if lists:
            chosen = max(lists, key=lambda b: (b.ordered, len(b.items)))
            ordered = chosen.ordered
            steps = [self._step(ev, item) for item in chosen.items]
            start, end = chosen.start_line, chosen.end_line
            if framing is not None and framing.start_line and chosen.start_line \
                    and framing.start_line > chosen.start_line:
                framing = None  # only a sentence that comes before the steps frames them
        else:
            subs = [s for s in outline.subsections(section) if s.level == section.level + 1]
            if subs and (ACTION_HEADING.search(section.title)
                         or all(STEP_HEADING.match(s.title) for s in subs)):
                steps = [self._section_step(ev, s) for s in subs]
            else:
                return self._section_in_order(ev, doc_id, section, cites,
                                              need_code=not _is_remedy(section))
        steps = [s for s in steps if s is not None and s.text]
        if not steps:
            return []
        kept, used = [], 0
        for s in steps:
            size = len(s.text) + sum(len(c.text) for c in s.code) + sum(len(n) for n in s.notes)
            if kept and (len(kept) >= MAX_STEPS or used + size > MAX_STEP_CHARS):
                break
            kept.append(s)
            used += size
        quote = "\n".join(s.text for s in kept)
        n = cites.cite(doc_id, section.path, section.anchor, start or section.start_line,
                       end or section.end_line, quote)
        if framing is not None and len(framing.text) <= 300 and not _hides(ev, framing.text):
            blocks.append(AnswerBlock(type="paragraph", text=framing.text, citations=[n]))
        blocks.append(AnswerBlock(type="steps", steps=kept, ordered=ordered, citations=[n]))
        if len(kept) < len(steps):
            blocks.append(AnswerBlock(
                type="paragraph", citations=[n],
                text=f"{len(steps) - len(kept)} more steps follow in the source."))
        return blocks

    def _step(self, ev: Evidence, item: Item) -> Step | None:
        if _hides(ev, item.text):
            return None
        notes = [n for n in item.notes if not _hides(ev, n)]
        notes += [f"- {s}" for s in item.sub if not _hides(ev, s)]
        return Step(text=item.text, code=[CodeSnippet(language=c.language, text=c.text)
                                          for c in item.code], notes=notes)

    def _section_step(self, ev: Evidence, section: Section) -> Step | None:
        paragraphs = [b.text for b in section.blocks
                      if b.kind == "paragraph" and not _PLACEHOLDER.match(b.text)]
        code = [CodeSnippet(language=b.language, text=b.text)
                for b in section.blocks if b.kind == "code"]
        code += [CodeSnippet(language=c.language, text=c.text)
                 for b in section.blocks if b.kind == "list" for it in b.items for c in it.code]
        code = code[:3]
        title = _NUMBERED.sub("", section.title)  # "1. Verify the pods": numbered once, by us
        text = title.rstrip(": ") + (f": {paragraphs[0]}" if paragraphs else "")
        if _hides(ev, text):
            return None
        # A step that is a procedure of its own ("1. Issue a new token" and its six clicks):
        # its first list, under it.
        first = next((b for b in section.blocks if b.kind == "list" and b.items), None)
        notes = []
        if first is not None:
            for k, item in enumerate(first.items[:MAX_SUBSTEPS], 1):
                if not _hides(ev, item.text):
                    notes.append(f"{k}. {item.text}" if first.ordered else f"- {item.text}")
            if len(first.items) > MAX_SUBSTEPS:
                notes.append(f"({len(first.items) - MAX_SUBSTEPS} more in the source)")
        if not (paragraphs or code or notes) and (
                title.rstrip().endswith(":")
                or any(b.kind == "paragraph" and _PLACEHOLDER.match(b.text)
                       for b in section.blocks)):
            return None  # a heading over nothing written yet ("Scenarios:", "@TODO")
        return Step(text=text, code=code, notes=notes)

    def _section_in_order(self, ev: Evidence, doc_id: str, section: Section,
                          cites: _Citations, *, need_code: bool = True) -> list[AnswerBlock]:
        """A procedure written as prose and commands: its paragraphs, code and lists, in order."""
        blocks: list[AnswerBlock] = []
        used = 0
        quoted: list[str] = []
        for b in section.blocks:
            if b.kind == "list" and _is_contents(ev.outlines[doc_id], b):
                continue
            if b.kind == "list":
                steps = [x for x in (self._step(ev, item) for item in b.items)
                         if x is not None and x.text]
                if not steps:
                    continue
                text = "\n".join(x.text for x in steps)
                size = len(text) + sum(len(c.text) for x in steps for c in x.code)
                if blocks and used + size > MAX_STEP_CHARS:
                    break
                used += size
                quoted.append(text)
                first = b.items[0].number if b.ordered and b.items[0].number else 1
                blocks.append(AnswerBlock(type="steps", steps=steps, ordered=b.ordered,
                                          start=first if first > 1 and blocks else 1))
                continue
            if b.kind not in ("paragraph", "code") or _hides(ev, b.text) \
                    or b.kind == "paragraph" and _PLACEHOLDER.match(b.text):
                continue
            if blocks and used + len(b.text) > MAX_STEP_CHARS:
                blocks.append(AnswerBlock(type="paragraph",
                                          text="The section goes on in the source."))
                break
            used += len(b.text)
            quoted.append(b.text)
            blocks.append(AnswerBlock(type=b.kind, text=b.text,
                                      language=b.language if b.kind == "code" else None))
        if need_code and not any(b.type == "code" or b.steps and any(x.code for x in b.steps)
                                 for b in blocks):
            return []
        n = cites.cite(doc_id, section.path, section.anchor, section.start_line,
                       section.end_line, "\n".join(quoted))
        for b in blocks:
            b.citations = [n]
        return blocks

    def _alert_meaning(self, q: Question, ev: Evidence, doc_id: str,
                       cites: _Citations) -> list[AnswerBlock]:
        outline = ev.outlines[doc_id]
        for s in sorted(outline.sections, key=lambda s: not MEANING_HEADING.search(s.title)):
            for b in s.blocks:
                texts = [i.text for i in b.items] if b.kind == "list" else \
                    _SENTENCE.split(b.text) if b.kind == "paragraph" else []
                for text in texts:
                    if any(a in text for a in q.alerts) and len(text.split()) > 5:
                        n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, text)
                        return [AnswerBlock(type="paragraph", text=_trim(text),
                                            citations=[n])]
        # A runbook about the alert need not repeat its name in the meaning: "[This alert][X]
        # fires when..." reads, once the link is resolved, as "This alert fires when...". The
        # title names the alert, so the meaning section's first real paragraph is the meaning.
        if not any(a in ev.records[doc_id].title for a in q.alerts):
            return []
        for s in outline.sections:
            if not MEANING_HEADING.search(s.title) or ACTION_HEADING.search(s.title):
                continue
            for b in s.blocks:
                if b.kind == "paragraph" and len(b.text.split()) > 5 and not _hides(ev, b.text):
                    n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, b.text)
                    return [AnswerBlock(type="paragraph", text=_trim(b.text), citations=[n])]
        return []

    # Facts ------------------------------------------------------------------------------------
    def _fact(self, q: Question, ev: Evidence) -> Composed | None:
        # "What are the severity levels?" names a section and wants it as the list it is; a
        # table row that only shares the word "severity" with the question answers less.
        listing = self._listing(q, ev)
        if listing is not None:
            return listing
        row = self._table_row(q, ev)
        if row is not None:
            # A row that shares the question's rarer words can still be about something else
            # ("Where does the client wait after a 429?" and a table of Confluence's statuses):
            # the sentence that answers it, when it is clearly closer, wins; the row otherwise
            # (it is the structured answer, label and value), and always when it has the column
            # asked for ("who owns": an Owner column).
            if q.fact_label and any(q.fact_label in _label_family(b.label or "")
                                    for b in row.blocks):
                return row
            sentence = self._sentences(q, ev, limit=2)
            if sentence is not None and sentence.unit_score > row.unit_score + ROW_MARGIN:
                return sentence
            return row
        return self._front_matter(q, ev)

    def _table_row(self, q: Question, ev: Evidence) -> Composed | None:
        """The table row whose cells share the question's rarer words, with its headers."""
        terms = _content_words(q.words)
        best, best_score = None, 0.0
        for doc_id in self._documents(ev):
            outline = ev.outlines[doc_id]
            hits = self._hit_sections(ev, doc_id)
            for i, s in enumerate(outline.sections):
                for b in s.blocks:
                    if b.kind != "table" or not b.header or not b.rows:
                        continue
                    # A word in many rows (a column's common value) tells rows apart poorly.
                    df: dict[str, int] = {}
                    for row in b.rows:
                        for w in terms & _content_words(" ".join(row)):
                            df[w] = df.get(w, 0) + 1
                    for row in b.rows:
                        shared = terms & _content_words(" ".join(row))
                        score = sum(1.0 / df[w] for w in shared)
                        if score >= 1.0 and score + (0.5 if i in hits else 0.0) > best_score:
                            best, best_score = (doc_id, s, b, row), score + (0.5 if i in hits
                                                                            else 0.0)
        if best is None:
            return None
        doc_id, s, b, row = best
        cites = _Citations(ev)
        pairs = [(h, v) for h, v in zip(b.header, row, strict=False) if v.strip()]
        quote = " | ".join(f"{h}: {v}" for h, v in pairs)
        n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, quote)
        if q.fact_label:
            # The column asked for first, then the row's key (its first column).
            asked = [p for p in pairs if q.fact_label in _label_family(p[0])]
            pairs = asked + [p for p in pairs[:1] if p not in asked] if asked else pairs
        blocks = [AnswerBlock(type="fact", label=h, value=v, citations=[n]) for h, v in pairs]
        score = float(self.score([embedding_text(ev.records[doc_id].title, s.path, quote)])[0])
        return Composed(blocks, cites.all(), score, [doc_id])

    def _front_matter(self, q: Question, ev: Evidence) -> Composed | None:
        """A field of the best document's front matter (owner, severity)."""
        if q.fact_label not in ("owner", "severity"):
            return None
        top = ev.results[0].document_id
        record = ev.records[top]
        meta = record.metadata or {}
        if not meta.get(q.fact_label):
            return None
        cites = _Citations(ev)
        value = str(meta[q.fact_label])
        n = cites.cite(top, "", None, 1, None, f"{q.fact_label}: {value}")
        blocks = [AnswerBlock(type="fact", label=q.fact_label.capitalize(), value=value,
                              citations=[n])]
        if meta.get("service"):
            blocks.append(AnswerBlock(type="fact", label="Service", value=str(meta["service"]),
                                      citations=[n]))
        score = float(self.score([embedding_text(record.title, "",
                                                 f"{q.fact_label} {value}")])[0])
        return Composed(blocks, cites.all(), score, [top])

    def _listing(self, q: Question, ev: Evidence) -> Composed | None:
        """"What are the severity levels?": the section named so, as the list it is."""
        if not LISTING.search(q.text):
            return None
        asked = set(tokenize(q.text))
        for doc_id in self._documents(ev, limit=2):
            outline = ev.outlines[doc_id]
            hits = self._hit_sections(ev, doc_id)
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
                    items = [Step(text=x.title + (f": {_first_sentence(x)}"
                                                  if _first_sentence(x) else ""))
                             for x in subs]
                    ordered = False
                else:
                    continue
                cites = _Citations(ev)
                quote = "\n".join(it.text for it in items)
                n = cites.cite(doc_id, s.path, s.anchor, s.start_line, s.end_line, quote)
                blocks = [AnswerBlock(type="steps", steps=items, ordered=ordered,
                                      citations=[n])]
                return Composed(blocks, cites.all(), hits[i], [doc_id])
        return None

    def _cause(self, q: Question, ev: Evidence) -> Composed | None:
        """"What was the root cause of the outage?", "why does the compactor crash?": the
        section that says why (Root cause, Possible causes), its opening prose whole and its
        list, not the sentences of the Timeline that share the most words with the question."""
        candidates = []  # (doc id, section, its blocks to quote, hit relevance)
        for doc_id in self._documents(ev, limit=2):
            outline = ev.outlines[doc_id]
            hits = self._hit_sections(ev, doc_id)
            for i, s in enumerate(outline.sections):
                if not CAUSE_HEADING.search(s.title) or SKIP_HEADING.match(s.title):
                    continue
                paragraph = next((b for b in s.blocks if b.kind == "paragraph"
                                  and not _hides(ev, b.text)), None)
                listed = next((b for b in s.blocks if b.kind == "list" and b.items), None)
                if paragraph is None and listed is None:
                    continue
                candidates.append((doc_id, s, paragraph, listed, hits.get(i, 0.0)))
        if not candidates:
            return None
        first_doc = self._documents(ev, limit=1)[0]
        scores = self.score([embedding_text(ev.records[d].title, s.path,
                                            _section_text(ev.outlines[d], s))
                             for d, s, *_ in candidates])
        scores = scores + np.array([0.5 * hit + (TOP_DOCUMENT_BONUS if d == first_doc else 0.0)
                                    for d, _s, _p, _l, hit in candidates])
        k = int(np.argmax(scores))
        doc_id, s, paragraph, listed, _hit = candidates[k]
        cites = _Citations(ev)
        quoted = []
        if paragraph is not None:
            quoted.append(_trim(" ".join(_SENTENCE.split(paragraph.text)[:4])))
        steps = [Step(text=it.text) for it in listed.items[:MAX_STEPS]] if listed else []
        n = cites.cite(doc_id, s.path, s.anchor, s.start_line, s.end_line,
                       "\n".join(quoted + [st.text for st in steps]))
        blocks = [AnswerBlock(type="paragraph", text=t, citations=[n]) for t in quoted]
        if steps:
            blocks.append(AnswerBlock(type="steps", steps=steps, ordered=listed.ordered,
                                      citations=[n]))
        return Composed(blocks, cites.all(), float(scores[k]), [doc_id])

    # Definitions and sentences ----------------------------------------------------------------
    def _expansion(self, q: Question, ev: Evidence) -> Composed | None:
        """"What does IC stand for?": the words whose initials spell it, where the documents
        name them (a heading, "incident commander (IC)"), then what that section says first.
        Documents use an abbreviation far more often than they spell it out, so the sentences
        that mention it rarely say what it stands for."""
        m = STANDS_FOR.search(q.text)
        if m is None:
            return None
        short = m.group("short")
        found = next(((doc_id, *where) for doc_id in self._documents(ev, limit=2)
                      if (where := _where_spelled_out(short, ev.outlines[doc_id]))), None)
        if found is None:
            return None
        doc_id, s, words = found
        cites = _Citations(ev)
        n = cites.cite(doc_id, s.path, s.anchor, s.start_line, s.end_line,
                       f"{short}: {words}")
        blocks = [AnswerBlock(type="fact", label=short, value=words, citations=[n])]
        first = _first_sentence(s)
        if first and not restates(q, first):
            blocks.append(AnswerBlock(type="paragraph", text=first, citations=[n]))
        score = float(self.score([embedding_text(ev.records[doc_id].title, s.path,
                                                 f"{short} {words}")])[0])
        return Composed(blocks, cites.all(), score, [doc_id])

    def _definition(self, q: Question, ev: Evidence) -> Composed | None:
        """The paragraph, list item or table row (with its headers) that defines the term."""
        candidates = []
        for rank, doc_id in enumerate(self._documents(ev, limit=2)):
            outline = ev.outlines[doc_id]
            hits = self._hit_sections(ev, doc_id)
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
                    for text in _units_of(b, paragraphs_whole=True):
                        if len(text.split()) >= 4 and not _hides(ev, text) \
                                and not restates(q, text):
                            candidates.append((doc_id, s, b, text))
        if not candidates:
            return None
        # Matched against the clause that asks for the definition, when there is one.
        asked = defining_clause(q.text)
        scores = self.score([embedding_text(ev.records[d].title, s.path, t)
                             for d, s, b, t in candidates], asked)
        words = f"{asked} {' '.join(q.synonyms)}" if asked else q.words
        lexical = _lexical(words, [t for *_, t in candidates])
        rarest = _rarest_subject(q, [t for *_, t in candidates])
        first_doc = candidates[0][0]
        scores = scores + LEXICAL_WEIGHT * lexical + np.array(
            [_name_bonus(q, t) + _subject_bonus(q, s.title, t, rarest)
             + _defining_bonus(s.title, t)
             + (TOP_DOCUMENT_BONUS if d == first_doc else 0.0) for d, s, _b, t in candidates])
        k = int(np.argmax(scores))
        doc_id, s, b, text = candidates[k]
        cites = _Citations(ev)
        if b.kind == "list":
            return Composed(self._item_in_context(ev, cites, doc_id, s, b, text), cites.all(),
                            float(scores[k]), [doc_id])
        text = _trim(" ".join(_SENTENCE.split(text)[:3]))
        n = cites.cite(doc_id, s.path, s.anchor, b.start_line, b.end_line, text)
        return Composed([AnswerBlock(type="paragraph", text=text, citations=[n])], cites.all(),
                        float(scores[k]), [doc_id])

    def _sentences(self, q: Question, ev: Evidence, limit: int) -> Composed | None:
        units = []  # (doc id, section, block, text)
        for doc_id in self._documents(ev, limit=2):
            outline = ev.outlines[doc_id]
            hits = self._hit_sections(ev, doc_id)
            for i, s in enumerate(outline.sections):
                if i not in hits or SKIP_HEADING.match(s.title):
                    continue
                for b in s.blocks:
                    for text in _units_of(b):
                        if len(text.split()) >= 5 and not _hides(ev, text) \
                                and not restates(q, text):
                            units.append((doc_id, s, b, text))
        if not units:
            return self._chunk_sentences(q, ev, limit)
        scores = self.score([embedding_text(ev.records[d].title, s.path, t)
                             for d, s, b, t in units])
        lexical = _lexical(q.words, [t for *_, t in units])
        rarest = _rarest_subject(q, [t for *_, t in units])
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
            bonus += _name_bonus(q, t)
            if q.kind == "fact" and _VALUE.search(t):
                bonus += 0.05
            if quantity and (_NUMBER.search(t) or often and _FREQUENCY.search(t)):
                bonus += 0.1  # "how long", "what expiry": a sentence with a number says it
                if attribute and attribute & set(tokenize(t)):
                    bonus += 0.1  # "the values are 250:30:300" for "what values"
                    if _states_value(attribute, t):
                        bonus += 0.1  # ... and says it: "the values are <value>"
            if q.kind == "fact":
                bonus += _subject_bonus(q, "", t, rarest) / 2
            ranked.append((float(scores[k]) + bonus, k))
        ranked.sort(reverse=True)
        best = ranked[0][0]
        # A fact is one sentence; a second only when it is nearly as good (it may be the one).
        margin = 0.04 if q.kind in ("fact", "yesno") else 0.08
        chosen = [units[k] for score, k in ranked[:limit] if score >= best - margin]
        chosen.sort(key=lambda u: (u[0], u[2].start_line or 0))
        cites = _Citations(ev)
        blocks: list[AnswerBlock] = []
        lists_shown: set[int] = set()
        for d, s, b, t in chosen:
            if b.kind == "list":
                if id(b) not in lists_shown:
                    lists_shown.add(id(b))
                    blocks.extend(self._item_in_context(ev, cites, d, s, b, t))
                continue
            if b.kind == "table" and (pairs := _row_pairs(b, t)):
                # A row is shown as what it is: its cells under their column headers.
                n = cites.cite(d, s.path, s.anchor, b.start_line, b.end_line, t)
                blocks.extend(AnswerBlock(type="fact", label=h, value=v, citations=[n])
                              for h, v in pairs)
                continue
            text = _in_context(b, t)
            if blocks and blocks[-1].text and (text in blocks[-1].text or blocks[-1].text in text):
                blocks[-1].text = max(text, blocks[-1].text, key=len)  # one passage, once
                continue
            n = cites.cite(d, s.path, s.anchor, b.start_line, b.end_line, text)
            blocks.append(AnswerBlock(type="paragraph", text=_trim(text), citations=[n]))
        return Composed(blocks, cites.all(), best, list(dict.fromkeys(u[0] for u in chosen)))

    def _item_in_context(self, ev: Evidence, cites: _Citations, doc_id: str, section: Section,
                         block: Block, unit: str) -> list[AnswerBlock]:
        """A list item with what it needs to be read: the sentence that introduces its list
        ("What events qualify? For example:"), and, for a short numbered list, the list whole:
        step 3 alone ("As a final fallback, it tries the GCS mirror") starts mid-list."""
        out: list[AnswerBlock] = []
        quoted: list[str] = []
        k = next((i for i, x in enumerate(section.blocks) if x is block), 0)
        before = section.blocks[k - 1] if k > 0 else None
        if before is not None and before.kind == "paragraph" and not _hides(ev, before.text):
            parts = _SENTENCE.split(before.text)
            frame = parts[-1]
            if len(parts) > 1 and len(frame) < 40 and parts[-2].rstrip().endswith("?"):
                frame = f"{parts[-2]} {frame}"  # "What events qualify? For example:"
            if frame.rstrip().endswith((":", "?")) and len(frame) <= 300:
                out.append(AnswerBlock(type="paragraph", text=frame))
                quoted.append(frame)
        steps = [x for x in (self._step(ev, item) for item in block.items) if x is not None]
        size = sum(len(x.text) + sum(len(c.text) for c in x.code) for x in steps)
        if block.ordered and len(steps) == len(block.items) and \
                len(steps) <= MAX_CONTEXT_ITEMS and size <= MAX_CONTEXT_CHARS:
            first = block.items[0].number or 1
            out.append(AnswerBlock(type="steps", steps=steps, ordered=True, start=first))
            quoted.extend(x.text for x in steps)
            start, end = block.start_line, block.end_line
        else:
            item = next((it for it in block.items if unit in (it.text, *it.notes, *it.sub)),
                        None)
            out.append(AnswerBlock(type="paragraph", text=_trim(unit)))
            quoted.append(unit)
            start = item.start_line if item and item.start_line else block.start_line
            end = item.end_line if item and item.end_line else block.end_line
        if len(out) > 1 and before is not None and before.start_line:
            start = before.start_line  # the frame's lines too
        n = cites.cite(doc_id, section.path, section.anchor, start, end, "\n".join(quoted))
        for x in out:
            x.citations = [n]
        return out

    def _chunk_sentences(self, q: Question, ev: Evidence, limit: int) -> Composed | None:
        """Documents without an outline (plain chunks): their best sentences."""
        units = []
        for r in ev.results[:3]:
            for line in r.text.split("\n"):
                for text in _SENTENCE.split(line.strip().lstrip("-* ")):
                    if len(text.split()) >= 5 and not _hides(ev, text) and \
                            not restates(q, text):
                        units.append((r, text))
        if not units:
            return None
        scores = self.score([embedding_text(r.title, r.heading, t) for r, t in units])
        order = np.argsort(-scores)[:limit]
        cites = _Citations(ev)
        blocks = []
        for k in sorted(order.tolist()):
            r, t = units[k]
            n = cites.cite(r.document_id, r.heading, r.anchor, r.start_line, r.end_line, t,
                           symbol=r.symbol, score=r.score)
            blocks.append(AnswerBlock(type="paragraph", text=_trim(t), citations=[n]))
        return Composed(blocks, cites.all(), float(scores[order[0]]),
                        [units[order[0]][0].document_id])

    # Code -------------------------------------------------------------------------------------
    def _code(self, q: Question, ev: Evidence, hit: SearchResult) -> Composed:
        language = (hit.metadata or {}).get("language")
        cites = _Citations(ev)
        n = cites.cite(hit.document_id, hit.heading, hit.anchor, hit.start_line, hit.end_line,
                       hit.text, symbol=hit.symbol, score=hit.score)
        where = f"`{hit.path}`" + (f" (lines {hit.start_line}-{hit.end_line})"
                                   if hit.start_line else "")
        name = (hit.symbol or "").rsplit(" > ", 1)[-1]
        if _DEFINITION_LINE.match(next((x for x in hit.text.split("\n") if x.strip()), "")):
            signature, doc = signature_and_docstring(hit.text, language)
            lead = f"`{name}` in {where}" + (f": {doc}" if doc else ".")
        else:
            # A later part of a long function (the chunker splits it along its statements):
            # its first line is no signature, and the part itself is what was found.
            lines = textwrap.dedent(hit.text.rstrip()).split("\n")
            signature = "\n".join(lines[:MAX_CODE_LINES])
            if len(lines) > MAX_CODE_LINES:
                signature += "\n..."
            lead = f"Part of `{name}` in {where}:"
        blocks = [AnswerBlock(type="paragraph", text=lead, citations=[n]),
                  AnswerBlock(type="code", language=language, text=signature, citations=[n])]
        score = ev.relevance.get(hit.chunk_id, hit.score)
        return Composed(blocks, cites.all(), score, [hit.document_id])


# The first line of a definition in the languages the code chunker reads: a decorator, a
# function, class or type, with the modifiers that may come first.
_DEFINITION_LINE = re.compile(
    r"^\s*(@|#\[|(export\s+|pub(\([^)]*\))?\s+|public\s+|private\s+|protected\s+|static\s+|"
    r"async\s+|abstract\s+|final\s+|default\s+)*(def|class|func|fn|function|interface|struct|"
    r"enum|impl|trait|type|module|object|record|const|let|var|val)\b)")
MAX_CODE_LINES = 20


def signature_and_docstring(code: str, language: str | None) -> tuple[str, str]:
    """A function's signature lines (decorators and the header up to its body), and the first
    paragraph of its docstring or leading comment."""
    lines = code.split("\n")
    header: list[str] = []
    depth = 0
    for line in lines:
        header.append(line)
        depth += line.count("(") + line.count("[") - line.count(")") - line.count("]")
        stripped = line.strip()
        if depth <= 0 and (stripped.endswith(":") or stripped.endswith("{")
                           or stripped.endswith("=>")) and not stripped.startswith("@"):
            break
        if len(header) >= 12:
            break
    rest = "\n".join(lines[len(header):]).strip()
    doc = ""
    m = re.match(r'^[rRbBuU]?("""|\'\'\')(.*?)(\1|$)', rest, re.S)
    if m:
        doc = m.group(2)
    else:
        comment = []
        for line in lines[len(header):]:
            s = line.strip()
            if s.startswith(("//", "#", "*", "/*")):
                comment.append(s.lstrip("/#* ").strip())
            elif s:
                break
        doc = " ".join(comment)
    doc = " ".join(doc.strip().split("\n\n")[0].split())
    return "\n".join(header).rstrip(), doc


# A paragraph that stands in for text not written yet ("@TODO: more scenario examples").
_PLACEHOLDER = re.compile(r"^\W*(todo|tbd|tba|fixme|coming soon)\b", re.I)

_LEANS_BACK = re.compile(r"^(this|that|these|those|it|they|so|then|thus|however|but|also|"
                         r"otherwise|in that case|if so)\b", re.I)


def _in_context(block: Block, sentence: str) -> str:
    """A sentence with what it needs from its paragraph: the sentence before when it leans on
    it ("This will ban the IP for 24 hours"), the one after when it announces it ("The values
    are:") or is short. A fact torn from its paragraph misleads; a paragraph buries it."""
    if block.kind not in ("paragraph", "quote"):
        return sentence
    parts = _SENTENCE.split(block.text)
    try:
        i = parts.index(sentence)
    except ValueError:
        return sentence
    lo, hi = i, i + 1
    if i > 0 and _LEANS_BACK.match(sentence) and len(parts[i - 1]) < 300:
        lo = i - 1
    if i + 1 < len(parts) and (sentence.rstrip().endswith(":") or len(sentence) < 80) \
            and len(parts[i + 1]) < 300:
        hi = i + 2
    return " ".join(parts[lo:hi])


def _units_of(block: Block, *, paragraphs_whole: bool = False) -> list[str]:
    """What can be quoted of a block on its own: sentences (or whole paragraphs), list items,
    and table rows spelled out with their headers (never a bare row)."""
    if block.kind == "list":
        if _is_reading_list(block):
            return []
        # Nested items are units too: "- CI tools:\n  - `buildchecker` locks main if ...".
        return [t for it in block.items for t in (it.text, *it.notes, *it.sub)]
    if block.kind in ("paragraph", "quote"):
        if _PLACEHOLDER.match(block.text):
            return []
        return [block.text] if paragraphs_whole else _SENTENCE.split(block.text)
    if block.kind == "table" and block.header:
        return ["; ".join(f"{h}: {v}" for h, v in zip(block.header, row, strict=False)
                          if v.strip()) for row in block.rows]
    return []


def _row_pairs(block: Block, unit: str) -> list[tuple[str, str]]:
    """(header, cell) of the table row that ``_units_of`` spelled out as ``unit``."""
    for row in block.rows:
        pairs = [(h, v) for h, v in zip(block.header, row, strict=False) if v.strip()]
        if "; ".join(f"{h}: {v}" for h, v in pairs) == unit:
            return pairs
    return []


def _name_bonus(q: Question, text: str) -> float:
    """Units that name what the question names ("UH", "img.fernhill.com") come first."""
    low = text.lower()
    return 0.1 * sum(1 for n in q.names if n.lower() in low)


def _lexical(question: str, texts: list[str]) -> np.ndarray:
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


_GENERIC = frozenset("""mean means meaning actually exactly point purpose used use role job
thing stand stands does define definition explain""".split())


def _states_value(attribute: set[str], text: str) -> bool:
    """Whether ``text`` states the attribute's value: "the values are 250:30:300",
    "timeout = 30s", "expiry: 24 hours"."""
    for m in re.finditer(r"([A-Za-z_]+)\s*(?:is|are|was|of|=|:)\s*`?[\d]", text):
        if attribute & set(tokenize(m.group(1))):
            return True
    return False


def _rarest_subject(q: Question, texts: list[str]) -> set[str]:
    """The question's subject words that the fewest candidate units use: in "es cluster health
    yellow, what does that mean" it is "yellow", not "cluster", that tells the units apart."""
    subject = _content_words(q.text) - _GENERIC
    bags = [_content_words(t) for t in texts]
    df = {w: sum(w in bag for bag in bags) for w in subject}
    used = [n for n in df.values() if n]
    return {w for w, n in df.items() if n and n == min(used)} if used else set()


_DEFINES = re.compile(r"\b(is|are) (responsible for|used (to|for)|an?|the)\b|\brefers? to\b|"
                      r"\bstands? for\b|\bmeans\b|^\W*\w+\W*\s+[-–—:]\s", re.I)


def _defining_bonus(heading: str, text: str) -> float:
    """A unit under a Meaning or Overview heading, or worded as a definition ("X is responsible
    for", "`yellow` - all primary shards ..."), defines rather than mentions."""
    bonus = 0.05 if DEFINITION_HEADING.search(heading) else 0.0
    if _DEFINES.search(" ".join(text.split()[:12])):
        bonus += 0.05
    return bonus


def _subject_bonus(q: Question, heading: str, text: str,
                   rarest: set[str] | None = None) -> float:
    """A unit that is about the term asked after: it opens with it ("`buildchecker` will lock
    ..."), the more so with the term that sets it apart, or its section is named after it."""
    subject = _content_words(q.text) - _GENERIC
    if not subject:
        return 0.0
    opening = _content_words(" ".join(text.split()[:6]))
    bonus = 0.1 if subject & opening else 0.0
    if rarest and rarest & opening:
        bonus += 0.1
    if subject & _content_words(heading):
        bonus += 0.05
    return bonus


# "What does IC stand for", "what is SRE short for": an abbreviation of 2 to 6 capitals.
STANDS_FOR = re.compile(r"\b(?i:what (does|do|is|'s) (an? |the )?)(?P<short>[A-Z][A-Z0-9]{1,5}) "
                        r"(?i:stand for|short for)\b")


def _where_spelled_out(short: str, outline: Outline) -> tuple[Section, str] | None:
    """The section whose heading spells ``short`` out, else the one whose prose does before
    "(IC)"; with the words."""
    for s in outline.sections:
        if (words := _spelled_out(short, s.title)) is not None:
            return s, words
    marker = f"({short})"
    for s in outline.sections:
        for b in s.blocks:
            if b.kind == "paragraph" and marker in b.text and (words := _spelled_out(
                    short, b.text.split(marker, 1)[0], at_end=True)) is not None:
                return s, words
    return None


def _spelled_out(short: str, text: str, *, at_end: bool = False) -> str | None:
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


def _first_sentence(section: Section) -> str:
    """What a section says first; a sentence that only opens a list ("Any of:") comes with the
    list's first item, which is what it says."""
    at = next((i for i, b in enumerate(section.blocks) if b.kind == "paragraph"), None)
    if at is None:
        return ""
    first = _SENTENCE.split(section.blocks[at].text)[0].strip()
    if first.endswith(":"):
        listed = next((b for b in section.blocks[at + 1:] if b.kind == "list" and b.items), None)
        if listed is not None:
            more = " ..." if len(listed.items) > 1 else ""
            first = f"{first} {listed.items[0].text}{more}"
    return _trim(first)


def points_elsewhere(result: SearchResult) -> bool:
    """A passage of a "Related" / "See also" list: it names another document's subject, so it
    finds that document's words without being an answer itself."""
    return bool(SKIP_HEADING.match(result.heading.rsplit(" > ", 1)[-1].strip()))


def _is_contents(outline: Outline, block: Block) -> bool:
    """A list of links to the document's own sections ("two options: 1. Connect via command
    line 2. Connect via BigQuery"): a table of contents, not steps; the sections are. Or a
    reading list, every item a bare link ("Processes: - [Blocking IPs in Cloudflare](...)"):
    what it names is elsewhere."""
    if _is_reading_list(block):
        return True
    titles = [s.title.lower() for s in outline.sections if len(s.title) > 3]
    return bool(titles) and all(
        any(item.text.lower().startswith(t) for t in titles) for item in block.items)


def _is_reading_list(block: Block) -> bool:
    return bool(block.items) and all(it.link_only and not it.code for it in block.items)


REMEDY_HEADING = re.compile(r"^(mitigation|remediation|resolution|fix|solution|workaround|"
                            r"what to do|how to fix)\b", re.I)


_HOW_DO_I = re.compile(r"\bhow (?:do|can|should|would|to)(?: (?:i|we|you))?(?: \w+ly)? "
                       r"([a-z][a-z-]+)", re.I)
_VAGUE_VERBS = frozenset(tokenize("do fix get make handle deal solve sort resolve go use work "
                                  "find see know tell check it this that"))


def _asked_verbs(q: Question, synonyms: Synonyms) -> set[str]:
    """The verb of "how do I <verb>" and what it stands for, as BM25 terms: "bounce" and
    "restart". Vague verbs (fix, handle, deal with) say nothing about which section."""
    m = _HOW_DO_I.search(q.text)
    if m is None:
        return set()
    verb = m.group(1).lower()
    terms = set(tokenize(verb))
    if not terms or terms & _VAGUE_VERBS:
        return set()
    for other in synonyms.additions(verb):
        terms |= set(tokenize(other))
    return terms


def _is_remedy(section: Section) -> bool:
    """A section named for the fix that says it in prose."""
    return bool(REMEDY_HEADING.match(section.title)) and any(
        b.kind == "paragraph" and len(b.text.split()) >= 5 for b in section.blocks)


def _section_text(outline: Outline, section: Section) -> str:
    """A section's words and its subsections' (headings, prose, lists, code)."""
    parts = []
    for s in (section, *outline.subsections(section)):
        parts.append(s.title)
        for b in s.blocks:
            parts.append(b.text if b.kind != "list" else
                         " ".join(t for it in b.items for t in (it.text, *it.notes, *it.sub)
                                  ) + " " + " ".join(c.text for it in b.items for c in it.code))
    return "\n".join(parts)


def _has_procedure(outline: Outline, section: Section) -> bool:
    if any(b.kind in ("list", "code") for b in section.blocks):
        return True
    return any(b.kind in ("list", "code") for sub in outline.subsections(section)
               for b in sub.blocks)


def _hides(ev: Evidence, text: str) -> bool:
    """A sentence that only points at a document the caller may not read says nothing to
    them (and tells them it exists)."""
    return any(title and title in text for title in ev.hidden_titles)


def restates(q: Question, text: str) -> bool:
    """A passage that contains the question itself (a README's example of asking it), or says
    nothing the question does not ("Message in #alerts: Large number of overdue jobs")."""
    question = re.sub(r"[^a-z0-9 ]", "", q.text.lower()).strip()
    if len(question) > 20 and question in re.sub(r"[^a-z0-9 ]", "", text.lower()):
        return True
    words = _content_words(text)
    novel = words - _content_words(q.text)
    return len(words) >= 4 and len(novel) <= len(words) // 5


_STOP = frozenset("""a an and are as at be but by can could do does did for from has have how i
if in into is it its me my of on or our should so that the their them then there these this
those to was we were what when where which who whom why will with would you your i'm it's
what's how's there's""".split())


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP and len(w) > 2}


def _label_family(label: str) -> str:
    low = label.lower()
    if low in ("team", "owning team", "owned by", "maintainer", "maintainers"):
        return "owner"
    return low


def _trim(text: str) -> str:
    return text if len(text) <= MAX_SENTENCE_CHARS else \
        text[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
