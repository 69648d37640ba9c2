"""A BEIR-format corpus (``corpus.jsonl``): the documents of an information-retrieval benchmark.

``citewise eval`` ingests benchmark corpora (SciFact, NFCorpus, ...) through this connector so
that they take exactly the path every other source takes: parse, chunk, embed, index. Each line
``{"_id", "title", "text"}`` becomes one plain-text document whose external id (and path) is the
benchmark's document id, which is what the relevance judgements name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from citewise.errors import SourceError
from citewise.types import PUBLIC, SourceDocument, normalise_readers


class BeirCorpusConnector:
    source_type: ClassVar[str] = "beir"

    def __init__(self, corpus: Path, readers: list[str] | None = None) -> None:
        # A benchmark corpus is public data: when the evaluation names no readers, everyone.
        self.corpus = Path(corpus)
        if self.corpus.is_dir():
            self.corpus = self.corpus / "corpus.jsonl"
        self.readers = normalise_readers(readers or [PUBLIC])

    @classmethod
    def from_options(
        cls, options: dict[str, Any], readers: list[str] | None, *, data_dir: Path | None = None
    ) -> BeirCorpusConnector:
        unknown = set(options) - {"path"}
        if "path" not in options or unknown:
            raise SourceError(
                "a beir source takes one setting, 'path': the dataset folder or its corpus.jsonl",
                hint=f"remove {sorted(unknown)}" if unknown else "add path = \"...\"",
            )
        return cls(Path(options["path"]).expanduser(), readers)

    def _lines(self) -> Iterator[tuple[int, dict]]:
        if not self.corpus.is_file():
            raise SourceError(
                f"{self.corpus} does not exist",
                hint="point at a BEIR dataset folder holding corpus.jsonl",
            )
        with self.corpus.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    row["_id"] = str(row["_id"])
                except (ValueError, KeyError, TypeError) as e:
                    # A broken line would silently shrink the corpus and skew every metric.
                    raise SourceError(
                        f"{self.corpus}:{number} is not a BEIR corpus line: {e}",
                        hint='each line must be a JSON object with "_id", "title" and "text"',
                    ) from None
                yield number, row

    def count(self) -> int:
        return sum(1 for _ in self._lines())

    def load(self, batch_size: int = 32) -> Iterator[list[SourceDocument]]:
        batch: list[SourceDocument] = []
        for _, row in self._lines():
            text = str(row.get("text") or "")
            batch.append(
                SourceDocument(
                    external_id=row["_id"],
                    title=str(row.get("title") or "").strip(),
                    content=text.encode("utf-8"),
                    media_type="text/plain",
                    path=row["_id"],
                    readers=list(self.readers),
                    body=text,
                )
            )
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
