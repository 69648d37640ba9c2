"""The connector contract: small capabilities, not one fat base class.

A connector knows one kind of source and produces ``SourceDocument``s; it knows nothing of
chunks, vectors or storage. Two capabilities matter to the pipeline:

* ``load()`` yields every document the source currently admits, in batches (never one big list),
  so memory stays flat on large sources.
* ``list_ids()`` yields the external ids of those same documents without reading their bodies.
  The pipeline deletes catalog documents missing from this listing, so it must admit exactly
  the documents ``load()`` admits, or pruning deletes the wrong ones. If the source cannot be
  listed completely, raise ``SourceError`` instead of returning a partial listing.

A document that cannot be read is yielded with ``error`` set, so the run records it and goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Protocol, runtime_checkable

from citewise.types import SourceDocument


@runtime_checkable
class LoadConnector(Protocol):
    source_type: ClassVar[str]

    def load(self, batch_size: int = 32) -> Iterator[list[SourceDocument]]: ...


@runtime_checkable
class ListIdsConnector(Protocol):
    def list_ids(self) -> Iterator[str]: ...
