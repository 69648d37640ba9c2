"""BEIR-format datasets: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

The corpus itself is read by ``citewise.connectors.beir`` (it is ingested like any source);
this module reads what the evaluation needs besides: the queries of a split, their relevance
judgements, and a fingerprint of the corpus that names the isolated index built from it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from citewise.errors import InvalidRequestError


@dataclass
class BeirDataset:
    folder: Path
    split: str
    queries: dict[str, str]  # only the queries the split judges, in file order
    qrels: dict[str, dict[str, int]]

    @property
    def name(self) -> str:
        return self.folder.name


def available_splits(folder: Path) -> list[str]:
    return sorted(p.stem for p in (Path(folder) / "qrels").glob("*.tsv"))


def default_split(folder: Path) -> str:
    """The only split, else ``test`` (what papers report), else ask the user to choose."""
    splits = available_splits(folder)
    if len(splits) == 1:
        return splits[0]
    if "test" in splits:
        return "test"
    raise InvalidRequestError(
        f"{folder} has the splits {splits}; choose one with --split",
        hint="tune on train or dev, and report on test",
    )


def load_dataset(folder: Path | str, split: str | None = None) -> BeirDataset:
    folder = Path(folder).expanduser().resolve()
    missing = [n for n in ("corpus.jsonl", "queries.jsonl") if not (folder / n).is_file()]
    if missing or not available_splits(folder):
        raise InvalidRequestError(
            f"{folder} is not a BEIR dataset folder (missing: "
            f"{', '.join(missing + ([] if available_splits(folder) else ['qrels/*.tsv']))})",
            hint="a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv",
        )
    split = split or default_split(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise InvalidRequestError(
            f"{folder} has no split {split!r}",
            hint=f"available: {', '.join(available_splits(folder))}",
        )
    qrels = read_qrels(qrels_path)
    queries: dict[str, str] = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                qid = str(row["_id"])
                if qid in qrels:
                    queries[qid] = str(row["text"])
    unknown = set(qrels) - set(queries)
    if unknown:
        raise InvalidRequestError(
            f"{qrels_path} judges {len(unknown)} queries that queries.jsonl lacks, "
            f"e.g. {sorted(unknown)[:3]}",
            hint="the qrels and queries files must come from the same dataset",
        )
    return BeirDataset(folder, split, queries, qrels)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id<TAB>corpus-id<TAB>score`` lines; a header line is skipped."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and parts[0] == "query-id"):
                continue
            if len(parts) < 3:
                raise InvalidRequestError(
                    f"{path}:{number} is not 'query-id<TAB>corpus-id<TAB>score'"
                )
            try:
                grade = int(float(parts[-1]))
            except ValueError:
                raise InvalidRequestError(
                    f"{path}:{number}: score {parts[-1]!r} is not a number"
                ) from None
            qrels.setdefault(parts[0], {})[parts[-2]] = grade
    return qrels


def corpus_fingerprint(folder: Path) -> str:
    """SHA-256 of corpus.jsonl: an index built from it is reused only for identical bytes."""
    digest = hashlib.sha256()
    with (Path(folder) / "corpus.jsonl").open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
