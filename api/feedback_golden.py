"""Feedback as golden-set entries: `citewise feedback export --golden FILE`.

What people said of answers becomes rows in the golden set's own shape (the fields of
``bench/golden/shared-corpora.jsonl``, with ``split: "feedback"``), so that `citewise eval
--qa` measures them and `citewise rank train --qa` learns from them:

* **helpful**: the documents the answer cited are relevant (less one marked wrong);
* **not helpful, "the right document was ..."**: that document is relevant, once it names
  an indexed document (a ``<source>/<path>``, a path inside a source, or the document's link);
* not helpful without a document: nothing to learn yet; counted, and left to a person.

``must_contain_any`` is empty (nobody said which words the answer must hold): such a row
scores search, and answers by their citations, not by a key fact. A person reviews the file
before it is used; every row carries ``from_answer`` to trace it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from citewise.api.conversation_store import StoredAnswer
from citewise.api.evaluation.qa import doc_key
from citewise.index.catalog import DocumentCatalog
from citewise.index.source_store import SourceStore


class DocumentNames:
    """Every indexed document under the names a person may give it."""

    def __init__(self, documents: list[tuple[str, str | None, str | None, str]]) -> None:
        # (source, path, url, document id) per document
        self.keys: dict[str, str] = {}
        self.paths: dict[str, set[str]] = {}
        self.urls: dict[str, str] = {}
        for source, path, url, document_id in documents:
            key = doc_key(source, path, document_id)
            self.keys[key] = key
            if path:
                self.paths.setdefault(path.strip("/"), set()).add(key)
            if url:
                self.urls[_bare_url(url)] = key

    @classmethod
    def of(cls, catalog: DocumentCatalog, sources: SourceStore) -> DocumentNames:
        return cls([(r.source, r.path, r.url, r.id) for s in sources.list_sources()
                    for r in catalog.documents_of_source(s.name).values()])

    def resolve(self, reference: str) -> str | None:
        """The ``<source>/<path>`` a reference names, or None when it names none, or several."""
        ref = reference.strip()
        if not ref:
            return None
        if "://" in ref:
            bare = _bare_url(ref)
            if bare in self.urls:
                return self.urls[bare]
            ref = urlsplit(ref).path  # a link into a repository's browser: its path's tail
        ref = ref.strip("/")
        if ref in self.keys:
            return ref
        if len(self.paths.get(ref, ())) == 1:
            return next(iter(self.paths[ref]))
        tails = {k for k in self.keys if k.endswith("/" + ref)} or {
            k for p, ks in self.paths.items() if ref.endswith("/" + p) for k in ks}
        return next(iter(tails)) if len(tails) == 1 else None


def _bare_url(url: str) -> str:
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")


@dataclass
class GoldenExport:
    entries: list[dict] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many feedback rows
    unresolved: list[str] = field(default_factory=list)  # right documents naming nothing


def golden_entries(feedback: list[tuple[dict, StoredAnswer]],
                   names: DocumentNames) -> GoldenExport:
    out = GoldenExport()
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def skip(why: str) -> None:
        out.skipped[why] = out.skipped.get(why, 0) + 1

    for given, stored in feedback:
        question = stored.standalone or stored.question
        if given["helpful"]:
            relevant = sorted({doc_key(c.source, c.path, c.document_id)
                               for c in stored.answer.citations
                               if c.n != given.get("wrong_citation")})
            if not relevant:
                skip("helpful, but the answer cited nothing")
                continue
        else:
            reference = given.get("right_document")
            if not reference:
                skip("not helpful, with no right document")
                continue
            resolved = names.resolve(reference)
            if resolved is None:
                skip("not helpful, and the right document names no indexed document")
                out.unresolved.append(reference)
                continue
            relevant = [resolved]
        if (question, tuple(relevant)) in seen:
            skip("the same question and documents again")
            continue
        seen.add((question, tuple(relevant)))
        out.entries.append({
            "question": question, "relevant": relevant, "answerable": True,
            "kind": stored.answer.kind or "general", "must_contain_any": [],
            "split": "feedback", "from_answer": stored.id})
    return out
