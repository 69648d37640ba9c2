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
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=8)
def markdown_tokens(text: str) -> tuple[Token, ...]:
    """The block tokens of ``text``; lines in ``token.map`` are 0-based, end exclusive."""
    return tuple(_MD.parse(text))


def inline_text(token: Token, code_marks: bool = True) -> str:
    """An inline token's text as it reads: links as their text, images as their alt text,
    emphasis and HTML tags dropped, escapes and entities resolved, line breaks as spaces.

    Built from markdown-it's own reading of the inline, so ``node_filesystem_avail_bytes``
    keeps its underscores (CommonMark: ``_`` inside a word is not emphasis; ``*`` is). With
    ``code_marks`` (outline text, rendered as Markdown in answers) code keeps its backticks;
    without (text for the embedding model and the keyword index, where a backtick is one more
    word-piece and says nothing) it reads as plain words.
    """
    out: list[str] = []
    for child in token.children or ():
        kind = child.type
        if kind == "text":
            out.append(child.content)
        elif kind == "code_inline":
            out.append(f"`{child.content}`" if code_marks else child.content)
        elif kind in ("softbreak", "hardbreak"):
            out.append(" ")
        elif kind == "image":
            out.append(child.content)  # its alt text
        elif kind == "html_inline" and child.content[:3].lower() == "<br":
            out.append(" ")
    return _SPACES.sub(" ", "".join(out)).strip()


def only_a_link(token: Token) -> bool:
    """Whether an inline token is one link and nothing else ("- [Blocking IPs](https://...)"):
    a list of those is a reading list or a table of contents, not steps or facts."""
    children = [c for c in token.children or ()
                if not (c.type == "text" and not c.content.strip())
                and c.type not in ("softbreak", "hardbreak")]
    return (len(children) >= 3 and children[0].type == "link_open"
            and children[-1].type == "link_close"
            and sum(c.type == "link_open" for c in children) == 1)


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
            row.append(inline_text(t, code_marks))
        elif t.type == "tr_close":
            (header.extend if in_head else rows.append)(row)
    return header, rows, close
