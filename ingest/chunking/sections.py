"""Structure-aware chunking: sections under headings, packed to the embedding window.

A chunk never spans two sections, so its heading path ("Diagnosis > Check replication lag") is
exact and the citation can link to that heading. Sections longer than the budget are split
between elements, and elements longer than the budget between sentences or lines. The budget
counts the model's own word-pieces, including the title and heading header that is embedded with
every chunk (all-MiniLM-L6-v2 silently truncates at 256).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from citewise.index.dense import embedding_text
from citewise.ingest.anchors import AnchorStyle, anchor_style, github_anchor
from citewise.ingest.parse import Element, document_text, parse
from citewise.types import Chunk, SourceDocument

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


@dataclass
class _Piece:
    text: str
    tokens: int
    probe: str  # for finding the element's line in the source when the parser did not say
    line: int | None = None  # where it starts and ends in the file, when the parser said
    end: int | None = None
    exact_lines: bool = False  # its text's lines are the file's lines from ``line`` (code)
    within: tuple[int, int] | None = None  # a part of an element: the element's lines


class SectionChunker:
    """Prose (Markdown, HTML, text): parsed into elements, chunked along its headings."""

    # Part of every prose document's index signature: bump it when chunks would come out
    # differently, and the next run re-chunks (and only re-embeds what changed).
    # v2: documents also store their outline (ingest/outline.py), which answers are built from.
    # v4: Markdown read by markdown-it (ingest/markdown.py), with exact lines and step numbers.
    # v5: its text from markdown-it's inline tokens (underscores inside words kept).
    # v6: the outline marks a list item that is only a link (reading lists are not answers).
    version = "sections-v6"

    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int = 200,
                 count_many: Callable[[list[str]], list[int]] | None = None) -> None:
        self.count_tokens = count_tokens
        self.max_tokens = max_tokens
        # The same counts for a document's elements at once (``DenseEncoder.count_tokens_many``):
        # one tokenizer call per document instead of one per paragraph, a third less time.
        self.count_many = count_many or (lambda texts: [count_tokens(t) for t in texts])

    def chunk(self, document_id: str, doc: SourceDocument) -> list[Chunk]:
        return self.chunk_elements(
            document_id, doc.title, parse(doc), document_text(doc), doc.body_line_offset,
            anchor=anchor_style(doc.metadata.get("anchor_style")),
        )

    def chunk_elements(
        self,
        document_id: str,
        title: str,
        elements: list[Element],
        source_text: str | None = None,
        line_offset: int = 0,
        anchor: AnchorStyle = github_anchor,
    ) -> list[Chunk]:
        locator = _LineLocator(source_text, line_offset) if source_text else None
        chunks: list[Chunk] = []
        stack: list[tuple[int, str]] = []  # (depth, heading) of the current section
        pieces: list[_Piece] = []
        section_line: list[int | None] = [None]  # the current heading's line in the source

        def anchor_of(heading: str) -> str:
            return anchor(heading, title)

        def heading_path() -> str:
            return " > ".join(h for _, h in stack)

        def flush() -> None:
            if not pieces:
                return
            path = heading_path()
            budget = self.max_tokens - self.count_tokens(embedding_text(title, path, ""))
            budget = max(budget, 32)
            group: list[_Piece] = []
            used = 0
            first = len(chunks)
            for piece in pieces:
                for part in self._fit(piece, budget):
                    if group and used + part.tokens > budget:
                        self._emit(chunks, document_id, path, stack, group, locator, anchor_of)
                        group, used = [], 0
                    group.append(part)
                    used += part.tokens
            if group:
                self._emit(chunks, document_id, path, stack, group, locator, anchor_of)
            # A section's first chunk starts at its heading: that is where a citation lands.
            if section_line[0] is not None and first < len(chunks):
                chunks[first].start_line = section_line[0]
            section_line[0] = None
            pieces.clear()

        def piece_text(el: Element) -> str:
            if el.kind == "ListItem":
                return f"{el.number}. {el.text}" if el.number is not None else f"- {el.text}"
            return el.text

        def is_heading(el: Element) -> bool:
            return el.kind == "Title" and el.depth is not None

        texts = [piece_text(el) for el in elements if not is_heading(el)]
        counts = iter(self.count_many(texts))
        for i, el in enumerate(elements):
            if el.kind == "Title" and el.depth is not None:  # is_heading, spelled for mypy
                flush()
                if i == 0 and el.depth == 0 and el.text.strip() == title.strip():
                    continue  # the document's own H1 repeats the title: not a section
                while stack and stack[-1][0] >= el.depth:
                    stack.pop()
                stack.append((el.depth, el.text.strip()))
                if el.line is not None:
                    section_line[0] = line = el.line + line_offset
                    if locator:
                        locator.seek(line)
                else:
                    section_line[0] = locator.find(el.text) if locator else None
                continue
            pieces.append(_Piece(
                piece_text(el), next(counts), el.text.split("\n", 1)[0],
                line=None if el.line is None else el.line + line_offset,
                end=None if el.end_line is None else el.end_line + line_offset,
                exact_lines=el.kind == "CodeSnippet"))
        flush()
        return chunks

    def _fit(self, piece: _Piece, budget: int) -> list[_Piece]:
        """Split one element over the budget into sentence- or line-sized parts."""
        if piece.tokens <= budget:
            return [piece]
        parts = self._split(piece, budget)
        # The first part starts where the element does, the last ends where it ends; the
        # lines of those between are known for code and looked up by their text otherwise.
        parts[0].line, parts[-1].end = piece.line, piece.end
        if piece.line is not None and piece.end is not None:
            for part in parts:
                part.within = (piece.line, piece.end)
        return parts

    def _split(self, piece: _Piece, budget: int) -> list[_Piece]:
        by_line = "\n" in piece.text
        units = piece.text.split("\n") if by_line else _SENTENCE_END.split(piece.text)
        # Code keeps its lines one for one: a part's lines follow from where its units sit.
        exact = by_line and piece.exact_lines and piece.line is not None

        def at(first: int, last: int) -> tuple[int | None, int | None]:
            """The file's lines of units ``first`` to ``last``, where they are known."""
            if exact and piece.line is not None:
                return piece.line + first, piece.line + last
            return None, None

        parts: list[_Piece] = []
        current: list[int] = []  # indexes of the units in the part being filled
        used = 0

        def close() -> None:
            text = ("\n" if by_line else " ").join(units[k] for k in current)
            line, end = at(current[0], current[-1])
            parts.append(_Piece(text, self.count_tokens(text), units[current[0]],
                                line=line, end=end))

        unit_tokens = self.count_many(units)
        for n, unit in enumerate(units):
            tokens = unit_tokens[n]
            if current and used + tokens > budget:
                close()
                current, used = [], 0
            if tokens > budget:  # one enormous sentence or line: cut it by words
                words = unit.split(" ")
                step = max(1, len(words) * budget // (tokens + 1))
                for j in range(0, len(words), step):
                    sub = " ".join(words[j : j + step])
                    line, end = at(n, n)
                    parts.append(_Piece(sub, self.count_tokens(sub), sub, line=line, end=end))
                continue
            current.append(n)
            used += tokens + 1
        if current:
            close()
        return parts

    def _emit(self, chunks: list[Chunk], document_id: str, path: str,
              stack: list[tuple[int, str]], group: list[_Piece],
              locator: _LineLocator | None, anchor_of: Callable[[str], str]) -> None:
        text = "\n".join(p.text for p in group)
        start = _line_of(group[0], locator)
        end = group[-1].end
        if end is None:
            end = (_line_of(group[-1], locator) if len(group) > 1 else None) or start
        if start is not None and end is not None and end < start:
            end = start
        chunks.append(
            Chunk(
                document_id=document_id,
                ordinal=len(chunks),
                text=text,
                heading=path,
                anchor=anchor_of(stack[-1][1]) if stack else None,
                start_line=start,
                end_line=end,
                token_count=sum(p.tokens for p in group),
            )
        )


def _line_of(piece: _Piece, locator: _LineLocator | None) -> int | None:
    if piece.line is not None:
        if locator:
            locator.seek(piece.line)
        return piece.line
    found = locator.find(piece.probe, piece.within) if locator else None
    # A part of an element whose text the search misses starts, at the latest, in that element.
    return found if found is not None or piece.within is None else piece.within[0]


class _LineLocator:
    """Finds the source line where an element starts, moving forward through the file.

    Parsed text loses Markdown markup, so lines and probes are compared with everything but
    letters and digits removed. A probe that is not found keeps the previous position.
    """

    def __init__(self, text: str, offset: int) -> None:
        self.lines = [_NON_ALNUM.sub("", line.lower()) for line in text.split("\n")]
        self.offset = offset
        self.cursor = 0

    def seek(self, line: int) -> None:
        """The parser placed an element at ``line``: later probes search from there."""
        self.cursor = max(self.cursor, line - 1 - self.offset)

    def find(self, probe: str, within: tuple[int, int] | None = None) -> int | None:
        """The line of ``probe`` from the cursor on (only among lines ``within``, if given)."""
        key = _NON_ALNUM.sub("", probe.lower())[:24]
        if not key:
            return None
        first, last = self.cursor, len(self.lines)
        if within is not None:
            first = max(first, within[0] - 1 - self.offset)
            last = min(last, within[1] - self.offset)
        for i in range(first, last):
            if key in self.lines[i] or (len(key) > 8 and self.lines[i].startswith(key[:12])):
                self.cursor = i
                return i + 1 + self.offset
        return None
