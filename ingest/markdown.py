"""Markdown read once: the token stream that both the chunker and the outline walk.

markdown-it (CommonMark plus GitHub's tables) gives every block its source lines, keeps a
numbered step's number and the commands fenced under it. A document is parsed once per run:
the chunker (``parse.py``) and the outline (``outline.py``) ask for the same text's tokens one
after the other, and the second gets the first's from a small cache. The tokens are shared, so
neither walker changes them.
"""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

_MD = MarkdownIt("commonmark").enable("table")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_AUTOLINK = re.compile(r"<(https?://[^>]+)>")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(?=\S)(.+?)(?<=\S)\1")
_SPACES = re.compile(r"\s+")
_MARKS_AT_END = re.compile(r"(\*{1,3}|_{1,3})$")
_MARKS_AT_START = re.compile(r"^(\*{1,3}|_{1,3})")


@lru_cache(maxsize=8)
def markdown_tokens(text: str) -> tuple[Token, ...]:
    """The block tokens of ``text``; lines in ``token.map`` are 0-based, end exclusive."""
    return tuple(_MD.parse(text))


def plain_inline(markdown: str, code_marks: bool = True) -> str:
    """Inline Markdown as it reads: links as their text, emphasis dropped, `code` kept.

    Without ``code_marks`` (text for the embedding model and the keyword index, where a
    backtick is one more word-piece and says nothing), code loses its backticks, and so does
    emphasis around it (``**`Alert`**``).
    """
    parts = re.split(r"(`[^`]*`)", markdown)
    out = []
    for n, part in enumerate(parts):
        if _is_code(part):
            out.append(part if code_marks else part[1:-1])
            continue
        part = _LINK.sub(r"\1", part)
        part = _AUTOLINK.sub(r"\1", part)
        for _ in range(2):
            part = _EMPHASIS.sub(r"\2", part)
        if not code_marks:
            if n + 1 < len(parts) and _is_code(parts[n + 1]):
                part = _MARKS_AT_END.sub("", part)
            if n and _is_code(parts[n - 1]):
                part = _MARKS_AT_START.sub("", part)
        out.append(part)
    return _SPACES.sub(" ", "".join(out)).strip()


def _is_code(part: str) -> bool:
    return len(part) > 1 and part.startswith("`") and part.endswith("`")


def close_of(tokens: tuple[Token, ...], i: int) -> int:
    """Index of the token closing the one opened at ``i``."""
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def table_rows(tokens: tuple[Token, ...], i: int, code_marks: bool = True,
               ) -> tuple[list[str], list[list[str]], int]:
    """The header cells and body rows of the table opened at ``i``, and its closing index."""
    close = close_of(tokens, i)
    rows: list[list[str]] = []
    header: list[str] = []
    row: list[str] = []
    in_head = False
    for t in tokens[i:close]:
        if t.type == "thead_open":
            in_head = True
        elif t.type == "thead_close":
            in_head = False
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline":
            row.append(plain_inline(t.content, code_marks))
        elif t.type == "tr_close":
            (header.extend if in_head else rows.append)(row)
    return header, rows, close
