"""Who may read a file, as the file itself declares it: front matter ``readers`` or an HTML meta.

Access control must fail closed. A declaration that is misspelled (``Readers:``, ``reader:``),
empty (``readers: []``, ``readers: ""``, ``readers:``) or out of place (a ``readers:`` line that
is not inside the front matter because its fence is broken) is an error for that document: it is
not indexed, its previously indexed version stays, and the run reports it. Silently falling back
to the source's readers would turn a restricted runbook into a public one. Out of place includes
a ``readers`` key nested under another key (``meta: {readers: ...}``): only the top level is
read. (A key written twice is refused by the YAML loader itself: ``frontmatter.py``.)

HTML files declare readers with ``<meta name="citewise-readers" content="group:security">``, read
with an HTML parser (any attribute order, quoting or spacing). The same words in another
attribute (``property=``, ``itemprop=``, ``http-equiv=``) are a near miss and refused like one.
"""

from __future__ import annotations

import difflib
import re
from html.parser import HTMLParser

from citewise.types import normalise_readers

READERS_KEY = "readers"
META_NAME = "citewise-readers"
# Keys that mean "who may see this" in other tools: a file using one surely meant ``readers``.
_ACCESS_WORDS = frozenset({
    "reader", "readers", "acl", "acls", "access", "permission", "permissions", "visibility",
    "audience", "allowed", "allow", "viewers", "viewer", "groups", "restricted", "restriction",
    "restrictions", "private", "principals",
})
_BARE = re.compile(r"[^a-z]")
# A "readers:" line in the first lines of a body that has no front matter: a broken fence.
_STRAY_READERS = re.compile(r"^\s*readers\s*:", re.I | re.M)
_STRAY_WINDOW = 20


class AccessDeclarationError(ValueError):
    """The file's declaration of its readers cannot be trusted; the message says how to fix it."""


def _looks_like_access(key: str) -> bool:
    bare = _BARE.sub("", str(key).lower())
    if not bare:
        return False
    if bare in _ACCESS_WORDS:
        return True
    return _looks_like_readers(bare)


def _looks_like_readers(key: str) -> bool:
    """``readers`` or a near spelling of it (``reader``, ``Readers``, ``readres``)."""
    bare = _BARE.sub("", str(key).lower())
    return bool(bare) and difflib.SequenceMatcher(None, bare, READERS_KEY).ratio() >= 0.75


def _nested_readers(value, path: str) -> str | None:
    """The dotted path of a ``readers``-like key anywhere below the top level, if any.

    Only readers-like names count down there, not every access word: ``owner: {groups: ...}``
    is ordinary metadata, while ``meta: {readers: ...}`` surely meant to restrict the file.
    """
    if isinstance(value, dict):
        for key, inner in value.items():
            where = f"{path}.{key}"
            if _looks_like_readers(key):
                return where
            found = _nested_readers(inner, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found = _nested_readers(inner, f"{path}[{i}]")
            if found:
                return found
    return None


def readers_from_front_matter(meta: dict) -> list[str] | None:
    """The readers the front matter declares, None when it declares none.

    Raises ``AccessDeclarationError`` for a key that looks like access control but is not
    exactly ``readers``, and for an empty or invalid ``readers`` value.
    """
    suspicious = sorted(str(k) for k in meta if k != READERS_KEY and _looks_like_access(k))
    if suspicious:
        raise AccessDeclarationError(
            f"front matter key {suspicious[0]!r} looks like an access declaration, but only "
            f"'{READERS_KEY}' is read: rename it to '{READERS_KEY}' (e.g. readers: "
            "[group:security]); until then the file is not indexed"
        )
    for key, value in meta.items():
        nested = _nested_readers(value, str(key))
        if nested:
            raise AccessDeclarationError(
                f"front matter key {nested!r} is nested under {str(key)!r}, but only a "
                f"top-level '{READERS_KEY}' is read: move it to the top level (e.g. readers: "
                "[group:security]); until then the file is not indexed"
            )
    if READERS_KEY not in meta:
        return None
    return _declared(meta[READERS_KEY], "front matter 'readers'")


def check_body_for_stray_readers(body: str) -> None:
    """A ``readers:`` line near the top of a file whose front matter did not parse as such."""
    head = "\n".join(body.split("\n", _STRAY_WINDOW)[:_STRAY_WINDOW])
    m = _STRAY_READERS.search(head)
    if m:
        line = head[: m.start()].count("\n") + 1
        raise AccessDeclarationError(
            f"line {line} says 'readers:' but is not inside front matter: the front matter must "
            "open with '---' on the very first line and close with '---'; until it does, the "
            "file is not indexed"
        )


def readers_from_html(text: str) -> list[str] | None:
    """The readers an HTML file's ``<meta name="citewise-readers">`` declares, None if none."""
    finder = _MetaFinder()
    try:
        finder.feed(text)
        finder.close()
    except Exception as e:  # html.parser is lenient; anything it raises is a broken file
        raise AccessDeclarationError(f"the HTML could not be read for its meta tags: {e}") from e
    if finder.misspelled:
        attribute, value = finder.misspelled[0]
        raise AccessDeclarationError(
            f"<meta {attribute}={value!r}> looks like an access declaration, but only "
            f"<meta name=\"{META_NAME}\" content=\"...\"> is read: fix the "
            f"{'name' if attribute == 'name' else 'tag'} (e.g. <meta name=\"{META_NAME}\" "
            "content=\"group:security\">); until then the file is not indexed"
        )
    if not finder.readers:
        return None
    if len(finder.readers) > 1:
        raise AccessDeclarationError(
            f"the file has {len(finder.readers)} <meta name=\"{META_NAME}\"> tags: keep one "
            "(list every reader in its content, separated by commas)"
        )
    content = finder.readers[0]
    if content is None:
        raise AccessDeclarationError(f"<meta name=\"{META_NAME}\"> has no content attribute")
    return _declared(content, f"<meta name=\"{META_NAME}\">")


def _declared(value, where: str) -> list[str]:
    if value is None or (isinstance(value, str | list | tuple) and not value) or (
        isinstance(value, str) and not value.strip()
    ):
        raise AccessDeclarationError(
            f"{where} is empty: a file nobody may read is not indexed. Name who may read it "
            "(readers: [group:sre]) or say [public] for everyone"
        )
    if not isinstance(value, str | list | tuple):
        raise AccessDeclarationError(
            f"{where} must be a list of principals or a comma-separated string, not "
            f"{type(value).__name__}"
        )
    try:
        return normalise_readers(value)
    except ValueError as e:
        raise AccessDeclarationError(f"{where}: {e}") from None


class _MetaFinder(HTMLParser):
    """Collects ``<meta name="citewise-...">`` tags, whatever their attribute order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.readers: list[str | None] = []
        self.tags: list[str] = []
        self.misspelled: list[tuple[str, str]] = []  # (attribute, value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "meta":
            return
        attributes = {k.lower(): v for k, v in attrs}
        name = (attributes.get("name") or "").strip()
        low = name.lower()
        if low == META_NAME:
            self.readers.append(attributes.get("content"))
        elif low == "citewise-tags":
            self.tags.append(attributes.get("content") or "")
        elif _looks_like_meta_readers(low):
            self.misspelled.append(("name", name))
        for other in _OTHER_META_ATTRIBUTES:
            value = (attributes.get(other) or "").strip()
            if value.lower() == META_NAME or _looks_like_meta_readers(value.lower()):
                self.misspelled.append((other, value))

    handle_startendtag = handle_starttag


# Where a meta tag can carry a name other than ``name=``: Open Graph's property, microdata's
# itemprop, http-equiv. ``<meta property="citewise-readers">`` is ignored by a reader of
# ``name=`` only, so it is refused like a misspelling rather than silently meaning "no readers".
_OTHER_META_ATTRIBUTES = ("property", "itemprop", "http-equiv")


def _looks_like_meta_readers(low: str) -> bool:
    return (low.startswith("citewise") and _looks_like_access(low.removeprefix("citewise"))) \
        or _BARE.sub("", low) in ("reader", "readers")


def tags_from_html(text: str) -> str | None:
    """The content of ``<meta name="citewise-tags">``, if the file has one."""
    finder = _MetaFinder()
    try:
        finder.feed(text)
        finder.close()
    except Exception:
        return None
    return finder.tags[0] if finder.tags else None
