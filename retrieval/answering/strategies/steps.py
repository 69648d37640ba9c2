"""Steps ("what do I do", "how do I fail over"): the procedure section of the best document.

The section is chosen by its heading (Mitigation, Procedure, Steps..., or the question's own
words), by where the search hits fall, and only among sections that hold steps or commands
(or a remedy said in prose). It is quoted whole and in order: every step with the commands
fenced under it and what it says after them, and the sentence that frames the list.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from citewise.index.dense import embedding_text
from citewise.index.outline import Block, Outline, Section
from citewise.index.sparse import tokenize
from citewise.retrieval.answering.evidence import SKIP_HEADING, Citations, Composed, Evidence
from citewise.retrieval.answering.lexical import lexical_overlap
from citewise.retrieval.answering.model import AnswerBlock, CodeSnippet, Step
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import (
    PLACEHOLDER,
    first_number,
    is_reading_list,
    list_steps,
    section_text,
    step_of_item,
)
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.synonyms import Synonyms

ACTION_HEADING = re.compile(
    r"(mitigat|remediat|resolut|resolv|\bfix|steps|procedure|recover|restor|roll ?back|"
    r"what to do|how to|fail ?over|workaround|solution|response|actions?\b|runbook|repair|"
    r"rotation|rotate|playbook|instructions)", re.I)
MEANING_HEADING = re.compile(r"(alert|meaning|means|summary|overview|what|description|about)",
                             re.I)
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
REMEDY_HEADING = re.compile(r"^(mitigation|remediation|resolution|fix|solution|workaround|"
                            r"what to do|how to fix)\b", re.I)
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+")
# A subsection step's later paragraphs come along when their prose holds a command.
_INLINE_CODE = re.compile(r"`[^`]{3,}`")
MAX_COMMAND_PARAGRAPH = 400
MAX_COMMAND_PARAGRAPHS = 2
_HOW_DO_I = re.compile(r"\bhow (?:do|can|should|would|to)(?: (?:i|we|you))?(?: \w+ly)? "
                       r"([a-z][a-z-]+)", re.I)
_VAGUE_VERBS = frozenset(tokenize("do fix get make handle deal solve sort resolve go use work "
                                  "find see know tell check it this that"))
SECTION_LEXICAL_WEIGHT = 0.3
ASKED_VERB_BONUS = 0.4
MAX_STEPS = 10
MAX_SUBSTEPS = 8
MAX_STEP_CHARS = 3500

# What an answer says before the steps, from the document they come from (an alert's meaning):
# blocks cited through the same ``Citations``, so that they are numbered first.
Lead = Callable[[Question, Evidence, str, Citations], list[AnswerBlock]]


class StepsStrategy:
    def __init__(self, scorer: Scorer, synonyms: Synonyms, lead: Lead | None = None) -> None:
        self.score = scorer
        # Search's synonyms (the built-in groups and the organisation's file): what the verb
        # of "how do I <verb>" also stands for.
        self.synonyms = synonyms
        self.lead = lead

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        for doc_id in ev.documents(limit=2):
            outline = ev.outlines[doc_id]
            for section in self._procedure_sections(q, ev, doc_id):
                cites = Citations(ev)
                blocks: list[AnswerBlock] = []
                if self.lead is not None:
                    blocks.extend(self.lead(q, ev, doc_id, cites))
                steps = _steps_of(ev, doc_id, outline, section, cites)
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
        hits = ev.hit_sections(doc_id)
        asked = set(tokenize(q.words))
        # A mitigation written as one paragraph ("Deleting an incorrect Endpoint should
        # trigger its recreation") is what to do all the same.
        candidates = [(i, s) for i, s in enumerate(outline.sections)
                      if s.level and not SKIP_HEADING.match(s.title)
                      and (_has_procedure(outline, s) or _is_remedy(s))]
        # The words of the question the section's text uses ("bounce it": the section that
        # says restart), weighted by how rare they are among the candidates.
        texts = [section_text(outline, s) for _, s in candidates]
        lexical = lexical_overlap(q.words, texts)
        # "how do I safely bounce it": the section that says restart is the one that does it.
        verbs = asked_verbs(q, self.synonyms)
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


def _steps_of(ev: Evidence, doc_id: str, outline: Outline, section: Section,
              cites: Citations) -> list[AnswerBlock]:
    blocks: list[AnswerBlock] = []
    framing = next((b for b in section.blocks if b.kind == "paragraph"), None)
    lists = [b for b in section.blocks if b.kind == "list" and b.items
             and not _is_contents(outline, b)]
    if any(b.kind == "code" for b in section.blocks) or len(lists) > 1:
        # Prose and commands, or lists with prose between: the section reads in order.
        return _section_in_order(ev, doc_id, section, cites, need_code=len(lists) <= 1)
    steps: list[Step | None] = []
    start, end = section.start_line, section.end_line
    ordered = True
    if lists:
        chosen = max(lists, key=lambda b: (b.ordered, len(b.items)))
        ordered = chosen.ordered
        steps = [step_of_item(ev, item) for item in chosen.items]
        start, end = chosen.start_line, chosen.end_line
        if framing is not None and framing.start_line and chosen.start_line \
                and framing.start_line > chosen.start_line:
            framing = None  # only a sentence that comes before the steps frames them
    else:
        subs = [s for s in outline.subsections(section) if s.level == section.level + 1]
        if subs and (ACTION_HEADING.search(section.title)
                     or all(STEP_HEADING.match(s.title) for s in subs)):
            steps = [_section_step(ev, s) for s in subs]
        else:
            return _section_in_order(ev, doc_id, section, cites,
                                     need_code=not _is_remedy(section))
    found = [s for s in steps if s is not None and s.text]
    if not found:
        return []
    kept: list[Step] = []
    used = 0
    for s in found:
        size = len(s.text) + sum(len(c.text) for c in s.code) + sum(len(n) for n in s.notes)
        if kept and (len(kept) >= MAX_STEPS or used + size > MAX_STEP_CHARS):
            break
        kept.append(s)
        used += size
    quote = "\n".join(s.text for s in kept)
    n = cites.cite(doc_id, section.path, section.anchor, start or section.start_line,
                   end or section.end_line, quote)
    if framing is not None and len(framing.text) <= 300 and not ev.hides(framing.text):
        blocks.append(AnswerBlock(type="paragraph", text=framing.text, citations=[n]))
    blocks.append(AnswerBlock(type="steps", steps=kept, ordered=ordered, citations=[n]))
    if len(kept) < len(found):
        blocks.append(AnswerBlock(
            type="paragraph", citations=[n],
            text=f"{len(found) - len(kept)} more steps follow in the source."))
    return blocks


def _section_step(ev: Evidence, section: Section) -> Step | None:
    """A subsection as one step: its title and first paragraph, its commands, and its own
    list under it."""
    paragraphs = [b.text for b in section.blocks
                  if b.kind == "paragraph" and not PLACEHOLDER.match(b.text)]
    code = [CodeSnippet(language=b.language, text=b.text)
            for b in section.blocks if b.kind == "code"]
    code += [CodeSnippet(language=c.language, text=c.text)
             for b in section.blocks if b.kind == "list" for it in b.items for c in it.code]
    code = code[:3]
    title = _NUMBERED.sub("", section.title)  # "1. Verify the pods": numbered once, by us
    text = title.rstrip(": ") + (f": {paragraphs[0]}" if paragraphs else "")
    if ev.hides(text):
        return None
    # The paragraphs after the first that carry a command in their prose ("You can check
    # this with `sudo lsof | grep deleted`"): what to do is often the second paragraph, the
    # first saying what the trouble is.
    notes = [p for p in paragraphs[1:] if _INLINE_CODE.search(p) and not ev.hides(p)
             and len(p) <= MAX_COMMAND_PARAGRAPH][:MAX_COMMAND_PARAGRAPHS]
    # A step that is a procedure of its own ("1. Issue a new token" and its six clicks):
    # its first list, under it.
    first = next((b for b in section.blocks if b.kind == "list" and b.items), None)
    if first is not None:
        for k, item in enumerate(first.items[:MAX_SUBSTEPS], 1):
            if not ev.hides(item.text):
                notes.append(f"{k}. {item.text}" if first.ordered else f"- {item.text}")
        if len(first.items) > MAX_SUBSTEPS:
            notes.append(f"({len(first.items) - MAX_SUBSTEPS} more in the source)")
    if not (paragraphs or code or notes) and (
            title.rstrip().endswith(":")
            or any(b.kind == "paragraph" and PLACEHOLDER.match(b.text)
                   for b in section.blocks)):
        return None  # a heading over nothing written yet ("Scenarios:", "@TODO")
    return Step(text=text, code=code, notes=notes)


def _section_in_order(ev: Evidence, doc_id: str, section: Section, cites: Citations, *,
                      need_code: bool = True) -> list[AnswerBlock]:
    """A procedure written as prose and commands: its paragraphs, code and lists, in order."""
    blocks: list[AnswerBlock] = []
    used = 0
    quoted: list[str] = []
    for b in section.blocks:
        if b.kind == "list" and _is_contents(ev.outlines[doc_id], b):
            continue
        if b.kind == "list":
            steps = list_steps(ev, b)
            if not steps:
                continue
            text = "\n".join(x.text for x in steps)
            size = len(text) + sum(len(c.text) for x in steps for c in x.code)
            if blocks and used + size > MAX_STEP_CHARS:
                break
            used += size
            quoted.append(text)
            # A section's first list is numbered from 1; a later one keeps its own number.
            blocks.append(AnswerBlock(type="steps", steps=steps, ordered=b.ordered,
                                      start=first_number(b) if blocks else 1))
            continue
        if b.kind not in ("paragraph", "code") or ev.hides(b.text) \
                or b.kind == "paragraph" and PLACEHOLDER.match(b.text):
            continue
        if blocks and used + len(b.text) > MAX_STEP_CHARS:
            blocks.append(AnswerBlock(type="paragraph",
                                      text="The section goes on in the source."))
            break
        used += len(b.text)
        quoted.append(b.text)
        if b.kind == "code":
            blocks.append(AnswerBlock(type="code", text=b.text, language=b.language))
        else:
            blocks.append(AnswerBlock(type="paragraph", text=b.text))
    if need_code and not any(a.type == "code" or a.steps and any(x.code for x in a.steps)
                             for a in blocks):
        return []
    n = cites.cite(doc_id, section.path, section.anchor, section.start_line,
                   section.end_line, "\n".join(quoted))
    for answered in blocks:
        answered.citations = [n]
    return blocks


def asked_verbs(q: Question, synonyms: Synonyms) -> set[str]:
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


def _has_procedure(outline: Outline, section: Section) -> bool:
    if any(b.kind in ("list", "code") for b in section.blocks):
        return True
    return any(b.kind in ("list", "code") for sub in outline.subsections(section)
               for b in sub.blocks)


def _is_remedy(section: Section) -> bool:
    """A section named for the fix that says it in prose."""
    return bool(REMEDY_HEADING.match(section.title)) and any(
        b.kind == "paragraph" and len(b.text.split()) >= 5 for b in section.blocks)


def _is_contents(outline: Outline, block: Block) -> bool:
    """A list of links to the document's own sections ("two options: 1. Connect via command
    line 2. Connect via BigQuery"): a table of contents, not steps; the sections are. Or a
    reading list, every item a bare link ("Processes: - [Blocking IPs in Cloudflare](...)"):
    what it names is elsewhere."""
    if is_reading_list(block):
        return True
    titles = [s.title.lower() for s in outline.sections if len(s.title) > 3]
    return bool(titles) and all(
        any(item.text.lower().startswith(t) for t in titles) for item in block.items)
