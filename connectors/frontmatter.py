"""YAML front matter (``---`` fenced block at the top of Markdown and text files)."""

from __future__ import annotations

import re

import yaml

# Blank lines before the opening fence are tolerated: an editor's stray newline must not turn the
# front matter (and the readers it declares) into body text.
_FENCE = re.compile(
    r"\A(?:[ \t]*\r?\n)*---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S
)


class FrontMatterError(ValueError):
    pass


def split_front_matter(text: str) -> tuple[dict, str, int]:
    """Return (metadata, body, number of lines the front matter took)."""
    m = _FENCE.match(text)
    if not m:
        return {}, text, 0
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise FrontMatterError(
            f"front matter is not valid YAML{where}: {getattr(e, 'problem', e)}"
        ) from None
    if not isinstance(meta, dict):
        raise FrontMatterError("front matter must be a YAML mapping (key: value lines)")
    consumed = text[: m.end()]
    return meta, text[m.end() :], consumed.count("\n")
