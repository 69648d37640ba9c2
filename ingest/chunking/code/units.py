"""The vocabulary every code strategy speaks: units of lines, their symbols, and the gaps.

A strategy (``python.py``, ``brace.py``, ``indent.py``) reads a file into ``Unit``s: runs of
lines, each a named definition (a "major" unit, with a symbol such as ``class Client > def
retry``) or something smaller, with a way to split itself into children when it is too long.
``fill_gaps`` makes sure every non-blank line of the file belongs to some unit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Lines that end a block in shell, Ruby, Lua and friends.
CLOSER = re.compile(r"^\s*(?:fi|done|esac|end)\b")


@dataclass
class Unit:
    """A run of lines (1-based, inclusive) that belongs together."""

    start: int
    end: int
    symbol: str | None = None  # its full symbol path, when it is a named definition
    major: bool = False  # a named definition: gets a chunk of its own
    children: Callable[[], list[Unit]] | None = None  # its parts, if it must be split
    # A class-like block: split into its methods even when it would fit, so that a citation
    # lands on the method, not on the whole class.
    container: bool = False
    # The line that declares it (its def, func or class line), when lines above it belong to it
    # too (decorators, the comments right above it); None: ``start`` is that line.
    declared: int | None = None

    @property
    def declaration(self) -> int:
        """The line that declares the unit: where its signature starts."""
        return self.declared if self.declared is not None else self.start


def blank(lines: list[str], i: int) -> bool:
    return not lines[i - 1].strip()


def fill_gaps(units: list[Unit], lines: list[str], lo: int, hi: int,
               is_prefix: Callable[[str], bool]) -> list[Unit]:
    """Sorted ``units`` plus minor units for the non-blank lines between them (comments, stray
    code), so nothing in the file is left out of every chunk. Comment lines right above a major
    unit (no blank line between) become part of it: they usually explain it."""
    units = sorted(units, key=lambda u: (u.start, -u.end))
    merged: list[Unit] = []
    for unit in units:  # statements sharing a line ("a = 1; b = 2") become one unit
        if merged and unit.start <= merged[-1].end:
            last = merged[-1]
            if unit.end > last.end:
                merged[-1] = Unit(last.start, unit.end, last.symbol or unit.symbol,
                                   last.major or unit.major, None, declared=last.declared)
            continue
        merged.append(unit)
    out: list[Unit] = []
    cursor = lo
    for u in [*merged, None]:
        gap_end = (u.start - 1) if u else hi
        if u is not None and u.major:
            start = u.start
            while start - 1 >= cursor and not blank(lines, start - 1) \
                    and is_prefix(lines[start - 2]):
                start -= 1
            if start != u.start:
                u = Unit(start, u.end, u.symbol, u.major, with_head(start, u), u.container,
                         u.declaration)
                gap_end = start - 1
        out.extend(block_units(lines, cursor, gap_end))
        if u is None:
            break
        out.append(u)
        cursor = u.end + 1
    return out


def with_head(start: int, unit: Unit) -> Callable[[], list[Unit]] | None:
    """``unit``'s children, preceded by the comment lines that were attached above it."""
    if unit.children is None:
        return None
    children = unit.children
    return lambda: [Unit(start, unit.start - 1), *children()]


def block_units(lines: list[str], lo: int, hi: int) -> list[Unit]:
    """Blank-line separated blocks of lines, as minor units."""
    out: list[Unit] = []
    start = None
    for i in range(lo, hi + 1):
        if blank(lines, i):
            if start is not None:
                out.append(Unit(start, i - 1))
                start = None
        elif start is None:
            start = i
    if start is not None:
        out.append(Unit(start, hi))
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


def symbol_of(signature: str) -> str | None:
    line = _MODIFIERS.sub("", signature.strip())
    for pattern, name in _SYMBOL_RULES:
        m = pattern.match(line)
        if m:
            found = name(m)
            if found:
                return found.strip()
    return None


def join_symbol(prefix: str | None, symbol: str | None) -> str | None:
    if symbol is None:
        return prefix
    return f"{prefix} > {symbol}" if prefix else symbol


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))
