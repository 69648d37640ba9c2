"""Packing units into chunks within the embedding budget, with exact line ranges.

A named definition ("major" unit) gets a chunk of its own; small unnamed units (imports,
constants, config keys) are packed together. A unit over the budget is split into its children
(a class into its methods, a block into its statements) and, when it has none, into runs of whole
lines that prefer to break at blank lines. The budget counts the model's word-pieces including
the ``title > heading`` header embedded with every chunk, as the prose chunker does.

Every chunk says whether it continues a definition split into parts (``continues_symbol``): a
part that starts past the line declaring the definition (its def, func or class line) holds no
signature, and an answer that shows a signature must not take its first statement for one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from citewise.index.dense import embedding_text
from citewise.ingest.chunking.code.units import Unit
from citewise.types import Chunk, SourceDocument

MIN_BUDGET = 32


def _first(chunk: Chunk) -> int:
    """A chunk's first line: ``Packer._append`` gives every chunk it makes its lines."""
    if chunk.start_line is None:
        raise ValueError(f"code chunk {chunk.ordinal} has no first line")
    return chunk.start_line


def _last(chunk: Chunk) -> int:
    """A chunk's last line (see ``_first``)."""
    if chunk.end_line is None:
        raise ValueError(f"code chunk {chunk.ordinal} has no last line")
    return chunk.end_line


class Packer:
    def __init__(self, document_id: str, doc: SourceDocument, lines: list[str],
                 count_tokens: Callable[[str], int], max_tokens: int) -> None:
        self.document_id = document_id
        self.title = doc.title
        self.path = doc.path or doc.title
        self.offset = doc.body_line_offset
        self.lines = lines
        self.count = count_tokens
        self.max_tokens = max_tokens
        self.chunks: list[Chunk] = []
        self._line_tokens: list[int | None] = [None] * len(lines)
        self._budgets: dict[str | None, int] = {}
        self._pieces: set[int] = set()  # ids of chunks that hold part of one long line
        # The definitions being split into parts, innermost last: (symbol, declaration line).
        self._splitting: list[tuple[str, int]] = []

    def merged(self) -> list[Chunk]:
        """The chunks, with neighbours of the same symbol joined where they fit together.

        Splitting a long function along its statements leaves small remainders (a closing
        brace, a last return); they read better with the lines before them."""
        out: list[Chunk] = []
        for c in self.chunks:
            prev = out[-1] if out else None
            if (
                prev is not None
                and prev.symbol == c.symbol
                and _last(prev) < _first(c)
                and not ({id(prev), id(c)} & self._pieces)
            ):
                start, end = _first(prev) - self.offset, _last(c) - self.offset
                tokens = self.tokens(start, end)
                if tokens <= self.budget(c.symbol):
                    prev.text = "\n".join(self.lines[start - 1 : end])
                    prev.end_line = c.end_line
                    prev.token_count = tokens
                    continue
            if prev is not None and self._lone_header_of(prev, c):
                # A class split into its methods leaves its bare ``class X:`` line alone: a
                # chunk that says nothing. It goes with its first member instead.
                start, end = _first(prev) - self.offset, _last(c) - self.offset
                tokens = self.tokens(start, end)
                if tokens <= self.budget(c.symbol):
                    c.text = "\n".join(self.lines[start - 1 : end])
                    c.start_line = prev.start_line
                    c.token_count = tokens
                    out[-1] = c
                    continue
            out.append(c)
        for i, c in enumerate(out):
            c.ordinal = i
        return out

    def _lone_header_of(self, prev: Chunk, c: Chunk) -> bool:
        """``prev`` is only the declaration line of the container that ``c`` is a member of,
        with nothing but blank lines between them."""
        if not (prev.symbol and c.symbol and c.symbol.startswith(prev.symbol + " > ")):
            return False
        if {id(prev), id(c)} & self._pieces or _last(prev) >= _first(c):
            return False
        if sum(1 for line in prev.text.split("\n") if line.strip()) != 1:
            return False
        gap = range(_last(prev) - self.offset + 1, _first(c) - self.offset)
        return all(not self.lines[i - 1].strip() for i in gap)

    def heading(self, symbol: str | None) -> str:
        return symbol or self.path

    def budget(self, symbol: str | None) -> int:
        if symbol not in self._budgets:
            header = self.count(embedding_text(self.title, self.heading(symbol), ""))
            self._budgets[symbol] = max(self.max_tokens - header, MIN_BUDGET)
        return self._budgets[symbol]

    def line_tokens(self, i: int) -> int:
        """Word-pieces of line ``i`` (1-based). Whitespace separates word-pieces, so the count
        of several lines joined by newlines is the sum of theirs."""
        n = self._line_tokens[i - 1]
        if n is None:
            line = self.lines[i - 1]
            n = self.count(line) if line.strip() else 0
            self._line_tokens[i - 1] = n
        return n

    def tokens(self, start: int, end: int) -> int:
        return sum(self.line_tokens(i) for i in range(start, end + 1))

    def pack(self, units: list[Unit], parent: str | None) -> None:
        pending: list[Unit] = []
        used = 0

        def flush() -> None:
            nonlocal pending, used
            if pending:
                self.emit(pending[0].start, pending[-1].end, parent)
            pending, used = [], 0

        for unit in units:
            tokens = self.tokens(unit.start, unit.end)
            if unit.major:
                flush()
                symbol = unit.symbol or parent
                if unit.container and unit.children:
                    children = unit.children()
                    if any(c.major for c in children):
                        with self._parts_of(unit):
                            self.pack(children, symbol)
                        continue
                if tokens <= self.budget(symbol):
                    self.emit(unit.start, unit.end, symbol)
                else:
                    with self._parts_of(unit):
                        self.split(unit, symbol)
                continue
            budget = self.budget(parent)
            if tokens > budget:
                flush()
                self.split(unit, parent)
                continue
            if pending and used + tokens > budget:
                flush()
            pending.append(unit)
            used += tokens
        flush()

    @contextmanager
    def _parts_of(self, unit: Unit) -> Iterator[None]:
        """``unit`` is the definition being chunked in parts meanwhile: the chunks emitted under
        its symbol that start past the line declaring it continue it."""
        if unit.symbol is None:
            yield
            return
        self._splitting.append((unit.symbol, unit.declaration))
        try:
            yield
        finally:
            self._splitting.pop()

    def _continues(self, symbol: str | None, start: int) -> bool:
        """Whether a chunk of ``symbol`` that starts at line ``start`` is a later part of the
        definition being split: it starts past the line that declares it, so an earlier chunk
        holds its signature. (A part that holds only the decorators above it does not continue
        it: the declaration is still to come.)"""
        if not self._splitting or symbol is None:
            return False
        splitting, declaration = self._splitting[-1]
        return symbol == splitting and start > declaration

    def split(self, unit: Unit, symbol: str | None) -> None:
        children = unit.children() if unit.children else []
        narrower = [c for c in children if (c.start, c.end) != (unit.start, unit.end)]
        if narrower and len(narrower) == len(children):
            self.pack(children, symbol)
        else:
            self.split_lines(unit.start, unit.end, symbol)

    def split_lines(self, start: int, end: int, symbol: str | None) -> None:
        """Runs of whole lines within the budget, breaking at a blank line where one is near."""
        budget = self.budget(symbol)
        first, used, blank = start, 0, None
        i = start
        while i <= end:
            tokens = self.line_tokens(i)
            if tokens > budget:  # one enormous line (minified code, a data blob)
                if first < i:
                    self.emit(first, i - 1, symbol)
                self.split_long_line(i, symbol, budget)
                first, used, blank = i + 1, 0, None
                i += 1
                continue
            if used + tokens > budget and first < i:
                # Cut at the last blank line if it keeps at least half the run, else here.
                cut = blank if blank is not None and blank - first >= (i - first) // 2 else i
                self.emit(first, cut - 1, symbol)
                first, blank = cut, None
                used = self.tokens(first, i - 1)
                continue
            if not self.lines[i - 1].strip() and i > first:
                blank = i
            used += tokens
            i += 1
        if first <= end:
            self.emit(first, end, symbol)

    def split_long_line(self, i: int, symbol: str | None, budget: int) -> None:
        first = len(self.chunks)
        words = self.lines[i - 1].split(" ")
        part: list[str] = []
        for word in words:
            if part and self.count(" ".join([*part, word])) > budget:
                self._piece(" ".join(part), i, symbol)
                part = []
            if self.count(word) > budget:  # no spaces at all: cut by characters
                self._cut_word(word, i, symbol, budget)
                continue
            part.append(word)
        if part:
            self._piece(" ".join(part), i, symbol)
        # The pieces after the first of a definition's declaration line continue it too.
        for c in self.chunks[first + 1 :]:
            c.continues_symbol = c.symbol is not None

    def _cut_word(self, word: str, i: int, symbol: str | None, budget: int) -> None:
        pos = 0
        while pos < len(word):
            step = len(word) - pos
            tokens = self.count(word[pos : pos + step])
            while tokens > budget and step > 1:
                # Shrink in proportion, and by at least one character: token density varies.
                step = min(step - 1, max(1, step * budget // tokens))
                tokens = self.count(word[pos : pos + step])
            self._piece(word[pos : pos + step], i, symbol)
            pos += step

    def _piece(self, text: str, i: int, symbol: str | None) -> None:
        before = len(self.chunks)
        self._append(text, i, i, symbol)
        if len(self.chunks) > before:
            self._pieces.add(id(self.chunks[-1]))

    def emit(self, start: int, end: int, symbol: str | None) -> None:
        while start <= end and not self.lines[start - 1].strip():
            start += 1
        while end >= start and not self.lines[end - 1].strip():
            end -= 1
        if start > end:
            return
        self._append("\n".join(self.lines[start - 1 : end]), start, end, symbol,
                     self.tokens(start, end))

    def _append(self, text: str, start: int, end: int, symbol: str | None,
                tokens: int | None = None) -> None:
        if not text.strip():
            return
        self.chunks.append(
            Chunk(
                document_id=self.document_id,
                ordinal=len(self.chunks),
                text=text,
                heading=self.heading(symbol),
                anchor=None,
                start_line=start + self.offset,
                end_line=end + self.offset,
                token_count=tokens if tokens is not None else self.count(text),
                symbol=symbol,
                continues_symbol=self._continues(symbol, start),
            )
        )
