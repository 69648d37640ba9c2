"""The connector contract: small capabilities, not one fat base class.

A connector knows one kind of source and produces ``SourceDocument``s; it knows nothing of
chunks, vectors or storage. A connector that a config file can name is ``Configurable``: the
registry builds it from the source's settings (``from_options``). The pipeline uses one of two
capabilities:

* **load** (a folder): ``load()`` yields every document the source admits, in batches (never
  one big list), so memory stays flat. After a complete load the pipeline deletes the catalog
  documents the run did not see, so ``load()`` must either yield every admitted document (a
  document it cannot read is yielded with ``error`` set: it is kept, not deleted) or raise.
* **sync** (git, Confluence): the source can say what changed since a state it returned last
  time (a commit, a modification time), so a run reads only that. ``sync()`` yields
  ``SyncBatch``es: changed documents, ids known to be deleted, and, in a full pass, the complete
  list of live ids. See ``SyncRequest`` and ``SyncBatch`` for who persists what, and when.

If the source cannot be read or listed completely, raise ``SourceError`` instead of returning a
partial listing: the pipeline then deletes nothing and keeps the old state. A single document
that cannot be read is yielded with ``error`` set, so the run records it and goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from citewise.errors import ConfigError
from citewise.types import SourceDocument


def required_readers(source_type: str, readers: list[str] | None) -> list[str]:
    """The readers of documents that name none: a folder or git source must be told, since
    "public" is never assumed (it must be said somewhere, ``readers = ["public"]``)."""
    if readers:
        return list(readers)
    raise ConfigError(
        f"a {source_type} source must say who may read its documents",
        hint='add readers = ["group:eng"] to the source (readers = ["public"] for everyone), '
             "or set default_readers in [settings] / CITEWISE_DEFAULT_READERS",
    )


@runtime_checkable
class LoadConnector(Protocol):
    source_type: ClassVar[str]

    def load(self, batch_size: int = 32) -> Iterator[list[SourceDocument]]: ...


@dataclass
class SyncRequest:
    """What the pipeline hands a syncing connector at the start of a run."""

    # The ``state`` the connector returned when the last run finished; {} the first time.
    state: dict = field(default_factory=dict)
    # The last ``checkpoint`` of a run that did not finish (crashed, killed, source failed):
    # resume from it instead of starting over.
    checkpoint: dict | None = None
    # External ids that failed in the last finished run: read them again, whatever changed.
    retry: list[str] = field(default_factory=list)
    # ``--force``, or the index settings changed since documents were indexed: list and yield
    # everything, with ``live_ids``.
    full: bool = False


@dataclass
class SyncBatch:
    """One step of a sync run. Every field is optional; a batch may carry only a checkpoint."""

    # New or changed documents (all of them in a full pass). Unchanged ones are still skipped by
    # content hash, so yielding one costs a read, never an embedding.
    documents: list[SourceDocument] = field(default_factory=list)
    # External ids known to be gone from the source.
    deleted: list[str] = field(default_factory=list)
    # Only in a full listing pass, at most once a run: the complete set of ids the source admits.
    # Catalog documents missing from it are deleted after the last batch.
    live_ids: list[str] | None = None
    # Persisted as soon as this batch is written; returned as ``SyncRequest.checkpoint`` if the
    # run does not finish.
    checkpoint: dict | None = None
    # The state to persist when the run finishes (succeeded or partial); the last one wins.
    state: dict | None = None
    # Documents this run expects, for the progress bar.
    total: int | None = None
    # Problems that belong to no one document (a space that cannot be listed, a page whose
    # attachments cannot be listed): reported with the run, which ends partial unless they are
    # warnings.
    errors: list[SyncError] = field(default_factory=list)


@dataclass
class SyncError:
    """A problem of a sync run beyond a single document."""

    # What it concerns, for the report: "space ENG", "attachments of page 1234".
    scope: str
    message: str
    # An external id to hand back in the next run's ``SyncRequest.retry`` (say, the page whose
    # attachments could not be listed), or None when the next run covers it anyway.
    retry: str | None = None
    # A warning is reported with the run but does not make it partial: nothing failed to be
    # indexed (say, one user of a space's permissions could not be named and was left out).
    warning: bool = False


@runtime_checkable
class SyncConnector(Protocol):
    """A source that says what changed since the state it returned last time.

    Optional on it: ``reach_options``, a class attribute naming the settings that change how the
    source is reached (credential variables, timeouts, request rates, page sizes) rather than
    which documents it holds or how they read. A change to any other setting of the source (a
    filter, its readers, a link template) makes the next run a full pass (``SyncRequest.full``):
    an incremental one would apply it only to the documents the source happened to change.
    """

    source_type: ClassVar[str]

    def sync(self, request: SyncRequest, batch_size: int = 32) -> Iterator[SyncBatch]: ...


class Configurable(Protocol):
    """A connector a config file names (``type = "folder"``): the registry builds it from the
    source's settings. Connectors made in code (the reindex's ``StoredDocuments``, a test's
    fake source) need not be."""

    source_type: ClassVar[str]

    @classmethod
    def from_options(cls, options: dict[str, Any], readers: list[str] | None, *,
                     data_dir: Path | None = None) -> Self:
        """The connector of a source whose settings are ``options`` (the source's entry less
        ``name``, ``type``, ``readers`` and ``schedule``). ``readers``: the source's, or the
        server's default; ``None`` when neither is set, which a connector whose documents take
        the source's readers refuses (``required_readers``). ``data_dir``: where it may keep
        working files (a git clone). Raises ``SourceError`` or ``ConfigError`` for settings
        it does not take, naming them."""
        ...


class ConfigurableLoad(LoadConnector, Configurable, Protocol):
    """A loading connector the registry builds (a folder, a BEIR corpus)."""


class ConfigurableSync(SyncConnector, Configurable, Protocol):
    """A syncing connector the registry builds (git, Confluence)."""
