"""Brace languages (JavaScript/TypeScript, Go, Java, C/C++/C#, Rust, Kotlin, Swift, PHP, shell,
Terraform, protobuf, JSON, CSS...): a light lexer tracks braces and brackets outside strings and
comments, and a regular expression names each block."""

from __future__ import annotations

import re

from citewise.ingest.chunking.code.units import (
    CLOSER,
    Unit,
    blank,
    fill_gaps,
    indent,
    join_symbol,
    symbol_of,
)

BRACE_LANGUAGES = frozenset({
    "javascript", "typescript", "java", "go", "c", "cpp", "csharp", "rust", "kotlin", "swift",
    "scala", "php", "groovy", "dart", "shell", "powershell", "hcl", "proto", "json", "css",
    "scss", "less", "graphql", "objective-c", "zig", "vue", "svelte", "solidity", "nix",
})
_LEXEME = re.compile(r"//|/\*|\*/|#|\"|'|`|\\|[{}()\[\]]")
_CONTINUATION = re.compile(r"^\s*(?:[.)\]?:,+\-*/|&=]|=>|else\b|catch\b|finally\b|where\b)")
_CONTAINER = re.compile(r"^(?:class|interface|struct|trait|impl|object|enum|module|namespace"
                        r"|extension|protocol|record|service|mod) ")
_HASH_COMMENTS = frozenset({"shell", "hcl", "powershell", "nix"})


class BraceFile:
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

    def units(self, lo: int, hi: int, base: int, prefix: str | None) -> list[Unit]:
        lines = self.lines
        found: list[Unit] = []
        i = lo
        while i <= hi:
            if blank(lines, i) or self.comment[i]:
                i += 1
                continue
            start, j, opened = i, i, False
            while True:
                opened = opened or self.max_depth[j] > base
                if self.depth_after[j] <= base and self.parens_after[j] == 0:
                    nxt = j + 1
                    if nxt > hi or blank(lines, nxt):
                        break
                    follow = lines[nxt - 1]
                    if self.comment[nxt]:
                        break
                    if _CONTINUATION.match(follow) or CLOSER.match(follow) or (
                        not opened and (follow.lstrip().startswith("{")
                                        or indent(follow) > indent(lines[start - 1]))
                    ):
                        j = nxt
                        continue
                    break
                if j >= hi:
                    break
                j += 1
            found.append(self._unit(start, j, base, prefix, opened))
            i = j + 1
        return fill_gaps(found, lines, lo, hi, self._is_prefix)

    def _unit(self, start: int, end: int, base: int, prefix: str | None, opened: bool) -> Unit:
        signature = " ".join(self.lines[k - 1].strip() for k in range(start, min(end, start + 2)
                                                                      + 1))
        name = symbol_of(signature.split("{", 1)[0] + ("{" if "{" in signature else ""))
        lines_spanned = end - start + 1
        symbol = join_symbol(prefix, name) if name else None
        major = bool(name) and opened and lines_spanned >= 2
        if not opened or lines_spanned < 3:
            return Unit(start, end, symbol, major)
        inner_prefix = symbol or prefix

        def children() -> list[Unit]:
            open_line = next((k for k in range(start, end + 1) if self.depth_after[k] > base),
                             start)
            head = Unit(start, open_line)
            inner = self.units(open_line + 1, end - 1, base + 1, inner_prefix) \
                if open_line + 1 <= end - 1 else []
            tail = [Unit(end, end)] if end > open_line else []
            return [head, *inner, *tail]

        container = bool(name and _CONTAINER.match(name.rsplit(" > ", 1)[-1]) is not None)
        return Unit(start, end, symbol, major, children, container)


class BraceStrategy:
    languages = BRACE_LANGUAGES

    def units(self, language: str, lines: list[str], text: str) -> list[Unit]:
        return BraceFile(lines, language).units(1, len(lines), 0, None)
