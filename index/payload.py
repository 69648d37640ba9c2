"""What every point in the vector index carries: the contract between ingest, index and retrieval.

Ingest writes a ``ChunkPayload`` for each chunk, the vector index stores it as the point's
payload (and builds payload indexes on the fields marked ``indexed``), and retrieval reads it back
into search results. This dataclass is the only definition of that shape: a field added here is
written, indexed if marked, and readable everywhere, and a reader never guesses a key.

Two kinds of field live side by side, because Qdrant filters on a point's own payload:

* the **document's** (same on every chunk of it): its id and live version, source, title, path,
  links, readers, tags, service, and the connector's metadata;
* the **chunk's** own: where it sits (ordinal, heading, anchor, lines, symbol) and its text.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from citewise.types import Chunk

if TYPE_CHECKING:
    from citewise.index.catalog import DocumentRecord

# Field metadata: ``indexed`` fields get a keyword payload index (filters and deletes hit them).
_INDEXED = {"indexed": True}


@dataclass
class DocumentPayload:
    """The document's share of every chunk's payload (the same on each), built once by ingest."""

    document_id: str = field(metadata=_INDEXED)
    # Which version of the document the chunk belongs to: ingest writes a new version beside the
    # old one and the catalog decides which is live (see ``ingest.pipeline``).
    version: str = field(metadata=_INDEXED)
    source: str = field(metadata=_INDEXED)
    # Principals that may read it (``public``, ``user:<id>``, ``group:<name>``); every search
    # filters on it inside the engine query.
    readers: list[str] = field(metadata=_INDEXED)
    title: str = ""
    path: str | None = None
    # Every ancestor folder of ``path`` and the path itself: a keyword match on one element is a
    # prefix filter that respects folder boundaries.
    path_prefixes: list[str] = field(default_factory=list, metadata=_INDEXED)
    url: str | None = None
    # Per-chunk link with ``{start}``, ``{end}`` and ``{anchor}`` to fill in (see
    # ``retrieval.search.chunk_link``).
    link_template: str | None = None
    tags: list[str] = field(default_factory=list, metadata=_INDEXED)
    service: str | None = field(default=None, metadata=_INDEXED)
    # What the connector knows (repository, language, last commit, breadcrumb...).
    meta: dict[str, Any] = field(default_factory=dict)


    @classmethod
    def for_record(cls, record: DocumentRecord) -> DocumentPayload:
        """What the points of a catalog ``DocumentRecord`` carry about their document."""
        return cls(
            document_id=record.id, version=record.version, source=record.source,
            readers=list(record.readers), title=record.title, path=record.path,
            path_prefixes=path_prefixes(record.path), url=record.url,
            link_template=record.link_template, tags=list(record.tags),
            service=record.service, meta=record.metadata)


@dataclass
class ChunkPayload(DocumentPayload):
    """One point's payload: its document's fields, then the chunk's own (``Chunk.location``)."""

    ordinal: int = 0
    text: str = ""
    heading: str = ""
    anchor: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = None
    # Code: whether the chunk continues the definition ``symbol`` names past the line declaring
    # it, which an earlier chunk holds (the code chunker splits a long one along its
    # statements): its first line is no signature. None on points written before the chunker
    # said so (the catalog keeps it too, so a point rebuilt from the catalog says it again):
    # a reader then reads the chunk's first line, as before (``retrieval/answering``).
    continues_symbol: bool | None = None

    def to_payload(self) -> dict[str, Any]:
        """The fields in order, as ``dataclasses.asdict`` gives them (lists and the metadata
        copied), without its generic recursion: 4% of an ingest's CPU samples went there
        (bench/results/remote-embedding-profile.md)."""
        return {name: _copied(getattr(self, name)) for name in _FIELD_ORDER}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ChunkPayload:
        """Read a stored payload; keys this version does not know are ignored."""
        return cls(**{k: v for k, v in payload.items() if k in _FIELD_NAMES})

    @classmethod
    def for_chunk(cls, document: DocumentPayload, chunk: Chunk) -> ChunkPayload:
        # The document's fields are shared by its chunks' payloads until ``to_payload``
        # copies them: nothing changes a payload in between.
        return cls(**{name: getattr(document, name) for name in _DOCUMENT_FIELDS},
                   **chunk.location())


def _copied(value: Any) -> Any:
    """A value as ``asdict`` copies it: lists of strings and scalars shallowly (their items
    are immutable), anything else deeply."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return deepcopy(value)


_FIELD_ORDER = tuple(f.name for f in fields(ChunkPayload))
_FIELD_NAMES = frozenset(_FIELD_ORDER)
_DOCUMENT_FIELDS = tuple(f.name for f in fields(DocumentPayload))

INDEXED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(ChunkPayload) if f.metadata.get("indexed")
)
"""Keyword payload fields that get a payload index: every filter and delete goes through them."""


def path_prefixes(path: str | None) -> list[str]:
    """``a/b/c.md`` -> ``["a", "a/b", "a/b/c.md"]``: lets a keyword index answer prefix filters."""
    if not path:
        return []
    parts = path.strip("/").split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
