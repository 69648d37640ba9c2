"""Training pairs mined from the catalog: what the installation's own text says goes together.

Each pair is an *anchor* (a short text someone might search with) and the *positive* passage
it should find, tagged with the kind of evidence that ties them:

* ``title``: a document's title -> the start of its body;
* ``heading``: a section's heading path (under its document's title) -> the section's text;
* ``alert``: an alert name (CamelCase, ``KubePodCrashLooping``, in a title, a heading or the
  ``alerts`` front matter) -> its runbook's meaning section, and "<name> mitigation" -> its
  mitigation section;
* ``link``: a link's text -> the document (or the section its ``#fragment`` names) it points
  to, when that is in the catalog;
* ``summary``: a front-matter ``summary``/``description`` -> its document's body start;
* ``service``: a service's name -> its document, when only one document names it;
* ``code``: a code symbol with its docstring's first sentence -> its definition, docstring
  removed;
* ``feedback``: a question people marked the answer to as helpful -> the passage it cited
  (given by the caller, who reads the feedback store).

Everything is read from the catalog (documents, chunks, outlines) and, for links, which the
indexed text drops, from the stored copy of each Markdown document (the blob store): the text
the installation indexed, never the sources again. The passage is the text without the anchor
(a section without its heading, a body without its title), so that the model learns what text
is *about*, not to find the anchor's words in it.

Then: the leakage guard (``leakage.py``) drops pairs that touch an evaluation question;
duplicates go; an anchor that names several documents ("Overview", a service with ten
runbooks) goes, since in-batch negatives would teach the model that the other documents are
wrong; each document keeps at most ``per_document`` pairs, spread over the kinds, so that one
huge page does not dominate; and whole documents are held out for validation, so that no
document is on both sides.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from citewise.index.blobs import BlobStore
from citewise.index.catalog import ChunkRow, DocumentCatalog, DocumentRecord
from citewise.index.outline import Outline, Section
from citewise.ingest.tuning.leakage import LeakageGuard, normalise

KINDS = ("title", "heading", "alert", "link", "summary", "service", "code", "feedback")
MAX_PASSAGE_CHARS = 1200  # the model reads 128 word-pieces (~500 characters); leave it some
MIN_PASSAGE_CHARS = 60  # less is a heading over a link or a "TODO"
_WORDLIKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]{7,}\b")
_HUMPS = re.compile(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]+|[a-z0-9]+")
_LINK = re.compile(r"(?<!!)\[([^\]\n]{2,120})\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FILE_NAME = re.compile(r"(^|/)[\w.-]+\.(md|html?|txt|ya?ml|json)$", re.I)  # "redis.md"
_DOCSTRING = re.compile(r'^[ \t]*[rRbBuU]?("""|\'\'\')(.*?)\1', re.S | re.M)
# Sections whose text points elsewhere, or says nothing of the heading.
_NOT_ABOUT = {"related", "see also", "references", "links", "table of contents", "contents",
              "toc", "todo", "further reading", "resources", "useful links"}
# Link texts that say nothing of their target.
_VAGUE = {"here", "this", "link", "this link", "click here", "docs", "documentation", "source",
          "runbook", "this runbook", "this page", "page", "more", "details", "read more",
          "see", "see here", "issue", "this issue", "mr", "merge request", "dashboard", "edit"}
_MEANING = ("meaning", "description", "summary", "overview", "impact", "what it means",
            "symptoms")
_MITIGATION = ("mitigation", "resolution", "remediation", "how to fix", "fix", "actions",
               "steps", "runbook")


@dataclass
class Pair:
    anchor: str
    positive: str
    kind: str
    document_id: str  # the document the positive passage comes from
    source: str = ""
    path: str = ""  # that document's path (or external id): where a reviewer finds it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MinedPairs:
    """What the miner kept, for training and for validation, and why it left the rest out."""

    train: list[Pair] = field(default_factory=list)
    validation: list[Pair] = field(default_factory=list)
    found: dict[str, int] = field(default_factory=dict)  # per kind, before anything dropped
    dropped_leakage: dict[str, int] = field(default_factory=dict)  # per reason
    dropped_duplicate: int = 0
    dropped_ambiguous: int = 0
    dropped_cap: int = 0
    documents: int = 0
    guarded_questions: int = 0

    def per_kind(self, pairs: Iterable[Pair]) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for p in pairs:
            counts[p.kind] += 1
        return {k: counts[k] for k in KINDS if counts[k]}

    def summary(self) -> dict[str, Any]:
        return {"documents": self.documents, "found": self.found,
                "train": self.per_kind(self.train), "validation": self.per_kind(self.validation),
                "dropped_for_leakage": self.dropped_leakage,
                "dropped_for_leakage_total": sum(self.dropped_leakage.values()),
                "guarded_questions": self.guarded_questions,
                "dropped_duplicate": self.dropped_duplicate,
                "dropped_ambiguous": self.dropped_ambiguous,
                "dropped_over_cap": self.dropped_cap}


class PairMiner:
    """Reads the catalog once and mines every kind of pair from it (see the module's doc)."""

    def __init__(self, catalog: DocumentCatalog, blobs: BlobStore | None = None, *,
                 readers: list[str] | None = None) -> None:
        self.catalog = catalog
        self.blobs = blobs
        self.readers = set(readers) if readers else None  # None: every document

    def documents(self) -> list[DocumentRecord]:
        """The documents with content (that ``readers`` may read), in a stable order."""
        out = []
        for doc_id in sorted(self.catalog.content_hashes()):
            record = self.catalog.get_document(doc_id)
            if record is None or record.chunk_count == 0:
                continue
            if self.readers is not None and not self.readers & set(record.readers):
                continue
            out.append(record)
        return out

    def mine(self, progress: Callable[[int], object] | None = None) -> Iterator[Pair]:
        """Every pair the catalog offers, document by document (nothing dropped yet)."""
        docs = self.documents()
        by_path = {(d.source, d.path or d.external_id): d for d in docs}
        for start in range(0, len(docs), 100):
            batch = docs[start:start + 100]
            outlines = self.catalog.outlines([d.id for d in batch])
            for doc in batch:
                yield from self._document_pairs(doc, outlines.get(doc.id), by_path)
                if progress is not None:
                    progress(1)

    # One document -------------------------------------------------------------------------------
    def _document_pairs(self, doc: DocumentRecord, outline: Outline | None,
                        by_path: dict[tuple[str, str], DocumentRecord]) -> Iterator[Pair]:
        chunks = self.catalog.chunk_rows(doc.id)

        def pair(anchor: str, positive: str, kind: str) -> Pair | None:
            anchor, positive = _squash(anchor), _clip(positive)
            if len(anchor) < 3 or len(positive) < MIN_PASSAGE_CHARS:
                return None
            return Pair(anchor, positive, kind, doc.id, doc.source, doc.path or doc.external_id)

        found: list[Pair | None] = []
        body = _body_start(doc, outline, chunks)
        found.append(pair(doc.title, body, "title"))
        for key in ("summary", "description"):
            value = doc.metadata.get(key)
            if isinstance(value, str):
                found.append(pair(value, body, "summary"))
        service = doc.service or doc.metadata.get("service")
        if isinstance(service, str) and service.strip():
            found.append(pair(service, body, "service"))
        if outline is not None:
            found.extend(pair(_heading_anchor(doc.title, s), _section_text(outline, s),
                              "heading") for s in outline.sections
                         if s.title and _about_something(s) and normalise(s.title) !=
                         normalise(doc.title))
            for name, meaning, mitigation in _alerts(doc, outline):
                if meaning is not None:
                    found.append(pair(name, _section_text(outline, meaning), "alert"))
                if mitigation is not None:
                    found.append(pair(f"{name} mitigation", _section_text(outline, mitigation),
                                      "alert"))
        found.extend(pair(anchor, text, "code") for anchor, text in _code_pairs(chunks))
        yield from (p for p in found if p is not None)
        yield from self._link_pairs(doc, by_path)

    def _link_pairs(self, doc: DocumentRecord,
                    by_path: dict[tuple[str, str], DocumentRecord]) -> Iterator[Pair]:
        """Links are not in the indexed text (it keeps their words, not where they point), so
        they are read from the document's stored copy."""
        if self.blobs is None or doc.media_type != "text/markdown" or not doc.blob_key:
            return
        try:
            text = self.blobs.get(doc.blob_key).decode("utf-8", errors="replace")
        except Exception:  # a lost blob costs this document's links, not the run
            return
        here = posixpath.dirname(doc.path or doc.external_id)
        seen: set[tuple[str, str]] = set()
        for label, href in _LINK.findall(text):
            label = _squash(re.sub(r"[`*_]", "", label))
            if normalise(label) in _VAGUE or label.startswith(("http", "www.")) \
                    or len(normalise(label)) < 3 or _FILE_NAME.search(label):
                continue
            target = _resolve(href, here, doc.source, by_path)
            if target is None or target[0].id == doc.id or (label, target[0].id) in seen:
                continue
            seen.add((label, target[0].id))
            record, fragment = target
            positive = self._target_text(record, fragment)
            if len(positive) >= MIN_PASSAGE_CHARS:
                # The pair belongs to the passage's document (its split, its cap), not to
                # the page that links to it.
                yield Pair(label, _clip(positive), "link", record.id, record.source,
                           record.path or record.external_id)

    def _target_text(self, record: DocumentRecord, fragment: str) -> str:
        outline = self.catalog.outlines([record.id]).get(record.id)
        if outline is not None and fragment:
            for s in outline.sections:
                if s.anchor == fragment:
                    return _section_text(outline, s)
        return _body_start(record, outline, self.catalog.chunk_rows(record.id))


# The steps after mining ---------------------------------------------------------------------------


def select(pairs: Iterable[Pair], guard: LeakageGuard, *, per_document: int = 24,
           validation_share: float = 0.1, max_validation: int = 500,
           seed: int = 13) -> MinedPairs:
    """Guard, deduplicate, drop ambiguous anchors, cap per document, split by document."""
    out = MinedPairs(guarded_questions=guard.questions)
    found: dict[str, int] = defaultdict(int)
    kept: list[Pair] = []
    seen: set[tuple[str, str]] = set()
    documents: set[str] = set()
    for p in pairs:
        found[p.kind] += 1
        documents.add(p.document_id)
        if not guard.allows(p.anchor, p.positive):
            continue
        key = (normalise(p.anchor), normalise(p.positive))
        if key in seen:
            out.dropped_duplicate += 1
            continue
        seen.add(key)
        kept.append(p)
    out.found = {k: found[k] for k in KINDS if found[k]}
    out.documents = len(documents)
    out.dropped_leakage = dict(guard.dropped)

    # An anchor that leads to several documents, or a passage several anchors of one kind lead
    # to from different documents, would make one pair's positive another's negative.
    anchor_docs: dict[str, set[str]] = defaultdict(set)
    for p in kept:
        anchor_docs[normalise(p.anchor)].add(p.document_id)
    clear = [p for p in kept if len(anchor_docs[normalise(p.anchor)]) == 1]
    out.dropped_ambiguous = len(kept) - len(clear)

    by_doc: dict[str, list[Pair]] = defaultdict(list)
    for p in clear:
        by_doc[p.document_id].append(p)
    capped: list[Pair] = []
    for doc_id in sorted(by_doc):
        chosen = _spread(by_doc[doc_id], per_document)
        out.dropped_cap += len(by_doc[doc_id]) - len(chosen)
        capped.extend(chosen)

    held = {d for d in by_doc if _held_out(d, validation_share, seed)}
    if not held and len(by_doc) >= 3 and validation_share > 0:
        # A small corpus where no document fell in the share: hold out one all the same, so
        # that training is still judged (and stopped) on something it did not see.
        held = {min(by_doc, key=lambda d: _digest(f"{seed}:{d}"))}
    for p in capped:
        (out.validation if p.document_id in held else out.train).append(p)
    if len(out.validation) > max_validation:
        # Keep a fixed sample (by a hash, not by order) so the figures stay comparable.
        out.validation.sort(key=lambda p: _digest(f"{seed}:{p.anchor}:{p.document_id}"))
        out.validation = out.validation[:max_validation]
    # One positive per validation passage: the metrics rank it among all the others.
    distinct, passages = [], set()
    for p in out.validation:
        if normalise(p.positive) not in passages:
            passages.add(normalise(p.positive))
            distinct.append(p)
    out.validation = distinct
    return out


def _spread(pairs: list[Pair], cap: int) -> list[Pair]:
    """Up to ``cap`` pairs, taking each kind in turn, so a page with fifty headings still gives
    its title and alert pairs."""
    if len(pairs) <= cap:
        return pairs
    queues: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        queues[p.kind].append(p)
    order = [k for k in KINDS if k in queues]
    chosen: list[Pair] = []
    while len(chosen) < cap:
        for kind in order:
            if queues[kind] and len(chosen) < cap:
                chosen.append(queues[kind].pop(0))
    return chosen


def _held_out(document_id: str, share: float, seed: int) -> bool:
    return int(_digest(f"{seed}:{document_id}")[:8], 16) / 0xFFFFFFFF < share


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# Reading the text ---------------------------------------------------------------------------------


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _clip(text: str) -> str:
    text = text.strip()
    if len(text) <= MAX_PASSAGE_CHARS:
        return text
    cut = text.rfind(" ", 0, MAX_PASSAGE_CHARS)
    return text[:cut if cut > MAX_PASSAGE_CHARS // 2 else MAX_PASSAGE_CHARS]


def _body_start(doc: DocumentRecord, outline: Outline | None, chunks: list[ChunkRow]) -> str:
    """The first text of the document after its title: the outline's first sections' blocks,
    or the first chunks for a document without an outline (code, plain text)."""
    if outline is not None:
        parts: list[str] = []
        for s in outline.sections:
            text = _text(s)
            if s.title and normalise(s.title) != normalise(doc.title) and parts:
                text = f"{s.title}\n{text}"
            if text.strip():
                parts.append(text)
            if sum(len(p) for p in parts) >= MAX_PASSAGE_CHARS:
                break
        return "\n".join(parts)
    return "\n".join(c.text for c in chunks[:3])


def _text(section: Section) -> str:
    """A section's text without what only points elsewhere: lists whose items are each one
    link (a table of contents, a reading list) and the note that a table of contents follows
    ("Table of Contents generated with DocToc")."""
    kept = [b for b in section.blocks
            if not (b.kind == "list" and b.items and all(i.link_only for i in b.items))
            and not (b.kind == "paragraph" and len(b.text) < 80
                     and "table of contents" in b.text.lower())]
    return replace(section, blocks=kept).plain_text()


def _heading_anchor(title: str, section: Section) -> str:
    path = section.path or section.title
    return path if normalise(title) in normalise(path) else f"{title} > {path}"


def _about_something(section: Section) -> bool:
    return normalise(section.title) not in _NOT_ABOUT and not all(
        b.kind == "list" and all(i.link_only for i in b.items) for b in section.blocks)


def _section_text(outline: Outline, section: Section) -> str:
    """A section's own text, then its subsections' (with their headings), up to the limit."""
    parts = [_text(section)]
    for sub in outline.subsections(section):
        if sum(len(p) for p in parts) >= MAX_PASSAGE_CHARS:
            break
        parts.append(f"{sub.title}\n{_text(sub)}")
    return "\n".join(p for p in parts if p.strip())


def _alerts(doc: DocumentRecord,
            outline: Outline) -> Iterator[tuple[str, Section | None, Section | None]]:
    """Each alert the runbook is about, with its meaning and mitigation sections: a runbook
    titled after one alert (its top-level sections), or a section titled after one (its own
    subsections)."""
    named = doc.metadata.get("alerts")
    names = [n for n in named if isinstance(n, str)] if isinstance(named, list) else []
    names += alert_names(doc.title)
    seen = set()
    for name in names:
        if name not in seen:
            seen.add(name)
            yield name, _find(outline.sections, _MEANING), _find(outline.sections, _MITIGATION)
    for s in outline.sections:
        found = alert_names(s.title)
        if len(found) == 1 and found[0] not in seen:
            seen.add(found[0])
            subs = outline.subsections(s)
            meaning = _find(subs, _MEANING) or (s if s.blocks else None)
            yield found[0], meaning, _find(subs, _MITIGATION)


def alert_names(text: str) -> list[str]:
    """Alert names in a title or heading: one word of three or more humps, two of them words
    (``KubePodCrashLooping``, ``KubeAPIDown``, ``etcdHighNumberOfFailedGRPCRequests``), not a
    product's name (``PostgreSQL``, ``JavaScript``, ``OpenShift``)."""
    out = []
    for word in _WORDLIKE.findall(text):
        humps = _HUMPS.findall(word)
        if len(humps) >= 3 and sum(1 for h in humps if not h.isupper()) >= 2 \
                and any(c.isupper() for c in word[1:]):
            out.append(word)
    return out


def _find(sections: list[Section], names: tuple[str, ...]) -> Section | None:
    for name in names:
        for s in sections:
            if normalise(s.title) == name or normalise(s.title).startswith(name + " "):
                return s
    return None


def _code_pairs(chunks: list[ChunkRow]) -> Iterator[tuple[str, str]]:
    """A definition's name and its docstring's first sentence -> its code without the
    docstring (left in, the anchor's words would be found in the passage verbatim)."""
    for c in chunks:
        if not c.symbol or c.continues_symbol:
            continue
        m = _DOCSTRING.search(c.text)
        if m is None:
            continue
        doc = _squash(m.group(2))
        first = re.split(r"(?<=[.!?])\s", doc, maxsplit=1)[0]
        name = c.symbol.split(">")[-1].strip()
        name = re.sub(r"^(async\s+)?(def|class|func|function|fn)\s+", "", name)
        code = (c.text[:m.start()] + c.text[m.end():]).strip()
        if first and code:
            yield f"{name}: {first}", code


def _resolve(href: str, here: str, source: str,
             by_path: dict[tuple[str, str], DocumentRecord]) -> tuple[DocumentRecord, str] | None:
    """The catalog document (and heading anchor) a link points to: a path relative to the
    linking document, or a URL whose path ends with a document's path in the same source (a
    runbook linking to its own repository's web view)."""
    parts = urlsplit(href)
    fragment = unquote(parts.fragment).lower()
    path = unquote(parts.path)
    if not path:
        return None
    if parts.scheme in ("", "file") and not parts.netloc:
        rel = posixpath.normpath(posixpath.join(here, path)) if not path.startswith("/") \
            else path.lstrip("/")
        if rel.startswith("../"):  # outside the source
            return None
        record = by_path.get((source, rel)) or by_path.get((source, rel + ".md")) \
            or by_path.get((source, posixpath.join(rel, "README.md")))
        return (record, fragment) if record is not None else None
    if parts.scheme in ("http", "https"):
        bits = path.strip("/").split("/")
        for i in range(len(bits) - 1):  # the longest tail first; two parts at least
            record = by_path.get((source, "/".join(bits[i:])))
            if record is not None:
                return record, fragment
    return None
