"""Code-aware chunking: source files split along their structure, with exact line ranges.

An engineer asking "where do we set the retry budget?" wants the function that does it, cited by
its lines. So a chunk is, where it fits, one whole definition (a function, a class, a method, a
block), with its decorators, docstring and the comments right above it; module-level code in
between is packed into its own chunks. Every chunk knows its ``symbol`` ("class Client > def
retry") and the exact first and last line it covers (1-based, inclusive).

How a file is read depends on its language (``doc.metadata["language"]``):

* Python: the standard library's ``ast`` gives exact definitions (a file that does not parse
  falls back to indentation);
* brace languages (JavaScript/TypeScript, Go, Java, C/C++/C#, Rust, Kotlin, Swift, PHP, shell,
  Terraform, protobuf, JSON, CSS...): a light lexer tracks braces and brackets outside strings
  and comments, and a regular expression names each block;
* indentation languages (YAML, TOML/INI, Makefile, Dockerfile, Ruby, Lua...): blocks are lines
  indented under a line at the left margin;
* anything else: blocks separated by blank lines.

Packing works the same for all of them. A named definition ("major" unit) gets a chunk of its own;
small unnamed units (imports, constants, config keys) are packed together. A unit over the budget
is split into its children (a class into its methods, a block into its statements) and, when it
has none, into runs of whole lines that prefer to break at blank lines. The budget counts the
model's word-pieces including the ``title > heading`` header embedded with every chunk, as the
prose chunker does.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from citewise.index.embedder import embedding_text
from citewise.types import Chunk, SourceDocument

BRACE_LANGUAGES = frozenset({
    "javascript", "typescript", "java", "go", "c", "cpp", "csharp", "rust", "kotlin", "swift",
    "scala", "php", "groovy", "dart", "shell", "powershell", "hcl", "proto", "json", "css",
    "scss", "less", "graphql", "objective-c", "zig", "vue", "svelte", "solidity", "nix",
})
INDENT_LANGUAGES = frozenset({
    "python", "yaml", "toml", "ini", "make", "dockerfile", "ruby", "lua", "elixir", "haskell",
    "nim", "coffeescript", "puppet", "r", "julia", "perl", "crystal", "fsharp", "ocaml",
})
_MIN_BUDGET = 32


@dataclass
class _Unit:
    """A run of lines (1-based, inclusive) that belongs together."""

    start: int
    end: int
    symbol: str | None = None  # its full symbol path, when it is a named definition
    major: bool = False  # a named definition: gets a chunk of its own
    children: Callable[[], list[_Unit]] | None = None  # its parts, if it must be split
    # A class-like block: split into its methods even when it would fit, so that a citation
    # lands on the method, not on the whole class.
    container: bool = False


def chunk_code(
    document_id: str,
    doc: SourceDocument,
    text: str,
    count_tokens: Callable[[str], int],
    max_tokens: int,
) -> list[Chunk]:
    """Chunks of a source file along its structure; each within ``max_tokens`` word-pieces,
    counting the ``embedding_text(title, heading, text)`` header."""
    lines = text.split("\n")
    language = str(doc.metadata.get("language") or "").lower()
    units = structure(language, lines, text)
    packer = _Packer(document_id, doc, lines, count_tokens, max_tokens)
    packer.pack(units, None)
    return packer.merged()


def structure(language: str, lines: list[str], text: str | None = None) -> list[_Unit]:
    """The file's top-level units, by the best reader for its language."""
    hi = len(lines)
    if language == "python":
        units = _python_units(lines, text if text is not None else "\n".join(lines))
        if units is not None:
            return units
        return _indent_units(lines, 1, hi, None, "#")
    if language in BRACE_LANGUAGES:
        return _BraceFile(lines, language).units(1, hi, 0, None)
    if language in INDENT_LANGUAGES:
        comment = ";" if language == "ini" else "--" if language in ("lua", "haskell") else "#"
        return _indent_units(lines, 1, hi, None, comment, language in ("toml", "ini"))
    return _block_units(lines, 1, hi)


# Packing ------------------------------------------------------------------------------------
class _Packer:
    def __init__(self, document_id, doc, lines, count_tokens, max_tokens) -> None:
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
                and prev.end_line < c.start_line
                and not ({id(prev), id(c)} & self._pieces)
            ):
                start, end = prev.start_line - self.offset, c.end_line - self.offset
                tokens = self.tokens(start, end)
                if tokens <= self.budget(c.symbol):
                    prev.text = "\n".join(self.lines[start - 1 : end])
                    prev.end_line = c.end_line
                    prev.token_count = tokens
                    continue
            if prev is not None and self._lone_header_of(prev, c):
                # A class split into its methods leaves its bare ``class X:`` line alone: a
                # chunk that says nothing. It goes with its first member instead.
                start, end = prev.start_line - self.offset, c.end_line - self.offset
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
        if {id(prev), id(c)} & self._pieces or prev.end_line >= c.start_line:
            return False
        if sum(1 for line in prev.text.split("\n") if line.strip()) != 1:
            return False
        gap = range(prev.end_line - self.offset + 1, c.start_line - self.offset)
        return all(not self.lines[i - 1].strip() for i in gap)

    def heading(self, symbol: str | None) -> str:
        return symbol or self.path

    def budget(self, symbol: str | None) -> int:
        if symbol not in self._budgets:
            header = self.count(embedding_text(self.title, self.heading(symbol), ""))
            self._budgets[symbol] = max(self.max_tokens - header, _MIN_BUDGET)
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

    def pack(self, units: list[_Unit], parent: str | None) -> None:
        pending: list[_Unit] = []
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
                        self.pack(children, symbol)
                        continue
                if tokens <= self.budget(symbol):
                    self.emit(unit.start, unit.end, symbol)
                else:
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

    def split(self, unit: _Unit, symbol: str | None) -> None:
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
            )
        )


# Shared helpers -----------------------------------------------------------------------------
def _blank(lines: list[str], i: int) -> bool:
    return not lines[i - 1].strip()


def _fill_gaps(units: list[_Unit], lines: list[str], lo: int, hi: int,
               is_prefix: Callable[[str], bool]) -> list[_Unit]:
    """Sorted ``units`` plus minor units for the non-blank lines between them (comments, stray
    code), so nothing in the file is left out of every chunk. Comment lines right above a major
    unit (no blank line between) become part of it: they usually explain it."""
    units = sorted(units, key=lambda u: (u.start, -u.end))
    merged: list[_Unit] = []
    for u in units:  # statements sharing a line ("a = 1; b = 2") become one unit
        if merged and u.start <= merged[-1].end:
            last = merged[-1]
            if u.end > last.end:
                merged[-1] = _Unit(last.start, u.end, last.symbol or u.symbol,
                                   last.major or u.major, None)
            continue
        merged.append(u)
    out: list[_Unit] = []
    cursor = lo
    for u in [*merged, None]:
        gap_end = (u.start - 1) if u else hi
        if u is not None and u.major:
            start = u.start
            while start - 1 >= cursor and not _blank(lines, start - 1) \
                    and is_prefix(lines[start - 2]):
                start -= 1
            if start != u.start:
                u = _Unit(start, u.end, u.symbol, u.major, _with_head(start, u), u.container)
                gap_end = start - 1
        out.extend(_block_units(lines, cursor, gap_end))
        if u is None:
            break
        out.append(u)
        cursor = u.end + 1
    return out


def _with_head(start: int, unit: _Unit) -> Callable[[], list[_Unit]] | None:
    """``unit``'s children, preceded by the comment lines that were attached above it."""
    if unit.children is None:
        return None
    children = unit.children
    return lambda: [_Unit(start, unit.start - 1), *children()]


def _block_units(lines: list[str], lo: int, hi: int) -> list[_Unit]:
    """Blank-line separated blocks of lines, as minor units."""
    out: list[_Unit] = []
    start = None
    for i in range(lo, hi + 1):
        if _blank(lines, i):
            if start is not None:
                out.append(_Unit(start, i - 1))
                start = None
        elif start is None:
            start = i
    if start is not None:
        out.append(_Unit(start, hi))
    return out


_MODIFIERS = re.compile(
    r"^(?:(?:export|default|public|private|protected|internal|static|final|abstract|async"
    r"|pub(?:\([^)]*\))?|unsafe|extern(?:\s+\"[^\"]*\")?|override|open|inline|virtual|sealed"
    r"|partial|data|suspend|declare|readonly|local|global|synchronized|native)\s+)*"
)
_CONTROL = frozenset({
    "if", "for", "while", "switch", "catch", "return", "new", "else", "do", "try", "sizeof",
    "typeof", "elif", "until", "case", "when", "match", "with", "foreach", "using", "lock",
    "assert", "print", "echo", "require", "import", "include", "super", "this", "throw",
})
_SYMBOL_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str | None]]] = [
    # Go method: func (c *Client) Do(...) -> "Client > func Do"
    (re.compile(r"^func\s*\(\s*(?:\w+\s+)?\*?\s*([\w.]+)[^)]*\)\s*(\w+)"),
     lambda m: f"{m[1]} > func {m[2]}"),
    (re.compile(r"^(func|function|fn|fun|def|sub|proc|procedure|macro_rules!)\*?\s+([\w$.:!]+)"),
     lambda m: f"{m[1]} {m[2]}"),
    (re.compile(r"^impl\b(?:\s*<[^>]*>)?\s+([\w:]+)(?:<[^>]*>)?(?:\s+for\s+([\w:]+))?"),
     lambda m: f"impl {m[1]}" + (f" for {m[2]}" if m[2] else "")),
    (re.compile(r"^(class|interface|enum|struct|trait|module|namespace|object|record|protocol"
                r"|extension|union|service|message|type|mod|rpc|schema)\s+([A-Za-z_$][\w$.]*)"),
     lambda m: f"{m[1]} {m[2]}"),
    (re.compile(r"^(resource|data|module|variable|output|provider)\s+((?:\"[^\"]*\"\s*)+)"),
     lambda m: f"{m[1]} " + ".".join(re.findall(r"\"([^\"]*)\"", m[2]))),
    (re.compile(r"^(const|let|var|val)\s+([\w$]+)"), lambda m: f"{m[1]} {m[2]}"),
    (re.compile(r"^\[+\s*([^\]]+?)\s*\]+\s*$"), lambda m: f"[{m[1]}]"),  # TOML/INI section
    (re.compile(r"^FROM\s+\S+\s+(?:AS|as)\s+(\S+)"), lambda m: f"stage {m[1]}"),  # Dockerfile
    # YAML list item named by a `name:` key: "- name: Deploy" -> "Deploy"
    (re.compile(r"^-\s+name\s*:\s*[\"']?([^\"'#\n]+?)[\"']?\s*$"), lambda m: m[1]),
    # A key or property: `deploy:`, `"scripts": {`, `retry: {`, `foo = function`
    (re.compile(r"^-?\s*[\"']?([A-Za-z_$][\w$.\-/]*)[\"']?\s*(?::(?!:)|=\s*(?:async\s+)?"
                r"(?:function\b|\([^)]*\)\s*=>|[\w$]+\s*=>))"),
     lambda m: m[1]),
    # A function or method signature in C-like languages: `void Foo::bar(int x) {` -> "bar()"
    (re.compile(r"^(?:[\w<>\[\],.?*&:~]+\s+)*[*&]*([A-Za-z_~][\w$]*)\s*\("),
     lambda m: None if m[1] in _CONTROL else f"{m[1]}()"),
]


def _symbol(signature: str) -> str | None:
    line = _MODIFIERS.sub("", signature.strip())
    for pattern, name in _SYMBOL_RULES:
        m = pattern.match(line)
        if m:
            found = name(m)
            if found:
                return found.strip()
    return None


def _join(prefix: str | None, symbol: str | None) -> str | None:
    if symbol is None:
        return prefix
    return f"{prefix} > {symbol}" if prefix else symbol


# Python -------------------------------------------------------------------------------------
_PY_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _python_units(lines: list[str], text: str) -> list[_Unit] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # not Python 3, or NUL bytes: read it by indentation
        return None
    return _py_body(tree.body, lines, 1, len(lines), None)


def _py_is_prefix(line: str) -> bool:
    return line.lstrip().startswith("#")


def _py_body(body: list[ast.stmt], lines: list[str], lo: int, hi: int,
             prefix: str | None) -> list[_Unit]:
    units = [_py_unit(node, lines, prefix) for node in body]
    return _fill_gaps(units, lines, lo, hi, _py_is_prefix)


def _py_unit(node: ast.stmt, lines: list[str], prefix: str | None) -> _Unit:
    start = node.lineno
    decorators = getattr(node, "decorator_list", None)
    if decorators:
        start = min(start, *(d.lineno for d in decorators))
    end = node.end_lineno or node.lineno
    if isinstance(node, _PY_DEFS):
        kind = ("class" if isinstance(node, ast.ClassDef)
                else "async def" if isinstance(node, ast.AsyncFunctionDef) else "def")
        symbol = _join(prefix, f"{kind} {node.name}")
        return _Unit(start, end, symbol, True,
                     lambda: _py_body(node.body, lines, start, end, symbol),
                     container=kind == "class")
    blocks = _py_blocks(node)
    if blocks:  # if/for/while/with/try/match at this level: split along its statements
        def children() -> list[_Unit]:
            inner = [_py_unit(n, lines, prefix) for block in blocks for n in block]
            return _fill_gaps(inner, lines, start, end, _py_is_prefix)
        return _Unit(start, end, None, False, children)
    return _Unit(start, end)


def _py_blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    blocks += [h.body for h in getattr(node, "handlers", [])]
    blocks += [c.body for c in getattr(node, "cases", [])]
    return [b for b in blocks if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]


# Brace languages ----------------------------------------------------------------------------
_LEXEME = re.compile(r"//|/\*|\*/|#|\"|'|`|\\|[{}()\[\]]")
_CONTINUATION = re.compile(r"^\s*(?:[.)\]?:,+\-*/|&=]|=>|else\b|catch\b|finally\b|where\b)")
_CLOSER = re.compile(r"^\s*(?:fi|done|esac|end)\b")
_SECTION = re.compile(r"^\s*\[[^\]]+\]+\s*(?:#.*)?$")
_CONTAINER = re.compile(r"^(?:class|interface|struct|trait|impl|object|enum|module|namespace"
                        r"|extension|protocol|record|service|mod) ")
_HASH_COMMENTS = frozenset({"shell", "hcl", "powershell", "nix"})


class _BraceFile:
    """Per-line brace depth and open brackets, outside strings and comments."""

    def __init__(self, lines: list[str], language: str) -> None:
        self.lines = lines
        hash_comments = language in _HASH_COMMENTS
        n = len(lines)
        self.depth_before = [0] * (n + 2)
        self.depth_after = [0] * (n + 2)
        self.max_depth = [0] * (n + 2)
        self.parens_after = [0] * (n + 2)
        self.comment = [False] * (n + 2)  # the line is only comment (or annotation)
        depth = parens = 0
        in_block = False
        in_template = False  # inside a `...` string spanning lines
        for i, line in enumerate(lines, start=1):
            self.depth_before[i] = depth
            peak = depth
            code_seen = False
            string: str | None = None
            escaped = False
            started_in_block = in_block
            for m in _LEXEME.finditer(line):
                tok = m.group(0)
                if escaped:
                    escaped = False
                    continue
                if tok == "\\":
                    escaped = string is not None or in_template
                    continue
                if in_block:
                    if tok == "*/":
                        in_block = False
                    continue
                if in_template:
                    if tok == "`":
                        in_template = False
                    continue
                if string:
                    if tok == string:
                        string = None
                    continue
                if tok == "//" or (tok == "#" and hash_comments
                                   and (m.start() == 0 or line[m.start() - 1] in " \t;")):
                    break
                if tok == "/*":
                    in_block = True
                    continue
                if tok in ("\"", "'"):
                    # A quote that does not close on this line is not a string (a Rust
                    # lifetime, an apostrophe in a shell comment).
                    if line.find(tok, m.end()) != -1:
                        string = tok
                    continue
                if tok == "`":
                    in_template = True
                    continue
                code_seen = True
                if tok == "{":
                    depth += 1
                    peak = max(peak, depth)
                elif tok == "}":
                    depth = max(depth - 1, 0)
                elif tok in "([":
                    parens += 1
                elif tok in ")]":
                    parens = max(parens - 1, 0)
            stripped = line.strip()
            self.depth_after[i] = depth
            self.max_depth[i] = peak
            self.parens_after[i] = parens
            self.comment[i] = bool(stripped) and (
                started_in_block
                or stripped.startswith(("//", "/*", "*", "@", "#[", "#!["))
                or (hash_comments and stripped.startswith("#"))
            ) and not (code_seen and stripped.startswith("@") and "{" in stripped)

    def _is_prefix(self, line: str) -> bool:
        s = line.strip()
        return s.startswith(("//", "/*", "*", "@", "#[", "#![", "#"))

    def units(self, lo: int, hi: int, base: int, prefix: str | None) -> list[_Unit]:
        lines = self.lines
        found: list[_Unit] = []
        i = lo
        while i <= hi:
            if _blank(lines, i) or self.comment[i]:
                i += 1
                continue
            start, j, opened = i, i, False
            while True:
                opened = opened or self.max_depth[j] > base
                if self.depth_after[j] <= base and self.parens_after[j] == 0:
                    nxt = j + 1
                    if nxt > hi or _blank(lines, nxt):
                        break
                    follow = lines[nxt - 1]
                    if self.comment[nxt]:
                        break
                    if _CONTINUATION.match(follow) or _CLOSER.match(follow) or (
                        not opened and (follow.lstrip().startswith("{")
                                        or _indent(follow) > _indent(lines[start - 1]))
                    ):
                        j = nxt
                        continue
                    break
                if j >= hi:
                    break
                j += 1
            found.append(self._unit(start, j, base, prefix, opened))
            i = j + 1
        return _fill_gaps(found, lines, lo, hi, self._is_prefix)

    def _unit(self, start: int, end: int, base: int, prefix: str | None, opened: bool) -> _Unit:
        signature = " ".join(self.lines[k - 1].strip() for k in range(start, min(end, start + 2)
                                                                      + 1))
        name = _symbol(signature.split("{", 1)[0] + ("{" if "{" in signature else ""))
        lines_spanned = end - start + 1
        symbol = _join(prefix, name) if name else None
        major = bool(name) and opened and lines_spanned >= 2
        if not opened or lines_spanned < 3:
            return _Unit(start, end, symbol, major)
        inner_prefix = symbol or prefix

        def children() -> list[_Unit]:
            open_line = next((k for k in range(start, end + 1) if self.depth_after[k] > base),
                             start)
            head = _Unit(start, open_line)
            inner = self.units(open_line + 1, end - 1, base + 1, inner_prefix) \
                if open_line + 1 <= end - 1 else []
            tail = [_Unit(end, end)] if end > open_line else []
            return [head, *inner, *tail]

        container = bool(name) and _CONTAINER.match(name.rsplit(" > ", 1)[-1]) is not None
        return _Unit(start, end, symbol, major, children, container)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


# Indentation languages ----------------------------------------------------------------------
def _indent_units(lines: list[str], lo: int, hi: int, prefix: str | None,
                  comment: str, sections: bool = False) -> list[_Unit]:
    """Lines at the block's left margin, each with the deeper lines under it. With
    ``sections`` (TOML, INI), a ``[section]`` line also takes every line up to the next one."""
    def is_comment(line: str) -> bool:
        return line.lstrip().startswith(comment)

    base = None
    for i in range(lo, hi + 1):
        if not _blank(lines, i) and not is_comment(lines[i - 1]):
            base = _indent(lines[i - 1])
            break
    if base is None:
        return _block_units(lines, lo, hi)
    found: list[_Unit] = []
    i = lo
    while i <= hi:
        line = lines[i - 1]
        if _blank(lines, i) or is_comment(line) or _indent(line) > base:
            i += 1  # comments and stray deeper lines: picked up as gaps
            continue
        start = end = i
        opens_block = line.rstrip().endswith(":")
        section = sections and _SECTION.match(line) is not None
        j = i + 1
        while j <= hi:
            follow = lines[j - 1]
            if _blank(lines, j) or is_comment(follow):
                j += 1
                continue
            deeper = _indent(follow) > base
            # `key:` then `- item` at the same indent: YAML's compact sequence style.
            yaml_item = opens_block and _indent(follow) == base and follow.lstrip().startswith("-")
            in_section = section and not _SECTION.match(follow)
            if deeper or yaml_item or in_section or (
                _indent(follow) == base and _CLOSER.match(follow)
            ):
                end = j
                j += 1
                continue
            break
        found.append(_indent_unit(lines, start, end, prefix, comment))
        if section:  # the lines of a section sit at its own margin: read them flat
            found[-1].major = found[-1].symbol is not None and end - start >= 2
        i = end + 1
    return _fill_gaps(found, lines, lo, hi, is_comment)


def _indent_unit(lines: list[str], start: int, end: int, prefix: str | None,
                 comment: str) -> _Unit:
    """One block; its children are its first line and the blocks under it."""
    name = _symbol(lines[start - 1])
    symbol = _join(prefix, name) if name else None
    span = end - start + 1
    major = bool(name) and span >= 3
    if span < 2:
        return _Unit(start, end, symbol, major)
    return _Unit(
        start, end, symbol, major,
        lambda: [_Unit(start, start),
                 *_indent_units(lines, start + 1, end, symbol or prefix, comment)],
    )
