"""Reading a code chunk the way an engineer reads a function: its signature and its docstring.

A code answer shows the header of the definition (decorators and the lines up to its body) and
the first paragraph of what it says about itself, not the whole body. These readers are
deliberately loose: they see one chunk of one of the many languages the code chunker reads
(``ingest/chunking/code/``), without a parser for any of them.
"""

from __future__ import annotations

import re

# The first line of a definition in the languages the code chunker reads: a decorator, a
# function, class or type, with the modifiers that may come first.
_DEFINITION_LINE = re.compile(
    r"^\s*(@|#\[|(export\s+|pub(\([^)]*\))?\s+|public\s+|private\s+|protected\s+|static\s+|"
    r"async\s+|abstract\s+|final\s+|default\s+)*(def|class|func|fn|function|interface|struct|"
    r"enum|impl|trait|type|module|object|record|const|let|var|val)\b)")
# A header longer than this is not a signature any more: the reader stops there.
_MAX_HEADER_LINES = 12
_DOCSTRING = re.compile(r'^[rRbBuU]?("""|\'\'\')(.*?)(\1|$)', re.S)


def opens_definition(code: str) -> bool:
    """Whether the first non-blank line of ``code`` begins a definition (or its decorator):
    what ``signature_and_docstring`` can read a signature from."""
    return bool(_DEFINITION_LINE.match(next((x for x in code.split("\n") if x.strip()), "")))


def signature_and_docstring(code: str) -> tuple[str, str]:
    """A function's signature lines (decorators and the header up to its body), and the first
    paragraph of its docstring or leading comment."""
    lines = code.split("\n")
    header: list[str] = []
    depth = 0
    for line in lines:
        header.append(line)
        depth += line.count("(") + line.count("[") - line.count(")") - line.count("]")
        stripped = line.strip()
        if depth <= 0 and (stripped.endswith(":") or stripped.endswith("{")
                           or stripped.endswith("=>")) and not stripped.startswith("@"):
            break
        if len(header) >= _MAX_HEADER_LINES:
            break
    rest = "\n".join(lines[len(header):]).strip()
    doc = ""
    m = _DOCSTRING.match(rest)
    if m:
        doc = m.group(2)
    else:
        comment = []
        for line in lines[len(header):]:
            s = line.strip()
            if s.startswith(("//", "#", "*", "/*")):
                comment.append(s.lstrip("/#* ").strip())
            elif s:
                break
        doc = " ".join(comment)
    doc = " ".join(doc.strip().split("\n\n")[0].split())
    return "\n".join(header).rstrip(), doc
