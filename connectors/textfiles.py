"""What every file-based connector (folder, git) checks and reads the same way.

Bytes become text only if they are text (no NUL byte near the start) and UTF-8; a file over the
source's size limit is refused before it is read. The messages say what to do, because they end
up in the run report next to the file's name. Titles come from a Markdown file's first H1, and
tags from a list or a comma- or space-separated string.
"""

from __future__ import annotations

import re

_MD_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.M)
_TAG_SPLIT = re.compile(r"[,\s]+")
# Git and most tools call a file binary when a NUL byte shows up in its first 8 KiB.
_BINARY_PROBE = 8192


class NotTextError(ValueError):
    """The bytes are not a text file citewise can index; the message says why."""


def too_large(size: int, limit: int) -> str | None:
    """The report line for a file over the source's ``max_file_bytes``, or None."""
    if size <= limit:
        return None
    return (f"file is {size} bytes, over the limit of {limit} (raise max_file_bytes for this "
            "source, or exclude the file)")


def decode_text(data: bytes) -> str:
    """The text of a file, or ``NotTextError`` for binary and non-UTF-8 content."""
    if b"\0" in data[:_BINARY_PROBE]:
        raise NotTextError("file looks binary (contains NUL bytes); only text files are indexed")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise NotTextError(
            f"file is not UTF-8 text (byte {e.start}): re-save it as UTF-8"
        ) from None


def markdown_title(body: str) -> str | None:
    """The first level-one heading of a Markdown body (``# Title``), if any."""
    m = _MD_H1.search(body)
    return m.group(1).strip() if m else None


def parse_tags(value) -> list[str]:
    """Tags as lowercase strings, from a list or a ``"a, b c"`` string; anything else: none."""
    if isinstance(value, str):
        value = [t for t in _TAG_SPLIT.split(value) if t]
    if not isinstance(value, list):
        return []
    return [str(t).strip().lower() for t in value if str(t).strip()]
