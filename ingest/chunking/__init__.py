"""Chunkers, one per kind of document, behind one small interface.

* ``sections.py``: prose (Markdown by markdown-it, HTML and text by unstructured: ``parse.py``),
  split along headings;
* ``code/``: source code and config (``CODE_MEDIA_TYPE``), split along functions and classes.

Every chunker keeps each chunk within the embedding model's window (counting the title and
heading header embedded with it) and records where the chunk sits: heading path and anchor, or
symbol, and exact source lines. Its ``version`` is part of the index signature of the documents
it chunks, so changing one chunker re-chunks only its kind of document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from citewise.ingest.chunking.code import CodeChunker
from citewise.ingest.chunking.sections import SectionChunker
from citewise.types import CODE_MEDIA_TYPE, Chunk, SourceDocument


class DocumentChunker(Protocol):
    version: str

    def chunk(self, document_id: str, doc: SourceDocument) -> list[Chunk]:
        """The document's chunks in reading order (``DocumentError`` for bad input)."""


class Chunkers:
    """The chunker for each media type; prose for everything not claimed otherwise."""

    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int = 200,
                 count_many: Callable[[list[str]], list[int]] | None = None) -> None:
        self.max_tokens = max_tokens
        self.default: DocumentChunker = SectionChunker(count_tokens, max_tokens, count_many)
        self.by_media_type: dict[str, DocumentChunker] = {
            CODE_MEDIA_TYPE: CodeChunker(count_tokens, max_tokens),
        }

    def for_media_type(self, media_type: str) -> DocumentChunker:
        return self.by_media_type.get(media_type, self.default)
