"""Code-aware chunking: source files split along their structure, with exact line ranges.

An engineer asking "where do we set the retry budget?" wants the function that does it, cited by
its lines. So a chunk is, where it fits, one whole definition (a function, a class, a method, a
block), with its decorators, docstring and the comments right above it; module-level code in
between is packed into its own chunks. Every chunk knows its ``symbol`` ("class Client > def
retry") and the exact first and last line it covers (1-based, inclusive).

One strategy per kind of code reads a file into units (``units.py``); the first strategy that
claims the file's language (``doc.metadata["language"]``) and can read it wins:

* ``python.py``: the standard library's ``ast`` (a file that does not parse goes on to indentation);
* ``brace.py``: brace languages, with a light lexer;
* ``indent.py``: indentation languages (YAML, TOML/INI, Makefile, Dockerfile, Ruby, Lua...);
* anything else: blocks separated by blank lines.

``packer.py`` then packs the units into chunks the same way for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from citewise.ingest.chunking.code.brace import BraceStrategy
from citewise.ingest.chunking.code.indent import IndentStrategy
from citewise.ingest.chunking.code.packer import Packer
from citewise.ingest.chunking.code.python import PythonStrategy
from citewise.ingest.chunking.code.units import Unit, block_units
from citewise.ingest.parse import document_text
from citewise.types import Chunk, SourceDocument


class CodeStrategy(Protocol):
    """Reads files of some languages into their top-level units."""

    languages: frozenset[str]

    def units(self, language: str, lines: list[str], text: str) -> list[Unit] | None:
        """The file's units, or None when this strategy cannot read this file."""


STRATEGIES: tuple[CodeStrategy, ...] = (PythonStrategy(), BraceStrategy(), IndentStrategy())


def structure(language: str, lines: list[str], text: str | None = None) -> list[Unit]:
    """The file's top-level units, by the first strategy for its language that can read it."""
    text = text if text is not None else "\n".join(lines)
    for strategy in STRATEGIES:
        if language in strategy.languages:
            units = strategy.units(language, lines, text)
            if units is not None:
                return units
    return block_units(lines, 1, len(lines))


class CodeChunker:
    """Chunks of a source file along its structure; each within ``max_tokens`` word-pieces,
    counting the ``embedding_text(title, heading, text)`` header."""

    # Part of every code document's index signature: bump it when chunks would come out
    # differently, and the next run re-chunks (and only re-embeds what changed). Not bumped for
    # ``continues_symbol``: the chunks are the same, and a point written before lacks only
    # that mark, which its readers do without (``index/payload.py``); bumping would also make
    # an index built by `citewise reindex` refuse ingest runs until the next reindex.
    version = "code-v2"

    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int = 200) -> None:
        self.count_tokens = count_tokens
        self.max_tokens = max_tokens

    def chunk(self, document_id: str, doc: SourceDocument) -> list[Chunk]:
        text = document_text(doc)
        lines = text.split("\n")
        language = str(doc.metadata.get("language") or "").lower()
        packer = Packer(document_id, doc, lines, self.count_tokens, self.max_tokens)
        packer.pack(structure(language, lines, text), None)
        return packer.merged()
