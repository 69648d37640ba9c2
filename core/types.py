"""Plain data passed between the stages: connectors -> ingest -> index -> retrieval -> api.

Nothing here knows about storage or HTTP, so each stage can be built and tested alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

PUBLIC = "public"
"""The reader principal that every caller has, signed in or not."""

CODE_MEDIA_TYPE = "text/x-code"
"""Source code and config files: chunked along their structure (``metadata["language"]``), not
parsed as prose."""


PRINCIPAL_SPELLING = "casefold-1"
"""How ``principal`` spells names. Stored readers were written with the spelling of their day:
``ingest/state.py`` puts this in every source's definition digest, so changing it makes the
next run of a syncing source a full pass that rewrites every document's readers."""


def principal(kind: str, name: str) -> str:
    """The one spelling of a ``user:`` or ``group:`` principal: its name case-folded.

    Readers written by people (``group:Security`` in front matter, a source's readers), by
    connectors (Confluence group names) and the groups an identity provider sends (``SRE``,
    ``security``) must meet on the same spelling, or a document would silently match nobody.
    Both sides go through here: ``normalise_readers`` and ``Identity.principals``.
    """
    return f"{kind}:{name.casefold()}"


def normalise_readers(readers: Iterable[str] | str | None) -> list[str]:
    """Readers are principals: ``public``, ``user:<id>`` or ``group:<name>``.

    A bare name is taken as a user (``alice`` -> ``user:alice``). Names are compared without
    case (``principal``): ``Group:Security`` is ``group:security``. Nothing at all (None, an
    empty list, blank strings) is a ``ValueError``, never "public": everyone must always be said
    explicitly, so that a missing or emptied declaration cannot open a document to everyone.
    """
    if isinstance(readers, str):
        readers = [r for r in readers.replace(",", " ").split() if r]
    out: list[str] = []
    for raw in readers or []:
        r = str(raw).strip()
        if not r:
            continue
        low = r.lower()
        if low in (PUBLIC, "everyone", "all"):
            r = PUBLIC
        elif ":" in r:
            kind, _, name = r.partition(":")
            kind = kind.strip().lower()
            name = name.strip()
            if kind not in ("user", "group"):
                raise ValueError(
                    f"reader {raw!r} has an unknown kind {kind!r}: use 'public', "
                    "'user:<id>' or 'group:<name>'"
                )
            if not name:
                raise ValueError(f"reader {raw!r} names no {kind}")
            r = principal(kind, name)
        else:
            r = principal("user", r)
        if r not in out:
            out.append(r)
    if not out:
        raise ValueError(
            "no readers given: name who may read it (group:<name>, user:<id>), or 'public' "
            "for everyone"
        )
    return out


@dataclass(frozen=True)
class Identity:
    """Who is asking. Search turns this into the set of principals matched inside the query."""

    user: str | None = None
    groups: tuple[str, ...] = ()

    def principals(self) -> list[str]:
        """What this caller matches in a document's readers, spelled as readers are stored.

        Every door (API keys, Access/OIDC tokens, asserted headers, the CLI) builds an
        ``Identity`` with names as it received them; the case is folded here, once for all.
        """
        principals = [PUBLIC]
        if self.user:
            principals.append(principal("user", self.user))
        for g in self.groups:
            if g and principal("group", g) not in principals:
                principals.append(principal("group", g))
        return principals

    @classmethod
    def anonymous(cls) -> Identity:
        return cls()


@dataclass
class SourceDocument:
    """One document as a connector sees it, before parsing.

    ``external_id`` is stable within the source (a relative path, a page id) and is what deletion
    detection compares; ``content`` is the raw bytes stored in the blob store.
    """

    external_id: str
    title: str
    content: bytes
    media_type: str  # text/markdown, text/html, text/plain
    path: str | None = None  # relative to the source root, for file sources
    url: str | None = None
    # A per-chunk link: ``{start}``/``{end}`` (the chunk's lines) and ``{anchor}`` (its heading)
    # are filled in at search time, e.g. ``https://git.example/blob/<sha>/x.py#L{start}-L{end}``.
    link_template: str | None = None
    readers: list[str] = field(default_factory=lambda: [PUBLIC])
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    updated_at: datetime | None = None
    # The text to parse, when the connector already decoded it and removed front matter;
    # ``body_line_offset`` is how many lines of the file precede it (for line citations).
    body: str | None = None
    body_line_offset: int = 0
    # Set by a connector that failed to read this one document: the pipeline records the error
    # and moves on instead of losing the rest of the batch.
    error: str | None = None

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass
class Chunk:
    """A piece of a document small enough for the embedding window, with where it came from."""

    document_id: str
    ordinal: int
    text: str
    heading: str  # heading path inside the document: "Diagnosis > Check replication lag"
    anchor: str | None = None  # slug of the innermost heading, for deep links
    start_line: int | None = None
    end_line: int | None = None
    token_count: int = 0
    symbol: str | None = None  # for code: "class RetryPolicy > def backoff"
    # For code: True when the chunk is a later part of the definition ``symbol`` names, which
    # was too long for one chunk: it starts past the line declaring it, so it holds no
    # signature. False for any other code chunk; None where the chunker does not say (prose).
    continues_symbol: bool | None = None

    def location(self) -> dict[str, Any]:
        """Where the chunk sits and what it says: stored with it in the catalog and the index."""
        return {
            "ordinal": self.ordinal,
            "heading": self.heading,
            "anchor": self.anchor,
            "text": self.text,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "symbol": self.symbol,
            "continues_symbol": self.continues_symbol,
        }


@dataclass
class SearchFilters:
    """Filters applied inside the index query, next to the permission filter."""

    sources: list[str] = field(default_factory=list)
    path_prefix: str | None = None
    tags: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    document_ids: list[str] = field(default_factory=list)
