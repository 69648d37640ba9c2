"""Prose documents as outlines: sections, and the paragraphs, lists, code and tables in them.

The chunker serves the embedding model; the outline serves the answer (see ``index/outline.py``).
Markdown is read with markdown-it (CommonMark plus tables), which keeps what an answer needs and
unstructured's elements lose: a numbered step's number, the commands fenced under it, the header
row of a table. HTML (wiki exports, Confluence pages after ``storage_format``) is read with lxml,
plain text by blank lines. Every block keeps its line range in the stored file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from markdown_it.token import Token

from citewise.index.outline import Block, Code, Item, Outline, Section
from citewise.ingest.anchors import AnchorStyle, github_anchor
from citewise.ingest.markdown import close_of, inline_text, markdown_tokens, only_a_link, table_rows

if TYPE_CHECKING:  # lxml is imported where HTML is read
    from lxml.html import HtmlElement

_SPACES = re.compile(r"\s+")
_NUMBERED = re.compile(r"^\s*(\d+)[.)]\s+(.*)")
_BULLET = re.compile(r"^\s*[-*+•]\s+(.*)")


def build_outline(text: str, media_type: str, *, title: str, line_offset: int = 0,
                  anchor: AnchorStyle = github_anchor) -> Outline:
    """The outline of a prose document's text (its body, after any front matter)."""
    if media_type == "text/markdown":
        return _Markdown(text, title, line_offset, anchor).outline()
    if media_type == "text/html":
        return _html_outline(text, title, line_offset, anchor)
    return _text_outline(text, line_offset)


class _Markdown:
    def __init__(self, text: str, title: str, offset: int, anchor: AnchorStyle) -> None:
        self.tokens = markdown_tokens(text)
        self.lines = text.count("\n") + 1
        self.title = title
        self.offset = offset
        self.anchor = anchor

    def line(self, token: Token, end: bool = False) -> int | None:
        if token.map is None:
            return None
        return (token.map[1] if end else token.map[0] + 1) + self.offset

    def outline(self) -> Outline:
        sections = [Section(title="", path="", level=0, start_line=1 + self.offset)]
        stack: list[tuple[int, str]] = []
        tokens = self.tokens
        i = 0
        first_heading = True
        while i < len(tokens):
            t = tokens[i]
            if t.type == "heading_open":
                level = int(t.tag[1])
                text = inline_text(tokens[i + 1], code_marks=False)
                i += 3
                if first_heading and level == 1 and text.strip() == self.title.strip():
                    first_heading = False  # the document's own title: not a section
                    continue
                first_heading = False
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, text))
                sections.append(Section(
                    title=text, path=" > ".join(h for _, h in stack), level=level,
                    anchor=self.anchor(text, self.title), start_line=self.line(t)))
                continue
            block, i = self.block(i)
            if block is not None and not _continues_item(sections[-1], block):
                sections[-1].blocks.append(block)
        _close(sections, self.lines + self.offset)
        return Outline([s for s in sections if s.blocks or s.level])

    def block(self, i: int) -> tuple[Block | None, int]:
        t = self.tokens[i]
        if t.type == "paragraph_open":
            text = inline_text(self.tokens[i + 1])
            return Block("paragraph", text=text, start_line=self.line(t),
                         end_line=self.line(t, end=True)), i + 3
        if t.type in ("fence", "code_block"):
            return Block("code", text=t.content.rstrip("\n"),
                         # "``` " has an info string of blanks: no language.
                         language=next(iter((t.info or "").split()), None),
                         start_line=self.line(t), end_line=self.line(t, end=True)), i + 1
        if t.type in ("bullet_list_open", "ordered_list_open"):
            return self.list_block(i)
        if t.type == "table_open":
            return self.table(i)
        if t.type == "html_block" and "<table" in t.content.lower():
            # A table written as HTML inside Markdown (exports from Google Docs do this): the
            # rows an answer quotes, with their headers, as a Markdown table's would be.
            return _embedded_table(t.content, self.line(t), self.line(t, end=True)), i + 1
        if t.type == "blockquote_open":
            close = self._close_of(i)
            inner = [inline_text(x) for x in self.tokens[i:close] if x.type == "inline"]
            return Block("quote", text=" ".join(inner), start_line=self.line(t),
                         end_line=self.line(t, end=True)), close + 1
        return None, i + 1

    def _close_of(self, i: int) -> int:
        return close_of(self.tokens, i)

    def list_block(self, i: int) -> tuple[Block, int]:
        t = self.tokens[i]
        close = self._close_of(i)
        block = Block("list", ordered=t.type == "ordered_list_open", start_line=self.line(t),
                      end_line=self.line(t, end=True))
        # Numbered as a reader sees them: "1. 1. 1." renders as steps 1, 2 and 3.
        number = int(t.attrGet("start") or 1) if block.ordered else None
        j = i + 1
        while j < close:
            if self.tokens[j].type == "list_item_open":
                end = self._close_of(j)
                block.items.append(self.item(j, end, number))
                number = number + 1 if number is not None else None
                j = end + 1
            else:
                j += 1
        return block, close + 1

    def item(self, start: int, end: int, number: int | None) -> Item:
        opener = self.tokens[start]
        item = Item(text="", start_line=self.line(opener), end_line=self.line(opener, end=True),
                    number=number)
        j = start + 1
        while j < end:
            t = self.tokens[j]
            if t.type == "paragraph_open":
                text = inline_text(self.tokens[j + 1])
                if not item.text:
                    item.text = text
                    item.link_only = only_a_link(self.tokens[j + 1])
                else:
                    item.notes.append(text)
                j += 3
            elif t.type in ("fence", "code_block"):
                item.code.append(Code(t.content.rstrip("\n"),
                                      (t.info or "").split()[0] if t.info else None))
                j += 1
            elif t.type in ("bullet_list_open", "ordered_list_open"):
                close = self._close_of(j)
                item.sub.extend(inline_text(x) for x in self.tokens[j:close]
                                if x.type == "inline")
                j = close + 1
            else:
                j += 1
        return item

    def table(self, i: int) -> tuple[Block, int]:
        header, rows, close = table_rows(self.tokens, i)
        start = self.tokens[i]
        return Block("table", header=header, rows=rows, start_line=self.line(start),
                     end_line=self.line(start, end=True)), close + 1


def _continues_item(section: Section, block: Block) -> bool:
    """A command block right after a list whose last item announces it ("Restart the pods:")
    belongs to that item: authors often forget to indent it. Attached, it stays with its step.
    """
    if block.kind != "code" or not section.blocks:
        return False
    last = section.blocks[-1]
    if last.kind != "list" or not last.items:
        return False
    item = last.items[-1]
    if item.code or not item.text.rstrip().endswith(":"):
        return False
    item.code.append(Code(block.text, block.language))
    item.end_line = last.end_line = block.end_line
    return True


def _close(sections: list[Section], last_line: int) -> None:
    """Each section runs to the line before the next heading of its level or above."""
    for n, s in enumerate(sections):
        end = last_line
        for later in sections[n + 1:]:
            if later.level and (s.level == 0 or later.level <= s.level) and later.start_line:
                end = later.start_line - 1
                break
        s.end_line = end


# HTML ------------------------------------------------------------------------------------------
_HTML_HEADINGS = {f"h{n}": n for n in range(1, 7)}


def _html_outline(text: str, title: str, offset: int, anchor: AnchorStyle) -> Outline:
    from lxml import html as lxml_html

    try:
        root = lxml_html.document_fromstring(text)
    except Exception:  # empty or unparseable: nothing to answer from
        return Outline()
    body = root.find("body")
    if body is None:
        body = root
    sections = [Section(title="", path="", level=0, start_line=1 + offset)]
    stack: list[tuple[int, str]] = []
    first_heading = [True]

    def line(el: HtmlElement) -> int | None:
        return (el.sourceline + offset) if el.sourceline else None

    def text_of(el: HtmlElement) -> str:
        return _SPACES.sub(" ", _inline_html(el)).strip()

    def walk(el: HtmlElement) -> None:
        for child in el:
            tag = child.tag if isinstance(child.tag, str) else ""
            if tag in _HTML_HEADINGS:
                level, heading = _HTML_HEADINGS[tag], text_of(child).replace("`", "")
                if first_heading[0] and level == 1 and heading == title.strip():
                    first_heading[0] = False
                    continue
                first_heading[0] = False
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, heading))
                sections.append(Section(title=heading, path=" > ".join(h for _, h in stack),
                                        level=level, anchor=anchor(heading, title),
                                        start_line=line(child)))
            elif tag == "p":
                content = text_of(child)
                if content:
                    sections[-1].blocks.append(Block("paragraph", text=content,
                                                     start_line=line(child)))
            elif tag in ("ul", "ol"):
                sections[-1].blocks.append(_html_list(child, tag == "ol", line, text_of))
            elif tag == "pre":
                code = child.find(".//code")
                language = None
                if code is not None:
                    m = re.search(r"language-([\w+#.-]+)", code.get("class") or "")
                    language = m.group(1) if m else code.get("data-language")
                sections[-1].blocks.append(Block("code", text=child.text_content().strip("\n"),
                                                 language=language, start_line=line(child)))
            elif tag == "table":
                sections[-1].blocks.append(_html_table(child, line, text_of))
            elif tag == "blockquote":
                sections[-1].blocks.append(Block("quote", text=text_of(child),
                                                 start_line=line(child)))
            elif tag in ("div", "section", "article", "main", "body", "details", "aside"):
                walk(child)

    walk(body)
    _close(sections, text.count("\n") + 1 + offset)
    _fill_block_ends(sections)
    return Outline([s for s in sections if s.blocks or s.level])


def _fill_block_ends(sections: list[Section]) -> None:
    """lxml knows where an element starts, not where it ends: a block ends where the next one
    (or its section) begins, so a table is cited by all its lines, not its first."""
    for section in sections:
        for i, block in enumerate(section.blocks):
            if block.end_line is not None or block.start_line is None:
                continue
            following = next((b.start_line for b in section.blocks[i + 1:] if b.start_line),
                             None)
            end = following - 1 if following else section.end_line
            block.end_line = max(block.start_line, end or block.start_line)


def _inline_html(el: HtmlElement) -> str:
    """An element's text, with inline ``<code>`` as `code`, nested lists and code left out."""
    parts = [el.text or ""]
    for child in el:
        tag = child.tag if isinstance(child.tag, str) else ""
        if tag in ("ul", "ol", "pre", "table"):
            pass
        elif tag == "code":
            parts.append(f"`{child.text_content()}`")
        elif tag == "br":
            parts.append(" ")
        else:
            parts.append(_inline_html(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _html_list(el: HtmlElement, ordered: bool, line: Callable[[HtmlElement], int | None],
               text_of: Callable[[HtmlElement], str]) -> Block:
    block = Block("list", ordered=ordered, start_line=line(el))
    for n, li in enumerate(el.findall("li"), start=1):
        item = Item(text=text_of(li), number=n if ordered else None, start_line=line(li))
        links = li.findall(".//a")
        item.link_only = len(links) == 1 and bool(item.text) and \
            " ".join(links[0].text_content().split()) == item.text
        for pre in li.findall(".//pre"):
            item.code.append(Code(pre.text_content().strip("\n")))
        for sub in li.findall("./ul/li") + li.findall("./ol/li"):
            item.sub.append(text_of(sub))
        block.items.append(item)
    return block


def _html_table(el: HtmlElement, line: Callable[[HtmlElement], int | None],
                text_of: Callable[[HtmlElement], str]) -> Block:
    rows: list[list[str]] = []
    header: list[str] = []
    for tr in el.iter("tr"):
        cells = [c for c in tr if isinstance(c.tag, str) and c.tag in ("td", "th")]
        values = [text_of(c) for c in cells]
        if not header and not rows and cells and (
                all(c.tag == "th" for c in cells) or _all_bold(cells)):
            header = [v.replace("**", "") for v in values]
        elif any(values):
            rows.append(values)
    return Block("table", header=header, rows=rows, start_line=line(el))


def _all_bold(cells: list[HtmlElement]) -> bool:
    """A first row of bold cells is the header: word processors' exports write it so."""
    filled = [c for c in cells if c.text_content().strip()]
    return bool(filled) and all(
        len(c) == 1 and c[0].tag in ("strong", "b")
        and c[0].text_content().strip() == c.text_content().strip() for c in filled)


def _embedded_table(html: str, start: int | None, end: int | None) -> Block | None:
    """The first table of an HTML block inside Markdown, its lines counted in the file."""
    from lxml import etree
    from lxml import html as lxml_html

    try:
        root = lxml_html.fragment_fromstring(html, create_parent="div")
    except (etree.ParserError, ValueError):
        return None
    table = next(root.iter("table"), None)
    if table is None:
        return None

    def line(el: HtmlElement) -> int | None:
        return start + el.sourceline - 1 if start and el.sourceline else start

    block = _html_table(table, line, lambda el: _SPACES.sub(" ", _inline_html(el)).strip())
    block.end_line = end
    return block if block.rows else None


# Plain text ------------------------------------------------------------------------------------
def _text_outline(text: str, offset: int) -> Outline:
    section = Section(title="", path="", level=0, start_line=1 + offset)
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].strip():
            i += 1
        chunk = lines[start:i]
        numbered = [_NUMBERED.match(x) for x in chunk]
        bullets = [_BULLET.match(x) for x in chunk]
        if all(numbered) or all(bullets):
            ordered = all(numbered)
            # Every line matched: leaving out no match only tells the type checker so.
            marks = [m for m in (numbered if ordered else bullets) if m is not None]
            items = [Item(text=(m.group(2) if ordered else m.group(1)).strip(),
                          number=int(m.group(1)) if ordered else None,
                          start_line=start + k + 1 + offset)
                     for k, m in enumerate(marks)]
            section.blocks.append(Block("list", ordered=ordered, items=items,
                                        start_line=start + 1 + offset, end_line=i + offset))
        else:
            section.blocks.append(Block("paragraph", text=" ".join(x.strip() for x in chunk),
                                        start_line=start + 1 + offset, end_line=i + offset))
    section.end_line = len(lines) + offset
    return Outline([section] if section.blocks else [])
