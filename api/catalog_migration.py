"""Moving an installation's state into another database: what ``citewise migrate-catalog`` does.

A single-machine installation keeps its state in the data folder's SQLite file; a deployment
of several replicas keeps it in PostgreSQL (``CITEWISE_DATABASE_URL``). The copy goes from the
stores of one to the stores of the other through their contracts only (each store's
``export_*``/``import_*`` methods and its ordinary ones), so it knows no SQL and works between
any two backends: the documents with their chunks, outlines, open swaps and the facts about
the index, the sources and their runs, the API keys, usage, the audit log and the rate-limit
buckets, and the conversations with their answers and feedback. The answer cache is a cache
and starts empty.

It is meant to be run more than once: a first copy while the old server still serves, then
one more after it is stopped, which only catches up. So every write is idempotent: records
with an id or a name (documents, sources, keys, conversations, hourly usage) are written as
they are here, and the records of the logs (runs, requests, audit entries, feedback) keep their
ids, which a second copy finds already there. The target's catalog remembers which data folder
it was copied from, and when (``MIGRATED_FROM``): into that copy, a rerun also removes the
documents, open swaps and conversations that are gone here. Two targets are refused unless
forced: one that holds documents of another installation, and this folder's copy once it has
been used on its own (a document indexed or a conversation continued there after the copy:
replicas serve from it, and a copy of this folder, out of date now, would undo their writes).
Forced, records of the same id or name are replaced and nothing is removed.

The vectors are not copied: the embedded index cannot be shared between processes, so a
deployment rebuilds them in a Qdrant server or pgvector from the copied catalog.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any, TypeVar

from citewise.api.composition import Stores
from citewise.errors import ConfigError, ConflictError
from citewise.index.generations import BUILDING, LIVE, RETIRED

# The target catalog's record of where its state came from (JSON: ``source``, ``at``).
MIGRATED_FROM = "migrated_from"
# The facts about the vector index's generations: they name folders or collections of the
# vectors this installation holds, which stay where they are when those are embedded. The
# target's vectors are rebuilt as a first generation (as ``citewise restore`` does).
GENERATION_META = (LIVE, BUILDING, RETIRED)
BATCH = 500

_T = TypeVar("_T")


@dataclass
class Tally:
    """What became of one kind of record."""

    copied: int = 0  # written to the target
    already: int = 0  # in the target as here already (a rerun), so not written again
    removed: int = 0  # in the target, gone here: removed (a rerun into this folder's copy)
    left_out: list[str] = field(default_factory=list)  # not copied, and why


@dataclass
class MigrationReport:
    source: str
    target: str
    rerun: bool  # the target was copied from this data folder before
    generations_kept: bool
    chunks: int = 0
    documents: Tally = field(default_factory=Tally)
    open_swaps: Tally = field(default_factory=Tally)
    index_facts: Tally = field(default_factory=Tally)
    sources: Tally = field(default_factory=Tally)
    runs: Tally = field(default_factory=Tally)
    keys: Tally = field(default_factory=Tally)
    requests: Tally = field(default_factory=Tally)
    hourly_usage: Tally = field(default_factory=Tally)
    audit: Tally = field(default_factory=Tally)
    rate_buckets: Tally = field(default_factory=Tally)
    conversations: Tally = field(default_factory=Tally)
    answers: Tally = field(default_factory=Tally)
    feedback: Tally = field(default_factory=Tally)

    def tallies(self) -> dict[str, Tally]:
        return {name: value for name, value in vars(self).items() if isinstance(value, Tally)}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def migrate_catalog(source: Stores, target: Stores, *, origin: str, target_name: str,
                    force: bool = False, keep_generations: bool = False,
                    on_document: Callable[[int, int], None] | None = None) -> MigrationReport:
    """Copy every store of ``source`` into ``target``. ``origin`` names the source data folder
    (host and path: what a rerun is recognised by); ``keep_generations`` copies the index
    generation facts too, for vectors that stay where they are (a Qdrant server both use).
    The caller holds the source's ingest run lock, so no run changes it meanwhile."""
    # To the microsecond: records carry their times so, and one written in the second the copy
    # began, before it, must not count as written there afterwards (a rerun would be refused).
    started = datetime.now(UTC).isoformat()
    _refuse_the_same_database(source, target, target_name)
    copy = _own_copy(source, target, origin, target_name, force)
    report = MigrationReport(source=origin, target=target_name, rerun=copy is not None,
                             generations_kept=keep_generations)
    mirror = copy is not None and copy.clean
    if mirror or target.catalog.count_documents() == 0:
        # Said first, so that a copy interrupted half-way is this folder's next time. A target
        # copied over by force stays marked as it was: it is not this folder's copy alone.
        target.catalog.set_meta(MIGRATED_FROM, json.dumps({"source": origin, "at": started}))
    _copy_sources(source, target, report)  # before the documents, which name their source
    _copy_documents(source, target, report, mirror=mirror, on_document=on_document)
    _copy_index_facts(source, target, report, keep_generations)
    _copy_runs(source, target, report)
    _copy_keys(source, target, report)
    _copy_metering(source, target, report)
    _copy_conversations(source, target, report, mirror=mirror)
    return report


def _refuse_the_same_database(source: Stores, target: Stores, target_name: str) -> None:
    """A target that is the source's own database (a folder linked to this one, settings that
    open this file whatever the URL says) would be 'copied' onto itself: asked, not assumed, by
    a mark written there and looked for here."""
    probe = f"migrate-probe-{uuid.uuid4().hex}"
    target.catalog.set_meta(probe, "1")
    try:
        same = source.catalog.meta(probe) is not None
    finally:
        target.catalog.delete_meta(probe)
    if same:
        raise ConfigError(f"{target_name} opens this data folder's own database: nothing to "
                          "copy", hint="name another folder, or a PostgreSQL database")


@dataclass
class _Copy:
    """The target is this data folder's copy (made at ``at``); ``clean`` when nothing was
    written there since but by this copy, so that a rerun may also remove what is gone here."""

    at: str
    clean: bool


def _own_copy(source: Stores, target: Stores, origin: str, target_name: str,
              force: bool) -> _Copy | None:
    """Whether the target is this folder's copy, and still only that. Refused unless forced: a
    target holding documents of another installation, and this folder's copy once it has been
    used on its own (replicas serve from it since the cut-over: a copy of this folder, out of
    date now, would undo what they wrote)."""
    marked = target.catalog.meta(MIGRATED_FROM)
    mark = json.loads(marked) if marked else {}
    if mark.get("source") == origin:
        used = _used_on_its_own(source, target, mark["at"])
        if used and not force:
            raise ConflictError(
                f"{target_name} was copied from {origin} at {mark['at']}, and has been used on "
                f"its own since ({used}): copying again would undo that",
                hint="the copy is for before replicas serve from it; --force copies anyway "
                     "(records of the same id or name are replaced, nothing is removed)")
        return _Copy(at=mark["at"], clean=used is None)
    held = target.catalog.count_documents()
    if held and not force:
        where = f" (copied from {mark['source']})" if mark.get("source") else ""
        raise ConflictError(
            f"{target_name} already holds {held} documents{where}, not copied from {origin}: "
            "refusing to copy this installation over them",
            hint="point --to at an empty database; or pass --force to copy over what is "
                 "there (records with the same id or name are replaced, the others kept)")
    return None


def _used_on_its_own(source: Stores, target: Stores, since: str) -> str | None:
    """A document or conversation the target holds that it did not get from this folder, or
    None when it is this folder's copy alone."""
    ours = source.catalog.content_hashes()
    for doc_id, content in target.catalog.content_hashes().items():
        if ours.get(doc_id) == content:
            continue
        there = target.catalog.get_document(doc_id)
        here = source.catalog.get_document(doc_id)
        if there is not None and _written_there(there.indexed_at,
                                                here.indexed_at if here else None, since):
            return f"{there.source}/{there.external_id} indexed there at {there.indexed_at}"
    for row in target.conversations.export_conversations():
        mine = source.conversations.get(row.id)
        if mine != row and _written_there(row.updated_at, mine.updated_at if mine else None,
                                          since):
            return f"a conversation updated there at {row.updated_at}"
    return None


def _written_there(there: str, here: str | None, since: str) -> bool:
    """Whether a record the target wrote at ``there`` is its own: later than this folder's
    version of it (written at ``here``), or, for one this folder lacks (deleted here since, or
    never here), later than the last copy began."""
    return _instant(there) > _instant(here or since)


def _instant(text: str) -> datetime:
    """An ISO time of a record (seconds or milliseconds; one without a zone is UTC)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# The catalog -------------------------------------------------------------------------------------
def _copy_sources(source: Stores, target: Stores, report: MigrationReport) -> None:
    for record in source.sources.list_sources():
        if target.sources.get_source(record.name) == record:
            report.sources.already += 1
            continue
        target.sources.import_source(record)
        report.sources.copied += 1


def _copy_documents(source: Stores, target: Stores, report: MigrationReport, *, mirror: bool,
                    on_document: Callable[[int, int], None] | None) -> None:
    ours = sorted(source.catalog.content_hashes())
    for n, doc_id in enumerate(ours, 1):
        record = source.catalog.get_document(doc_id)
        if record is None:  # deleted since it was listed (a run holds no lock on it)
            continue
        rows = source.catalog.chunk_rows(doc_id)
        outline = source.catalog.outlines([doc_id]).get(doc_id)
        report.chunks += len(rows)
        # A rerun writes only what changed here since: unchanged documents are compared, which
        # costs a read instead of a rewrite of every chunk.
        if (target.catalog.get_document(doc_id) == record
                and target.catalog.chunk_rows(doc_id) == rows
                and target.catalog.outlines([doc_id]).get(doc_id) == outline):
            report.documents.already += 1
        else:
            target.catalog.save_document(record, [r.chunk(doc_id) for r in rows],
                                         [r.id for r in rows], outline)
            report.documents.copied += 1
        if on_document is not None:
            on_document(n, len(ours))
    open_swaps = source.catalog.pending_writes()
    for pending in open_swaps:
        target.catalog.begin_pending(pending)
    report.open_swaps.copied = len(open_swaps)
    if mirror:
        gone = set(target.catalog.content_hashes()) - set(ours)
        for doc_id in sorted(gone):
            target.catalog.delete_document(doc_id)
        report.documents.removed = len(gone)
        finished = {p.document_id for p in target.catalog.pending_writes()} \
            - {p.document_id for p in open_swaps}
        for doc_id in sorted(finished):
            target.catalog.end_pending(doc_id)
        report.open_swaps.removed = len(finished)


def _copy_index_facts(source: Stores, target: Stores, report: MigrationReport,
                      keep_generations: bool) -> None:
    skipped = {MIGRATED_FROM, *(() if keep_generations else GENERATION_META)}
    for key, value in sorted(source.catalog.meta_items().items()):
        if key in skipped:
            continue
        if target.catalog.meta(key) == value:
            report.index_facts.already += 1
        else:
            target.catalog.set_meta(key, value)
            report.index_facts.copied += 1


def _copy_runs(source: Stores, target: Stores, report: MigrationReport) -> None:
    for runs in _batches(source.sources.export_runs()):
        new = target.sources.import_runs(runs)
        report.runs.copied += new
        report.runs.already += len(runs) - new


# Keys, metering --------------------------------------------------------------------------------
def _copy_keys(source: Stores, target: Stores, report: MigrationReport) -> None:
    for key in source.keys.list():
        found = source.keys.by_id(key.id)
        assert found is not None  # listed just now, and keys are never deleted
        before = target.keys.by_id(key.id)
        try:
            target.keys.import_key(key, found[1])
        except ConflictError:
            report.keys.left_out.append(f"{key.name}: the target has another key by that name")
            continue
        if before is not None and target.keys.by_id(key.id) == before:
            report.keys.already += 1
        else:
            report.keys.copied += 1


def _copy_metering(source: Stores, target: Stores, report: MigrationReport) -> None:
    for requests in _batches(source.metering.export_usage()):
        new = target.metering.import_usage(requests)
        report.requests.copied += new
        report.requests.already += len(requests) - new
    hours = source.metering.export_hourly_usage()
    target.metering.import_hourly_usage(hours)
    report.hourly_usage.copied = len(hours)
    for entries in _batches(source.metering.export_audit()):
        new = target.metering.import_audit(entries)
        report.audit.copied += new
        report.audit.already += len(entries) - new
    # The buckets' levels, so that nobody gets a fresh allowance by the move.
    levels = source.metering.load_buckets()
    target.metering.save_buckets(levels, forget_before=0.0)
    report.rate_buckets.copied = len(levels)


# Conversations -----------------------------------------------------------------------------------
def _copy_conversations(source: Stores, target: Stores, report: MigrationReport, *,
                        mirror: bool) -> None:
    ours: set[str] = set()
    for rows in _batches(source.conversations.export_conversations()):
        ours.update(row.id for row in rows)
        changed = [row for row in rows if target.conversations.get(row.id) != row]
        target.conversations.import_conversations(changed)
        report.conversations.copied += len(changed)
        report.conversations.already += len(rows) - len(changed)
    for answers in _batches(source.conversations.export_answers()):
        new = target.conversations.import_answers(answers)
        report.answers.copied += new
        report.answers.already += len(answers) - new
    for feedback in _batches(source.conversations.export_feedback()):
        new = target.conversations.import_feedback(feedback)
        report.feedback.copied += new
        report.feedback.already += len(feedback) - new
    if mirror:
        # A conversation its owner deleted here since the last copy must not live on there.
        gone = [row.id for row in target.conversations.export_conversations()
                if row.id not in ours]
        for conversation_id in gone:
            target.conversations.delete(conversation_id)
        report.conversations.removed = len(gone)


def _batches(items: Iterable[_T], size: int = BATCH) -> Iterator[list[_T]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch
