"""The line asked for: when a question names a specific thing, the answer quotes the unit of its
documents that holds it, wherever it sits.

A strategy chooses a section for the question's shape (the Mitigation's steps, the sentences of
the sections search hit). A question that names a flag, a command, a file, a setting, a number
or an alert wants one line of its document that may lie elsewhere: "what flag skips the
confirmation in the failover script" is answered by one item of a long Options list, "which
file lists the blocked IPs" by one sentence of a Background section. So after the strategy has
answered, the units (sentences, list items with their commands, table rows with their headers,
code blocks) of the documents the answer cites are searched for the things the question names
(``named_things.py``): each thing weighted by how rare it is among those units, plus the
question's other words in the unit and, at half weight, beside it (its heading, the units
around it). The best unit joins the answer with its own citation, pointing at its lines, unless
the answer already shows it (or a unit that holds the things as well).

A question that asks for a kind of thing without naming one ("how fast must I be online") needs
a unit of that kind that shares enough of its words; when none does and the answer shows nothing
of the kind, the model's similarity to the question chooses among the units that hold one
("paged" and "notified" are different words, not different meanings).

Only the cited documents are searched: which document answers is search's decision; which of
its lines, this module's. A thing that most units of a document mention is its subject, not a
line's key ("haproxy" in the HAProxy runbook), and a thing no unit mentions adds nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from citewise.index.outline import Block, Item, Section
from citewise.index.sparse import tokenize
from citewise.language import is_english
from citewise.retrieval.answering.evidence import SKIP_HEADING, Composed, Evidence
from citewise.retrieval.answering.lexical import restates
from citewise.retrieval.answering.model import AnswerBlock, Citation, render_markdown
from citewise.retrieval.answering.named_things import (
    CODE_SPAN,
    NamedThing,
    asked_kinds,
    asking_words,
    looks_like,
    named_things,
)
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.quoting import (
    PLACEHOLDER,
    SENTENCE,
    block_text,
    introduced_block,
    introduced_blocks,
    is_reading_list,
    sentence_in_context,
    step_of_item,
    trim,
)
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.search import line_link

# A thing in more than this share of a document's units is what the document is about.
SUBJECT_SHARE = 0.25
# How much the question's other words count beside the named things (their full weight is
# one rare thing's), and the words beside the unit against the unit's own.
OTHER_WORDS_WEIGHT = 1.0
NEARBY_SHARE = 0.5
# The kind asked for ("what flag"), found in a unit, counts as much as this.
ASKED_KIND_WEIGHT = 0.5
# A unit found only by the kind asked for must share this much of the question's other words.
KIND_ONLY_MIN_OVERLAP = 0.34
# ... unless the answer shows nothing of a kind asked for ("how fast must I be online" answered
# without a duration): then the unit of that kind that the model finds closest to the question
# (its similarity and the words it shares, the best of ``RESERVE_CANDIDATES`` by those words)
# joins the answer, if the model finds it at least this close. Only then is the model asked.
# The words rarely tell these units apart (none shares enough of them), so the model reads
# many: a document's units in order, past the first screen of a long page.
RESERVE_MIN_SIMILARITY = 0.25
RESERVE_CANDIDATES = 40
# The answer's length budget, in rendered characters: the strategies' largest answer (a
# procedure of 3,500 characters and what frames it) and one unit beside it.
ANSWER_BUDGET = 4500
MAX_CODE_UNIT = 1500
# Kinds of answer that are one unit: the unit asked for goes first, unless the answer already
# holds some of what the question names (then it is on the spot, and the unit supports it). A
# procedure reads in order: the unit comes after it.
UNIT_ANSWERS = frozenset({"fact", "definition", "yesno", "general", "code"})
# What the trouble looks like: the engineer who asks what to do already sees it. A line there
# that names the error or the host of the question adds nothing to a procedure.
SYMPTOMS_HEADING = re.compile(r"\b(symptoms?|impact|signs)\b", re.I)


@dataclass
class Unit:
    doc_id: str
    section: Section
    block: Block
    prose: str  # a sentence, an item's words (its notes and sub-items too), a row; "" for code
    kind: str  # sentence | item | row | code
    code: str = ""  # a code block, an item's commands
    item: Item | None = None
    row: list[str] | None = None
    start: int | None = None
    end: int | None = None

    @cached_property
    def text(self) -> str:
        """What is searched: the prose and the code together."""
        return "\n".join(part for part in (self.prose, self.code) if part)


def add_named_unit(q: Question, ev: Evidence, composed: Composed,
                   scorer: Scorer | None = None) -> Composed:
    """``composed`` with the unit that holds what the question names, when it lacks it.
    ``scorer`` (the model's similarity to the question) chooses among the units of a kind the
    answer lacks when none shares enough of the question's words."""
    docs = [d for d in composed.documents if d in ev.outlines and d in ev.records]
    kinds = asked_kinds(q)
    literal = named_things(q)
    if not docs or not (literal or kinds):
        return composed
    units = [u for d in docs for u in _units(ev, d) if not restates(q, u.text)]
    if q.kind not in UNIT_ANSWERS:
        units = [u for u in units if not SYMPTOMS_HEADING.search(u.section.title)]
    if not units:
        return composed
    asking = asking_words(q)
    commands = [t for t in _commands(q, units) if t.text.lower() not in asking]
    things = _specific(literal + commands, units, ev, docs)
    if not things and not kinds:
        return composed
    best = _best_unit(q, things, kinds, units, composed, scorer)
    if best is None:
        return composed
    shown = _normal(render_markdown(composed.blocks))
    first = q.kind in UNIT_ANSWERS and not any(
        t.pattern().search(shown) for t in things)
    return _placed(ev, composed, best, first=first)


def _units(ev: Evidence, doc_id: str) -> list[Unit]:
    out: list[Unit] = []
    for s in ev.outlines[doc_id].sections:
        if SKIP_HEADING.match(s.title):
            continue
        for b in s.blocks:
            if b.kind in ("paragraph", "quote"):
                if PLACEHOLDER.match(b.text):
                    continue
                out.extend(Unit(doc_id, s, b, t, "sentence", start=b.start_line,
                                end=b.end_line) for t in SENTENCE.split(b.text) if t.strip())
            elif b.kind == "list" and not is_reading_list(b):
                for it in b.items:
                    out.append(Unit(doc_id, s, b, "\n".join([it.text, *it.notes, *it.sub]),
                                    "item", code="\n".join(c.text for c in it.code), item=it,
                                    start=it.start_line or b.start_line,
                                    end=it.end_line or b.end_line))
            elif b.kind == "table" and b.header:
                exact = (b.start_line is not None and b.end_line is not None
                         and b.end_line - b.start_line + 1 == len(b.rows) + 2)
                for k, row in enumerate(b.rows):
                    line = b.start_line + 2 + k if exact and b.start_line else None
                    text = "; ".join(f"{h}: {v}" for h, v in zip(b.header, row, strict=False)
                                     if v.strip())
                    out.append(Unit(doc_id, s, b, text, "row", row=row,
                                    start=line or b.start_line, end=line or b.end_line))
            elif b.kind == "code" and len(b.text) <= MAX_CODE_UNIT:
                out.append(Unit(doc_id, s, b, "", "code", code=b.text, start=b.start_line,
                                end=b.end_line))
    return [u for u in out if not ev.hides(u.text)]


def _commands(q: Question, units: list[Unit]) -> list[NamedThing]:
    """Words of the question that the documents write as code ("gsutil", "sv"), with the words
    after them that the code writes after them too ("sv restart")."""
    code = "\n".join([*(u.code for u in units if u.code),
                      *(m for u in units for m in CODE_SPAN.findall(u.text))]).lower()
    if not code:
        return []
    words = re.findall(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]|[a-z]", q.text.lower())
    out: list[NamedThing] = []
    i = 0
    while i < len(words):
        w = words[i]
        in_code = re.search(r"(?<![\w-])" + re.escape(w) + r"(?![\w-])", code)
        if len(w) < 2 or is_english(w) or w.isdigit() or not in_code:
            i += 1
            continue
        j = i + 1
        while j < len(words) and j - i < 4 and \
                " ".join(words[i:j + 1]) in code:
            j += 1
        out.append(NamedThing(" ".join(words[i:j]), "command"))
        i = j
    return out


def _specific(things: list[NamedThing], units: list[Unit], ev: Evidence,
              docs: list[str]) -> list[NamedThing]:
    """The things some unit holds and that no document is about: neither in a cited
    document's title nor in more than ``SUBJECT_SHARE`` of its units."""
    titles = " ".join(ev.records[d].title for d in docs)
    out: list[NamedThing] = []
    for t in things:
        pattern = t.pattern()
        if pattern.search(titles):
            continue
        share = max(sum(bool(pattern.search(u.text)) for u in units if u.doc_id == d)
                    / max(1, sum(u.doc_id == d for u in units)) for d in docs)
        if 0 < share <= SUBJECT_SHARE or share and len(units) < 8:
            out.append(t)
    return out


def _best_unit(q: Question, things: list[NamedThing], kinds: list[str], units: list[Unit],
               composed: Composed, scorer: Scorer | None = None) -> Unit | None:
    """The unit that holds the things best, if the answer does not already show one as good;
    failing that, the closest unit of a kind asked for that the answer lacks."""
    patterns = [(t, t.pattern()) for t in things]
    n = len(units)
    idf = {t: math.log(1 + n / max(1, sum(bool(p.search(u.text)) for u in units)))
           for t, p in patterns}
    named_terms = {w for t in things for w in tokenize(t.text)}
    other = set(tokenize(q.words)) - named_terms - set(tokenize(" ".join(kinds)))
    bags = [set(tokenize(u.text)) for u in units]
    # What is beside a unit: its heading, and the units before and after it in its section.
    near = []
    for k, u in enumerate(units):
        bag = set(tokenize(u.section.path))
        if k and units[k - 1].section is u.section:
            bag |= bags[k - 1]
        if k + 1 < n and units[k + 1].section is u.section:
            bag |= bags[k + 1]
        near.append(bag)
    # The question's words that some unit uses: a word no unit has tells none apart.
    df = {w: c for w in other if (c := sum(w in bag for bag in bags))}
    word_idf = {w: math.log(1 + n / c) for w, c in df.items()}
    other = set(df)
    total = sum(word_idf.values()) or 1.0
    shown = _normal(render_markdown(composed.blocks))
    # Kinds asked for that the answer shows nothing of, as a unit is searched for them.
    lacking = [kd for kd in kinds if not looks_like(kd, *_answer_code(composed.blocks))]
    reserve: list[tuple[float, int]] = []
    best: tuple[float, int] | None = None
    best_shown = 0.0
    for k, u in enumerate(units):
        held = [t for t, p in patterns if p.search(u.text)]
        kind_found = [kd for kd in kinds if looks_like(kd, u.prose, u.code)]
        own = sum(word_idf[w] for w in other & bags[k]) / total
        beside = sum(word_idf[w] for w in (other & near[k]) - bags[k]) / total
        if held:
            score = sum(idf[t] for t in held)
        elif kind_found and own + NEARBY_SHARE * beside >= KIND_ONLY_MIN_OVERLAP:
            score = 0.0  # the kind asked for, among the question's words
        else:
            if set(kind_found) & set(lacking) and not _is_shown(u, shown):
                reserve.append((own + NEARBY_SHARE * beside, k))
            continue
        if kind_found:
            score += ASKED_KIND_WEIGHT
        score += OTHER_WORDS_WEIGHT * (own + NEARBY_SHARE * beside)
        if _is_shown(u, shown):
            best_shown = max(best_shown, score)
        elif best is None or score > best[0]:
            best = (score, k)
    if best is None and not best_shown and scorer is not None and reserve:
        return _closest(scorer, [(w, units[k]) for w, k in reserve])
    if best is None or best_shown >= best[0]:
        return None
    return units[best[1]]


def _closest(scorer: Scorer, candidates: list[tuple[float, Unit]]) -> Unit | None:
    """Of units that hold a kind of thing the answer lacks, the one the model finds closest to
    the question, with the share of its words they hold beside; None when none is close."""
    candidates = sorted(candidates, key=lambda c: -c[0])[:RESERVE_CANDIDATES]
    similarity = scorer([u.text for _, u in candidates])
    scored = [(float(s) + words, float(s), u)
              for (words, u), s in zip(candidates, similarity, strict=True)]
    total, close, unit = max(scored, key=lambda c: c[0])
    return unit if close >= RESERVE_MIN_SIMILARITY else None


def _answer_code(blocks: list[AnswerBlock]) -> tuple[str, str]:
    """An answer's text apart from its code, read from its blocks (the Markdown adds list
    numbers and ``[n]`` marks, which are not values)."""
    prose: list[str] = []
    code: list[str] = []
    for b in blocks:
        if b.type == "code":
            code.append(b.text or "")
        elif b.type == "fact":
            prose.append(f"{b.label}: {b.value}")
        elif b.type == "steps":
            for step in b.steps or []:
                prose.extend([step.text, *step.notes])
                code.extend(c.text for c in step.code)
        else:
            prose.append(b.text or "")
    return "\n".join(prose), "\n".join(code)


def _normal(text: str) -> str:
    return " ".join(text.replace("`", "").replace("*", "").lower().split())


def _is_shown(u: Unit, shown: str) -> bool:
    """Whether the answer already quotes the unit (its first words; a row's every cell)."""
    if u.kind == "row" and u.row is not None:
        return all(_normal(v) in shown for v in u.row if v.strip())
    text = u.item.text if u.item is not None and u.item.text else u.text
    return _normal(text)[:160] in shown


def _placed(ev: Evidence, composed: Composed, u: Unit, *, first: bool) -> Composed:
    """The answer with the unit's blocks, under its own citation (the unit's lines), ``first``
    or after what the strategy chose; within ``ANSWER_BUDGET``."""
    blocks, quote, start = _blocks_of(ev, u)
    record = ev.records[u.doc_id]
    citations = [c.model_copy() for c in composed.citations]
    old = [b.model_copy(deep=True) for b in composed.blocks]
    if first:
        for c in citations:
            c.n += 1
        for b in old:
            b.citations = [n + 1 for n in b.citations]
    n = 1 if first else len(citations) + 1
    score = max((r.score for r in ev.results if r.document_id == u.doc_id), default=0.0)
    cited = Citation(
        n=n, document_id=u.doc_id, source=record.source, title=record.title,
        heading=u.section.path, path=record.path,
        url=line_link(record.url, record.link_template, u.section.anchor, start, u.end),
        start_line=start, end_line=u.end, score=round(score, 6), quote=quote)
    for b in blocks:
        b.citations = [n]
    room = ANSWER_BUDGET - len(render_markdown(blocks)) - 2
    old = _fitted(old, room)
    out = blocks + old if first else old + blocks
    citations = [cited, *citations] if first else [*citations, cited]
    used = {n for b in out for n in b.citations}
    citations = [c for c in citations if c.n in used]
    documents = list(dict.fromkeys([*composed.documents, u.doc_id]))
    return Composed(out, citations, composed.unit_score, documents)


def _blocks_of(ev: Evidence, u: Unit) -> tuple[list[AnswerBlock], str, int | None]:
    """The unit as blocks, with what it needs to be read (the sentence it leans on, the
    sentence that introduces its list or its command), its quote and its first line."""
    start = u.start
    if u.kind == "row" and u.row is not None:
        pairs = [(h, v) for h, v in zip(u.block.header, u.row, strict=False) if v.strip()]
        return ([AnswerBlock(type="fact", label=h, value=v) for h, v in pairs], u.text, start)
    out: list[AnswerBlock] = []
    frame = _frame(ev, u) if u.kind in ("item", "code") else None
    if frame is not None and frame.end_line and start and start - frame.end_line > 2:
        frame = None  # a list's frame far above the item: the heading says as much
    if frame is not None:
        out.append(AnswerBlock(type="paragraph", text=frame.text))
        start = frame.start_line or start
    if u.kind == "sentence":
        text = sentence_in_context(u.block, u.text)
        out.append(AnswerBlock(type="paragraph", text=trim(text)))
        after = introduced_block(ev, u.section, u.block, text)
        if after is not None:
            out.extend(introduced_blocks(ev, after))
            u.end = after.end_line or u.end
            text = f"{text}\n{block_text(after)}"
        return out, text, start
    if u.kind == "item" and u.item is not None:
        step = step_of_item(ev, u.item)
        if step is not None:
            number = u.item.number if u.block.ordered and u.item.number else 1
            out.append(AnswerBlock(type="steps", steps=[step], ordered=u.block.ordered,
                                   start=number))
        return out, u.text, start
    out.append(AnswerBlock(type="code", text=u.block.text, language=u.block.language))
    return out, "\n".join(filter(None, [frame.text if frame else "", u.text])), start


def _frame(ev: Evidence, u: Unit) -> Block | None:
    """The short paragraph just before a list or a code block that introduces it ("Options:",
    "To skip the prompt, run:")."""
    blocks = u.section.blocks
    k = next((i for i, b in enumerate(blocks) if b is u.block), 0)
    before = blocks[k - 1] if k > 0 else None
    if before is None or before.kind != "paragraph" or ev.hides(before.text):
        return None
    last = SENTENCE.split(before.text)[-1]
    if last.rstrip().endswith(":") and len(before.text) <= 300:
        return before
    return None


_MORE = re.compile(r"^(\d+) more steps follow in the source\.$")
# Room kept for the note that says what was cut.
_NOTE_ROOM = 50


def _fitted(blocks: list[AnswerBlock], room: int) -> list[AnswerBlock]:
    """``blocks`` cut to ``room`` rendered characters, the least read first: the last steps
    (a note says how many more follow in the source), then the last blocks; the first block
    always stays."""
    if len(render_markdown(blocks)) <= room:
        return blocks
    room -= _NOTE_ROOM
    steps_cut, cut = 0, False
    while len(render_markdown(blocks)) > room:
        last = blocks[-1]
        if last.type == "paragraph" and len(blocks) > 1 and last.text and \
                last.text.endswith("in the source."):
            m = _MORE.match(last.text)
            steps_cut += int(m.group(1)) if m else 0
            cut = True
            blocks = blocks[:-1]  # the note is written again below, counting what is cut now
        elif last.type == "steps" and last.steps and len(last.steps) > 1:
            last.steps = last.steps[:-1]
            steps_cut += 1
        elif len(blocks) > 1:
            blocks = blocks[:-1]
            cut = True
        else:
            break
    if steps_cut or cut:
        cites = next((b.citations for b in reversed(blocks) if b.type == "steps"),
                     blocks[-1].citations)
        text = (f"{steps_cut} more steps follow in the source." if steps_cut
                else "The section goes on in the source.")
        blocks.append(AnswerBlock(type="paragraph", citations=list(cites), text=text))
    return blocks
