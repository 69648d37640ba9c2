"""Mining the vocabulary from the installation's own indexed text.

It reads what the catalog keeps of each live document (``index/catalog.py``): the title, the
front matter (tags and metadata), and the outline's headings, paragraphs, list items and tables
(``index/outline.py``); code files have no outline and are not read. Each sentence goes through
``vocabulary_patterns``; what they find is counted across the corpus, and then held to the
rules that keep a wrong synonym out (precision over recall: a mined group is added to every
question that uses its words):

* **common words**: an acronym that the corpus also writes as an ordinary lowercase word, in
  prose rather than code ("GET" for a toolkit, and "get"; "IT" and "it") is dropped, since every
  question saying the word would get it; an alias between two lowercase names made of such
  words ("accounts" a.k.a. "namespaces") too: one writer's wording, not the organisation's;
* **ambiguous**: a short name given two different meanings (by their stems) keeps the one said
  at least twice as often as the next, or neither;
* **subsumed**: a pair where one name's words are all in the other ("Publisher", "Mainstream
  Publisher") adds only a generic word's meaning, and is dropped;
* **code names** are kept only when one of the two is a service's name (a document's
  ``service``) and both appear in at least ``CODE_NAME_DOCUMENTS`` documents together;
* ``min_count``: how many times an entry must be said (1: once is a definition).

Mining is a command (``citewise vocabulary mine``), not a step of every ingest: its output is
meant to be reviewed before search uses it, and the server reads the file at start.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from citewise.index.catalog import DocumentCatalog, DocumentRecord
from citewise.index.outline import Outline
from citewise.index.sparse import tokenize
from citewise.retrieval.vocabulary import Entry, Vocabulary
from citewise.retrieval.vocabulary_patterns import (
    Found,
    in_definition,
    in_front_matter,
    in_sentence,
    in_table,
    sentences,
)

# Documents in which a code name and its service's name must both appear (the definition's
# own included): one sentence saying "staging (`gstg`)" is not yet the organisation's usage.
CODE_NAME_DOCUMENTS = 3
# An acronym the corpus writes in lowercase this often, and this large a share of the time, is
# an ordinary word too.
COMMON_WORD_TIMES = 5
COMMON_WORD_SHARE = 0.2
# A short name with two meanings keeps the first only when it is said this many times as often.
DOMINANT = 2.0
_BATCH = 200
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_CODE_SPAN = re.compile(r"`[^`]*`")
_EDGES = "\"'“”‘’()[]{}<>,.;:!?*_"


@dataclass
class Mined:
    """What a mining found: the entries kept, and how many were dropped, by rule."""

    entries: list[Entry]
    documents: int
    dropped: Counter[str] = field(default_factory=Counter)
    # What each rule dropped (reason, entry): what `citewise vocabulary mine --dropped` prints.
    rejected: list[tuple[str, Entry]] = field(default_factory=list)

    def vocabulary(self, vetoes: Vocabulary | None = None) -> Vocabulary:
        """The file to write: these entries under the vetoes of ``vetoes`` (the file as it was),
        so that a vetoed entry found again stays out."""
        return Vocabulary(entries=list(self.entries),
                          vetoed=list(vetoes.vetoed) if vetoes else [],
                          vetoed_pairs=[list(p) for p in vetoes.vetoed_pairs] if vetoes else [],
                          mined_at=datetime.now(UTC).isoformat(timespec="seconds"),
                          documents=self.documents)


@dataclass
class _Seen:
    found: Found
    source: str
    count: int = 0


def mine(catalog: DocumentCatalog, *, principals: list[str] | None = None,
         min_count: int = 1, progress: Callable[[int, int], None] | None = None) -> Mined:
    """Mine every live document of ``catalog`` (with ``principals``: only those one of them may
    read, so that the file names nothing of a restricted document)."""
    ids = sorted(catalog.content_hashes())
    if principals is not None:
        readable = catalog.readable_documents(ids, principals)
        ids = [i for i in ids if i in readable]
    return mine_documents(_documents(catalog, ids, progress), min_count=min_count,
                          total=len(ids))


def _documents(catalog: DocumentCatalog, ids: list[str],
               progress: Callable[[int, int], None] | None
               ) -> Iterator[tuple[DocumentRecord, Outline | None]]:
    for start in range(0, len(ids), _BATCH):
        batch = ids[start:start + _BATCH]
        outlines = catalog.outlines(batch)
        for doc_id in batch:
            record = catalog.get_document(doc_id)
            if record is not None:
                yield record, outlines.get(doc_id)
        if progress:
            progress(min(start + _BATCH, len(ids)), len(ids))


def mine_documents(documents: Iterable[tuple[DocumentRecord, Outline | None]], *,
                   min_count: int = 1, total: int = 0) -> Mined:
    """Mine documents given with their outlines (what ``mine`` reads from the catalog)."""
    seen: dict[tuple[tuple[str, ...], tuple[str, ...]], _Seen] = {}
    cased: Counter[str] = Counter()  # a word's occurrences written all lowercase
    every: Counter[str] = Counter()  # all of them, any case
    texts: list[str] = []  # each document's text, lowercase: where code names co-occur
    services: set[str] = set()
    count = 0
    for record, outline in documents:
        count += 1
        where = f"{record.source}:{record.path or record.external_id}"
        for service in (record.service, record.metadata.get("service")):
            if isinstance(service, str) and service.strip():
                services.add(service.strip().lower())
        found, text = _read(record, outline)
        for token in _prose_words(text):
            every[token.lower()] += 1
            if token.islower():
                cased[token] += 1
        texts.append(" ".join(text.lower().split()))
        for f in found:
            key = _key(f)
            if key not in seen:
                seen[key] = _Seen(f, where)
            seen[key].count += 1
    rejected: list[tuple[str, _Seen]] = []
    kept: list[_Seen] = []
    for s in seen.values():
        reason = _refused(s, cased, every, services, texts, min_count)
        if reason:
            rejected.append((reason, s))
        else:
            kept.append(s)
    kept = _unambiguous(kept, rejected)
    kept.sort(key=_order)
    rejected.sort(key=lambda r: (r[0], *_order(r[1])))
    return Mined([_entry(s) for s in kept], count or total,
                 Counter(reason for reason, _ in rejected),
                 [(reason, _entry(s)) for reason, s in rejected])


def _order(s: _Seen) -> tuple[int, str, str]:
    """Most said first, then by name."""
    return (-s.count, s.found.terms[0].lower(), s.found.terms[1].lower())


def _entry(s: _Seen) -> Entry:
    return Entry(terms=list(s.found.terms), kind=s.found.kind, source=s.source,
                 sentence=_short(s.found.sentence), count=s.count)


def _read(record: DocumentRecord, outline: Outline | None) -> tuple[list[Found], str]:
    """What one document defines, and its text (for the word counts)."""
    found = list(in_front_matter(record.title, record.metadata, record.tags))
    found += in_sentence(record.title, heading=True)
    text = [record.title]
    for section in outline.sections if outline else ():
        if section.title:
            text.append(section.title)
            found += in_sentence(section.title, heading=True)
        for block in section.blocks:
            if block.kind in ("paragraph", "quote"):
                text.append(block.text)
                for sentence in sentences(block.text):
                    found += in_sentence(sentence)
            elif block.kind == "list":
                for item in block.items:
                    for line in (item.text, *item.notes, *item.sub):
                        text.append(line)
                        found += in_definition(line)
                        for sentence in sentences(line):
                            found += in_sentence(sentence)
            elif block.kind == "table":
                found += in_table(block.header, block.rows)
                text.extend(" ".join(row) for row in block.rows)
    return found, "\n".join(text)


def _prose_words(text: str) -> Iterator[str]:
    """The plain words of ``text``: not code (`oc get pvc` says nothing of whether "pvc" is an
    ordinary word), nor parts of paths, links or names with dots and dashes."""
    for raw in _CODE_SPAN.sub(" ", text).split():
        word = raw.strip(_EDGES)
        if word.isalpha():
            yield word


def _key(f: Found) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Two findings are one entry when their names stem alike, in either order."""
    a, b = (tuple(tokenize(t)) or (t.lower(),) for t in f.terms)
    return (a, b) if a <= b else (b, a)


def _refused(s: _Seen, cased: Counter[str], every: Counter[str], services: set[str],
             texts: list[str], min_count: int) -> str | None:
    """Why an entry is not kept, or None."""
    short, long = s.found.terms
    short_words, long_words = set(tokenize(short)), set(tokenize(long))
    if not short_words or not long_words or short_words <= long_words \
            or long_words <= short_words:
        return "subsumed"
    if s.count < min_count:
        return "said too few times"
    if s.found.kind == "code_name":
        if short.lower() not in services and long.lower() not in services:
            return "code name of no service"
        together = sum(1 for t in texts if _holds(t, short.lower()) and _holds(t, long.lower()))
        if together < CODE_NAME_DOCUMENTS:
            return "code name seen together too rarely"
        return None
    if s.found.kind == "alias" and all(_ordinary(t, cased) for t in (short, long)):
        return "ordinary words"
    if not short.islower() and " " not in short:
        plural = short.endswith("s") and short[:-1].isupper()
        low = short[:-1].lower() if plural else short.lower()
        lowercase = cased[low] + cased[short.lower()]
        if lowercase >= COMMON_WORD_TIMES and lowercase >= COMMON_WORD_SHARE * every[low]:
            return "an ordinary word too"
    return None


def _ordinary(name: str, cased: Counter[str]) -> bool:
    """A name written in lowercase whose every word the corpus uses as a plain word ("accounts",
    "strictly necessary"): an alias between two of those is one writer's wording, and would
    reach every question that uses the words."""
    return name.islower() and all(cased[w] >= COMMON_WORD_TIMES for w in _TOKEN.findall(name))


def _holds(text: str, name: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])", text) is not None


def _unambiguous(kept: list[_Seen], rejected: list[tuple[str, _Seen]]) -> list[_Seen]:
    """A short name with several meanings keeps the dominant one, or none."""
    by_short: dict[str, list[_Seen]] = defaultdict(list)
    for s in kept:
        by_short[s.found.terms[0].lower()].append(s)
    out = []
    for group in by_short.values():
        group.sort(key=lambda s: -s.count)
        if len(group) == 1 or group[0].count >= DOMINANT * group[1].count:
            out.append(group[0])
            rejected.extend(("ambiguous", s) for s in group[1:])
        else:
            rejected.extend(("ambiguous", s) for s in group)
    return out


def _short(sentence: str, limit: int = 300) -> str:
    sentence = " ".join(sentence.split())
    return sentence if len(sentence) <= limit else sentence[:limit - 1] + "…"
