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


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in one mapping is an error.

    YAML says keys are unique, but PyYAML keeps the last of two silently: a file with
    ``readers: [group:security]`` near the top and a forgotten ``readers: [public]`` further
    down would be published to everyone. No key of ours means anything when written twice, so
    every duplicate is refused, not only ``readers``. Keys brought in by a ``<<`` merge may
    be overridden, as YAML intends.
    """

    first_line = 1  # the file's line number of the YAML's first line, for messages

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = seen.get(key)
                except TypeError:  # an unhashable key: the base loader reports it
                    continue
                seen[key] = key_node.start_mark.line
                if earlier is not None:
                    raise FrontMatterError(
                        f"front matter has the key {key!r} twice (lines "
                        f"{earlier + self.first_line} and "
                        f"{key_node.start_mark.line + self.first_line}): YAML would keep only "
                        "the last one; keep one (for readers, list everyone in it: readers: "
                        "[group:sre, dana])"
                    )
        return super().construct_mapping(node, deep=deep)


def split_front_matter(text: str) -> tuple[dict, str, int]:
    """Return (metadata, body, number of lines the front matter took)."""
    m = _FENCE.match(text)
    if not m:
        return {}, text, 0
    first_line = text[: m.start(1)].count("\n") + 1
    loader = _UniqueKeyLoader(m.group(1))
    loader.first_line = first_line
    try:
        meta = loader.get_single_data() or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + first_line}" if mark is not None else ""
        raise FrontMatterError(
            f"front matter is not valid YAML{where}: {getattr(e, 'problem', e)}"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(meta, dict):
        raise FrontMatterError("front matter must be a YAML mapping (key: value lines)")
    consumed = text[: m.end()]
    return meta, text[m.end() :], consumed.count("\n")
