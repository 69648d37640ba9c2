"""What of a document may be quoted on its own, and how, so that nothing is out of context.

The units strategies choose among are sentences (or whole paragraphs), list items and table
rows spelled out with their headers, never a bare row, a "Related" link list or a placeholder
("TODO"). A list item is quoted with the sentence that introduces its list, and a short numbered
list whole: step 3 alone starts mid-list.
"""

from __future__ import annotations

import re

from citewise.index.outline import Block, Item, Outline, Section
from citewise.retrieval.answering.evidence import Citations, Evidence
from citewise.retrieval.answering.model import AnswerBlock, CodeSnippet, Step

SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
# A paragraph that stands in for text not written yet ("@TODO: more scenario examples").
PLACEHOLDER = re.compile(r"^\W*(todo|tbd|tba|fixme|coming soon)\b", re.I)
MAX_SENTENCE_CHARS = 500
# A numbered list a unit sits in is shown whole when it is this short.
MAX_CONTEXT_ITEMS = 6
MAX_CONTEXT_CHARS = 700
_LEANS_BACK = re.compile(r"^(this|that|these|those|it|they|so|then|thus|however|but|also|"
                         r"otherwise|in that case|if so)\b", re.I)


def trim(text: str) -> str:
    """``text`` cut at a word before ``MAX_SENTENCE_CHARS``, with an ellipsis."""
    return text if len(text) <= MAX_SENTENCE_CHARS else \
        text[:MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"


def is_reading_list(block: Block) -> bool:
    """A list whose every item is a bare link: what it names is elsewhere."""
    return bool(block.items) and all(it.link_only and not it.code for it in block.items)


def units_of(block: Block, *, paragraphs_whole: bool = False) -> list[str]:
    """What can be quoted of a block on its own: sentences (or whole paragraphs), list items,
    and table rows spelled out with their headers (never a bare row)."""
    if block.kind == "list":
        if is_reading_list(block):
            return []
        # Nested items are units too: "- CI tools:\n  - `buildchecker` locks main if ...".
        return [t for it in block.items for t in (it.text, *it.notes, *it.sub)]
    if block.kind in ("paragraph", "quote"):
        if PLACEHOLDER.match(block.text):
            return []
        return [block.text] if paragraphs_whole else SENTENCE.split(block.text)
    if block.kind == "table" and block.header:
        return ["; ".join(f"{h}: {v}" for h, v in zip(block.header, row, strict=False)
                          if v.strip()) for row in block.rows]
    return []


def sentence_in_context(block: Block, sentence: str) -> str:
    """A sentence with what it needs from its paragraph: the sentence before when it leans on
    it ("This will ban the IP for 24 hours"), the one after when it announces it ("The values
    are:") or is short. A fact torn from its paragraph misleads; a paragraph buries it."""
    if block.kind not in ("paragraph", "quote"):
        return sentence
    parts = SENTENCE.split(block.text)
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


# What a sentence that announces a block ("as follows:") may bring along: a command or a
# config snippet is the point of the sentence, a long listing is not.
MAX_INTRODUCED_CODE = 1200
# "you can run this on the database": the code below is what the sentence is about.
_POINTS_DOWN = re.compile(r"\b(run|use|execute|try|paste|apply) (this|these|the following)\b|"
                          r"\bthe following\b|\bbelow\b", re.I)


def introduced_block(ev: Evidence, section: Section, block: Block, text: str) -> Block | None:
    """The block a quoted paragraph announces, when ``text`` ends the paragraph: a code block
    after a colon or after "run this" ("Update the `teams.yml` file as follows:" without its
    YAML tells the reader there is something to do and not what), or a short list after a
    colon ("Turn on notifications for these channels:")."""
    if block.kind != "paragraph" or not block.text.rstrip().endswith(text.rstrip()):
        return None
    colon = text.rstrip().endswith(":")
    if not colon and not _POINTS_DOWN.search(SENTENCE.split(text)[-1]):
        return None
    k = next((i for i, b in enumerate(section.blocks) if b is block), None)
    if k is None or k + 1 >= len(section.blocks):
        return None
    after = section.blocks[k + 1]
    if ev.hides(after.text):
        return None
    if after.kind == "code" and len(after.text) <= MAX_INTRODUCED_CODE:
        return after
    if after.kind == "list" and colon and not is_reading_list(after) and \
            len(after.items) <= MAX_CONTEXT_ITEMS and \
            sum(len(it.text) for it in after.items) <= MAX_CONTEXT_CHARS:
        return after
    return None


def introduced_blocks(ev: Evidence, block: Block) -> list[AnswerBlock]:
    """``introduced_block``'s block as answer blocks: the code, or the list as steps."""
    if block.kind == "code":
        return [AnswerBlock(type="code", text=block.text, language=block.language)]
    steps = list_steps(ev, block)
    if not steps:
        return []
    return [AnswerBlock(type="steps", steps=steps, ordered=block.ordered,
                        start=first_number(block))]


def block_text(block: Block) -> str:
    """What a block says, as its citation quotes it."""
    if block.kind == "list":
        return "\n".join(it.text for it in block.items)
    return block.text


def first_sentence(section: Section) -> str:
    """What a section says first; a sentence that only opens a list ("Any of:") comes with the
    list's first item, which is what it says."""
    at = next((i for i, b in enumerate(section.blocks) if b.kind == "paragraph"), None)
    if at is None:
        return ""
    first = SENTENCE.split(section.blocks[at].text)[0].strip()
    if first.endswith(":"):
        listed = next((b for b in section.blocks[at + 1:] if b.kind == "list" and b.items), None)
        if listed is not None:
            more = " ..." if len(listed.items) > 1 else ""
            first = f"{first} {listed.items[0].text}{more}"
    return trim(first)


def section_text(outline: Outline, section: Section) -> str:
    """A section's words and its subsections' (headings, prose, lists, code)."""
    parts = []
    for s in (section, *outline.subsections(section)):
        parts.append(s.title)
        for b in s.blocks:
            parts.append(b.text if b.kind != "list" else
                         " ".join(t for it in b.items for t in (it.text, *it.notes, *it.sub)
                                  ) + " " + " ".join(c.text for it in b.items for c in it.code))
    return "\n".join(parts)


def step_of_item(ev: Evidence, item: Item) -> Step | None:
    """A list item as a step: its text, the commands under it, its notes and nested items;
    nothing that only points at a document the caller may not read."""
    if ev.hides(item.text):
        return None
    notes = [n for n in item.notes if not ev.hides(n)]
    notes += [f"- {s}" for s in item.sub if not ev.hides(s)]
    return Step(text=item.text, code=[CodeSnippet(language=c.language, text=c.text)
                                      for c in item.code], notes=notes)


def list_steps(ev: Evidence, block: Block) -> list[Step]:
    """A list's items as steps, leaving out those the caller may not see and empty ones."""
    return [x for x in (step_of_item(ev, it) for it in block.items) if x is not None and x.text]


def first_number(block: Block) -> int:
    """The number a list's first step keeps: its own ("3." continues a list that a code block
    split), 1 for a list without numbers."""
    return block.items[0].number if block.ordered and block.items and block.items[0].number \
        else 1


def item_in_context(ev: Evidence, cites: Citations, doc_id: str, section: Section,
                    block: Block, unit: str) -> list[AnswerBlock]:
    """A list item with what it needs to be read: the sentence that introduces its list
    ("What events qualify? For example:"), and, for a short numbered list, the list whole:
    step 3 alone ("As a final fallback, it tries the GCS mirror") starts mid-list."""
    out: list[AnswerBlock] = []
    quoted: list[str] = []
    k = next((i for i, x in enumerate(section.blocks) if x is block), 0)
    before = section.blocks[k - 1] if k > 0 else None
    if before is not None and before.kind == "paragraph" and not ev.hides(before.text):
        parts = SENTENCE.split(before.text)
        frame = parts[-1]
        if len(parts) > 1 and len(frame) < 40 and parts[-2].rstrip().endswith("?"):
            frame = f"{parts[-2]} {frame}"  # "What events qualify? For example:"
        if frame.rstrip().endswith((":", "?")) and len(frame) <= 300:
            out.append(AnswerBlock(type="paragraph", text=frame))
            quoted.append(frame)
    steps = [x for x in (step_of_item(ev, item) for item in block.items) if x is not None]
    size = sum(len(x.text) + sum(len(c.text) for c in x.code) for x in steps)
    if block.ordered and len(steps) == len(block.items) and \
            len(steps) <= MAX_CONTEXT_ITEMS and size <= MAX_CONTEXT_CHARS:
        out.append(AnswerBlock(type="steps", steps=steps, ordered=True,
                               start=first_number(block)))
        quoted.extend(x.text for x in steps)
        start, end = block.start_line, block.end_line
    else:
        item = next((it for it in block.items if unit in (it.text, *it.notes, *it.sub)),
                    None)
        step = step_of_item(ev, item) if item is not None and unit == item.text and \
            unit.rstrip().endswith(":") and (item.sub or item.code) else None
        if step is not None:
            # "Turn on notifications for these channels:" is said by the items under it.
            out.append(AnswerBlock(type="steps", steps=[step], ordered=False))
        else:
            out.append(AnswerBlock(type="paragraph", text=trim(unit)))
        quoted.append(unit)
        start = item.start_line if item and item.start_line else block.start_line
        end = item.end_line if item and item.end_line else block.end_line
    if len(out) > 1 and before is not None and before.start_line:
        start = before.start_line  # the frame's lines too
    n = cites.cite(doc_id, section.path, section.anchor, start, end, "\n".join(quoted))
    for x in out:
        x.citations = [n]
    return out
