"""Indentation languages (YAML, TOML/INI, Makefile, Dockerfile, Ruby, Lua...): a block is a line
at the left margin with the deeper lines under it."""

from __future__ import annotations

import re

from citewise.ingest.chunking.code.units import (
    CLOSER,
    Unit,
    blank,
    block_units,
    fill_gaps,
    indent,
    join_symbol,
    symbol_of,
)

INDENT_LANGUAGES = frozenset({
    "python", "yaml", "toml", "ini", "make", "dockerfile", "ruby", "lua", "elixir", "haskell",
    "nim", "coffeescript", "puppet", "r", "julia", "perl", "crystal", "fsharp", "ocaml",
})
# A TOML/INI section header: "[tool.ruff]", "[[sources]]".
_SECTION = re.compile(r"^\s*\[[^\]]+\]+\s*(?:#.*)?$")

def indent_units(lines: list[str], lo: int, hi: int, prefix: str | None,
                  comment: str, sections: bool = False) -> list[Unit]:
    """Lines at the block's left margin, each with the deeper lines under it. With
    ``sections`` (TOML, INI), a ``[section]`` line also takes every line up to the next one."""
    def is_comment(line: str) -> bool:
        return line.lstrip().startswith(comment)

    base = None
    for i in range(lo, hi + 1):
        if not blank(lines, i) and not is_comment(lines[i - 1]):
            base = indent(lines[i - 1])
            break
    if base is None:
        return block_units(lines, lo, hi)
    found: list[Unit] = []
    i = lo
    while i <= hi:
        line = lines[i - 1]
        if blank(lines, i) or is_comment(line) or indent(line) > base:
            i += 1  # comments and stray deeper lines: picked up as gaps
            continue
        start = end = i
        opens_block = line.rstrip().endswith(":")
        section = sections and _SECTION.match(line) is not None
        j = i + 1
        while j <= hi:
            follow = lines[j - 1]
            if blank(lines, j) or is_comment(follow):
                j += 1
                continue
            deeper = indent(follow) > base
            # `key:` then `- item` at the same indent: YAML's compact sequence style.
            yaml_item = opens_block and indent(follow) == base and follow.lstrip().startswith("-")
            in_section = section and not _SECTION.match(follow)
            if deeper or yaml_item or in_section or (
                indent(follow) == base and CLOSER.match(follow)
            ):
                end = j
                j += 1
                continue
            break
        found.append(_indent_unit(lines, start, end, prefix, comment))
        if section:  # the lines of a section sit at its own margin: read them flat
            found[-1].major = found[-1].symbol is not None and end - start >= 2
        i = end + 1
    return fill_gaps(found, lines, lo, hi, is_comment)


def _indent_unit(lines: list[str], start: int, end: int, prefix: str | None,
                 comment: str) -> Unit:
    """One block; its children are its first line and the blocks under it."""
    name = symbol_of(lines[start - 1])
    symbol = join_symbol(prefix, name) if name else None
    span = end - start + 1
    major = bool(name) and span >= 3
    if span < 2:
        return Unit(start, end, symbol, major)
    return Unit(
        start, end, symbol, major,
        lambda: [Unit(start, start),
                 *indent_units(lines, start + 1, end, symbol or prefix, comment)],
    )


class IndentStrategy:
    """Also Python's fallback, for a file that does not parse as Python 3."""

    languages = INDENT_LANGUAGES

    def units(self, language: str, lines: list[str], text: str) -> list[Unit]:
        comment = ";" if language == "ini" else "--" if language in ("lua", "haskell") else "#"
        return indent_units(lines, 1, len(lines), None, comment, language in ("toml", "ini"))
