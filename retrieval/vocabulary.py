"""The vocabulary mined from the corpus: a reviewable file of name groups, and the vetoes on it.

``citewise vocabulary mine`` reads the indexed text (``vocabulary_mining``) and writes this
file; the server reads it at start and adds its groups to the hand-written synonyms
(``synonyms.py``), which win where both know a word. Every entry carries the document and the
sentence it came from, so an operator can judge it in one reading, and veto it with
``citewise vocabulary veto TERM`` (or by adding the term to ``vetoed``). A veto is kept in the
file and read back by every later mining, so re-mining never brings a vetoed entry back.

The file is TOML (``<data dir>/vocabulary.toml`` unless ``CITEWISE_VOCABULARY_FILE`` names
another)::

    vetoed = ["optional"]                    # terms: no entry holding one is applied
    vetoed_pairs = [["ic", "internal controls"]]  # one pairing only

    [[entry]]
    terms = ["IC", "incident commander"]
    kind = "acronym"
    count = 4
    source = "runbooks:incidents/roles.md"
    sentence = "The incident commander (IC) leads the response."
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citewise.errors import ConfigError
from citewise.private_files import private_folder
from citewise.retrieval.vocabulary_patterns import KINDS


@dataclass
class Entry:
    """One group of names for one thing, with where it was read."""

    terms: list[str]  # the short name or alias first, as written
    kind: str  # one of ``vocabulary_patterns.KINDS``
    source: str  # "<source>:<path>" of the first document that says it
    sentence: str  # the sentence (or row, or front-matter line) that says it
    count: int = 1  # how many times the corpus says it

    def words(self) -> set[str]:
        return {t.lower() for t in self.terms}


@dataclass
class Vocabulary:
    entries: list[Entry] = field(default_factory=list)
    vetoed: list[str] = field(default_factory=list)
    vetoed_pairs: list[list[str]] = field(default_factory=list)
    mined_at: str | None = None
    documents: int = 0

    def is_vetoed(self, entry: Entry) -> bool:
        words = entry.words()
        return any(v.lower() in words for v in self.vetoed) or any(
            {t.lower() for t in pair} <= words for pair in self.vetoed_pairs)

    def applied(self) -> list[Entry]:
        """The entries search uses: every one that no veto names."""
        return [e for e in self.entries if not self.is_vetoed(e)]

    def groups(self) -> list[tuple[str, ...]]:
        """What ``Synonyms`` takes: one lowercase group per applied entry."""
        return [tuple(t.lower() for t in e.terms) for e in self.applied()]

    def veto(self, terms: list[str]) -> list[Entry]:
        """Veto ``terms``: one term, every entry that holds it; several, the entries that hold
        them all. Returns the entries it takes out (none: the veto is kept all the same, for a
        later mining)."""
        terms = [t.strip().lower() for t in terms if t.strip()]
        if not terms:
            raise ConfigError("a veto needs a term", hint="citewise vocabulary veto dotcom")
        if len(terms) == 1:
            if terms[0] not in self.vetoed:
                self.vetoed.append(terms[0])
        elif sorted(terms) not in [sorted(p) for p in self.vetoed_pairs]:
            self.vetoed_pairs.append(terms)
        hit = [e for e in self.entries if self.is_vetoed(e)]
        self.entries = [e for e in self.entries if not self.is_vetoed(e)]
        return hit

    def lift(self, terms: list[str]) -> bool:
        """Take back a veto; the entries it held out come back at the next mining."""
        terms = sorted(t.strip().lower() for t in terms if t.strip())
        before = (len(self.vetoed), len(self.vetoed_pairs))
        if len(terms) == 1:
            self.vetoed = [v for v in self.vetoed if v != terms[0]]
        self.vetoed_pairs = [p for p in self.vetoed_pairs if sorted(p) != terms]
        return before != (len(self.vetoed), len(self.vetoed_pairs))

    # The file ----------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> Vocabulary | None:
        """The file at ``path``, or None when there is none (no mined vocabulary: search uses
        the hand-written synonyms alone)."""
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read the vocabulary file {path}: {e}",
                              hint="fix its permissions, or set CITEWISE_VOCABULARY_FILE to "
                                   "another file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"the vocabulary file {path} is not valid TOML: {e}",
                              hint="fix the line it names, or delete the file and run "
                                   "`citewise vocabulary mine` again (vetoes are in the same "
                                   "file: keep its `vetoed` lines)") from None
        try:
            return cls._from_data(data)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"the vocabulary file {path} has an entry that is not one: {e}",
                              hint="each [[entry]] needs terms (two or more), kind, count, "
                                   "source and sentence") from None

    @classmethod
    def _from_data(cls, data: dict[str, Any]) -> Vocabulary:
        entries = []
        for raw in data.get("entry", []):
            terms = [str(t) for t in raw["terms"]]
            if len(terms) < 2:
                raise ValueError(f"terms {terms!r} name fewer than two words")
            if raw["kind"] not in KINDS:
                raise ValueError(f"kind {raw['kind']!r} is not one of {', '.join(KINDS)}")
            entries.append(Entry(terms=terms, kind=str(raw["kind"]), source=str(raw["source"]),
                                 sentence=str(raw["sentence"]), count=int(raw["count"])))
        return cls(entries=entries, vetoed=[str(v).lower() for v in data.get("vetoed", [])],
                   vetoed_pairs=[[str(t).lower() for t in p]
                                 for p in data.get("vetoed_pairs", [])],
                   mined_at=data.get("mined_at"), documents=int(data.get("documents", 0)))

    def save(self, path: Path) -> None:
        """Write the file (in place, atomically): vetoes first, then each applied entry."""
        lines = [
            "# The vocabulary citewise mined from the indexed documents (`citewise vocabulary "
            "mine`).",
            "# Search adds each group's other names to a question that uses one of them, like "
            "the hand-written",
            "# synonyms (which win where both know a word). Review the entries: a wrong one is "
            "noise in every",
            "# question that uses its words. Veto one with `citewise vocabulary veto TERM`, or "
            "add the term to",
            "# `vetoed` (a pairing to `vetoed_pairs`): vetoes survive re-mining. Restart the "
            "server to apply.",
            "# Kinds: " + "; ".join(f"{k}: {v}" for k, v in KINDS.items()) + ".",
        ]
        if self.mined_at:
            lines.append(f"mined_at = {_toml(self.mined_at)}")
        lines.append(f"documents = {self.documents}")
        lines.append("vetoed = [" + ", ".join(_toml(v) for v in self.vetoed) + "]")
        lines.append("vetoed_pairs = [" + ", ".join(
            "[" + ", ".join(_toml(t) for t in p) + "]" for p in self.vetoed_pairs) + "]")
        for e in self.applied():
            lines += ["", "[[entry]]",
                      "terms = [" + ", ".join(_toml(t) for t in e.terms) + "]",
                      f"kind = {_toml(e.kind)}", f"count = {e.count}",
                      f"source = {_toml(e.source)}", f"sentence = {_toml(e.sentence)}"]
        private_folder(path.parent)
        temporary = path.with_name(path.name + ".tmp")
        # 0600 like the rest of the data folder: it quotes the documents, restricted ones too.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(temporary, path)


def _toml(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML wants escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")
