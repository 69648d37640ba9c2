"""Cutting documents into chunks and outlines, in the run's process or in worker processes.

Parsing and chunking are most of a run's own CPU when the embedding model is remote (a profile
of the shared corpora through a loopback embedder: 37% of the samples, the writes 35%), and a
run is one interpreter: one core, whatever the machine has. They are also a pure function of a
document (``cut_document``), so ``CutQueue`` can hand them to worker processes while the run's
process reads the next documents, embeds and writes. With the packaged model they stay in the
run's process: the model already computes on every core (``IngestPipeline.parse_processes``).

What the queue promises the pipeline:

- **Order.** Cuts come back in the order documents were put, so windows, checkpoints and the
  deletion brake see the same sequence as when everything ran in one process.
- **Bounded memory.** At most ``max_waiting`` documents, and ``max_waiting_bytes`` of their
  content, wait; ``put`` blocks on the oldest beyond that. The bounds are generous on purpose:
  while the run waits on its embedding and writing stages, the workers go on cutting the next
  window's documents (an embedding window is ~200 documents of the shared corpora).
- **No document lost to a dying worker.** A worker that dies (a parser crashing on odd input,
  the kernel's out-of-memory killer) breaks the whole pool: every document that may have been
  with a worker is cut again in a new pool, one at a time, so a document that kills a worker
  by itself fails, with an error that says so, and the run goes on. A new pool after a break
  first cuts a probe: if even that fails, workers cannot start here (a main script without
  its ``__main__`` guard) and the run cuts the rest itself. A killed run's workers end
  themselves (``_end_with``); Ctrl-C is left to the run's process (workers ignore it once
  started).
- **Marks.** ``mark`` queues a tag with no document (a sync checkpoint): it comes back in its
  place, so the workers go on cutting past it while it waits for the documents before it.
- **Small runs cost nothing.** The pool starts only once ``start_after`` documents have asked to
  be cut in this run (a nightly run that changed three pages cuts them itself; a document whose
  bytes are those indexed never asks), and workers are spawned, not forked: a server's threads
  and the tokenizer's own must not be copied mid-flight. A worker's start costs ~0.3-0.6 s of
  CPU (it imports the parsers and the main script, and reads the tokenizer).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from citewise.errors import DocumentError
from citewise.index.dense import DenseEncoder, embedding_text
from citewise.index.injection import injected_chunks
from citewise.index.outline import Outline
from citewise.index.sparse import Bm25Encoder
from citewise.index.vector_index import SparseVector
from citewise.ingest.anchors import anchor_style
from citewise.ingest.chunking import Chunkers
from citewise.ingest.outline import build_outline
from citewise.ingest.parse import document_text, without_nul
from citewise.ingest.redact import redact_document
from citewise.types import CODE_MEDIA_TYPE, Chunk, SourceDocument

log = logging.getLogger("citewise.ingest")

# Most worker processes a run starts by itself: past a few, the run's own process (reading,
# embedding requests, writes) is the limit again.
AUTO_MAX_PROCESSES = 4
# Documents a run cuts itself before it starts workers (``CutQueue``'s ``start_after``).
PARSE_START_AFTER = 16
# How much lower than the run's process its workers run (``nice``): a tenth of the CPU share of a
# normal process when both want the same core.
WORKER_NICENESS = 10
# How often a worker checks that the run's process is still there (``_end_with``).
PARENT_CHECK_SECONDS = 1.0

Tag = TypeVar("Tag")


@dataclass
class Cut:
    """What a document is cut into, or why it could not be."""

    # The document as redacted: what is stored, hashed and indexed (None when redaction failed).
    doc: SourceDocument | None = None
    # Its bytes after redaction are those already indexed under today's settings: nothing to do.
    unchanged: bool = False
    chunks: list[Chunk] = field(default_factory=list)
    outline: Outline | None = None
    injected: list[int] = field(default_factory=list)  # ordinals of chunks aimed at a model
    # Each chunk's BM25 vector, of the text it is embedded as (``embedding_text``).
    sparse: list[SparseVector] = field(default_factory=list)
    error: str | None = None  # the document failed: this is recorded as its error
    # The failure was not the document's (a bug, a library failing on odd input): the
    # traceback, for the log.
    unexpected: str | None = None


def cut_document(chunkers: Chunkers, sparse: Bm25Encoder, doc_id: str, doc: SourceDocument,
                 unchanged_hash: str | None = None) -> Cut:
    """One document redacted, and unless its redacted bytes hash to ``unchanged_hash`` (the
    version already indexed), cut: its chunks with their BM25 vectors, the chunks that carry
    instructions aimed at a model, and its outline. Never raises for the document's sake: a
    failure is a ``Cut`` with ``error`` set, so that it crosses a process boundary as data."""
    try:
        # Before hashing, so the stored blob, the catalog and the index only ever see the
        # redacted text.
        doc = redact_document(without_nul(doc))
    except Exception as e:  # never store a document we could not check for secrets
        return Cut(error=f"secret scan failed: {e}", unexpected=traceback.format_exc())
    if unchanged_hash is not None and doc.content_hash == unchanged_hash:
        return Cut(doc, unchanged=True)
    try:
        chunks = chunkers.for_media_type(doc.media_type).chunk(doc_id, doc)
        # Text aimed at a model rather than a reader (the injection guardrail acts on it at
        # answer time); recorded per chunk, never silently.
        injected = injected_chunks(chunks)
        outline = None
        if doc.media_type != CODE_MEDIA_TYPE:
            outline = build_outline(
                document_text(doc), doc.media_type, title=doc.title,
                line_offset=doc.body_line_offset,
                anchor=anchor_style(doc.metadata.get("anchor_style")))
        vectors = [sparse.embed_document(embedding_text(doc.title, c.heading, c.text))
                   for c in chunks]
    except DocumentError as e:
        return Cut(doc, error=e.message)
    except Exception as e:  # a bug or a library failure on odd input: still one document
        return Cut(doc, error=f"{type(e).__name__}: {e}", unexpected=traceback.format_exc())
    return Cut(doc, chunks=chunks, outline=outline, injected=injected, sparse=vectors)


def available_cores() -> int:
    """The cores this process may use: its CPU set, and no more than a cgroup's CPU quota (a
    container limited to one CPU on a 16-core node has one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cpu_quota()
    return cores if quota is None else max(1, min(cores, quota))


def _cpu_quota() -> int | None:
    """Whole CPUs the cgroup quotas allow this process (rounded up), the tightest of its own
    cgroup's and its parents' (cgroup v2, a systemd ``CPUQuota=`` included), or cgroup v1's
    ``cpu.cfs_quota_us``; None when none applies or none can be read."""
    limits: list[int] = []
    root = Path("/sys/fs/cgroup")
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: "0::/system.slice/citewise.service"
            folder = root / path.lstrip("/")
            while True:
                try:
                    quota, period = (folder / "cpu.max").read_text().split()[:2]
                    if quota != "max":
                        limits.append(-(-int(quota) // int(period)))
                except (OSError, ValueError):
                    pass
                if folder == root or root not in folder.parents:
                    break
                folder = folder.parent
        elif "cpu" in controllers.split(","):  # cgroup v1
            for base in (root / "cpu", root / "cpu,cpuacct"):
                try:
                    quota_us = int((base / "cpu.cfs_quota_us").read_text())
                    period_us = int((base / "cpu.cfs_period_us").read_text())
                except (OSError, ValueError):
                    continue
                if quota_us > 0 and period_us > 0:
                    limits.append(-(-quota_us // period_us))
                break
    return min(limits) if limits else None


# The chunkers and BM25 encoder of a worker process, set once by ``_start_worker``.
_worker_chunkers: Chunkers | None = None
_worker_sparse: Bm25Encoder | None = None


def _start_worker(model_path: str, max_tokens: int, sparse: Bm25Encoder, parent: int) -> None:
    global _worker_chunkers, _worker_sparse
    threading.Thread(target=_end_with, args=(parent,), name="citewise-parent-watch",
                     daemon=True).start()
    # Ctrl-C is for the run's process, which stops the workers itself once it has taken the
    # cuts they owe (they would otherwise die mid-cut and print a traceback each).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Background work: where the run shares the machine with requests (a server's own run),
    # they come first. The run's process paces itself (pacing.py); its workers give way to
    # anything at the normal priority instead, and still take every idle core.
    if hasattr(os, "nice"):
        os.nice(WORKER_NICENESS)
    # The same token counts as the run's process: the model folder's tokenizer, no weights.
    # Read now, so that a folder without one stops the worker here (the queue then parses in
    # the run's process) rather than failing every document.
    dense = DenseEncoder(Path(model_path))
    dense.tokenizer  # noqa: B018
    _worker_chunkers = Chunkers(dense.count_tokens, max_tokens, dense.count_tokens_many)
    _worker_sparse = sparse


def _end_with(parent: int) -> None:
    """End this worker once the run's process is gone. A killed run (the out-of-memory killer,
    ``kill -9``, a crash) never closes the pool, and a worker waiting on its queue would wait
    forever: it holds that queue's other end itself."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def _cut_in_worker(doc_id: str, doc: SourceDocument, unchanged_hash: str | None) -> Cut:
    assert _worker_chunkers is not None and _worker_sparse is not None, \
        "the worker was started without its chunkers"
    return cut_document(_worker_chunkers, _worker_sparse, doc_id, doc, unchanged_hash)


# What a new pool is asked first after a break: do workers start at all?
_PROBE = SourceDocument("citewise-probe", "Probe", b"# Probe\n\nA worker can cut this.\n",
                        "text/markdown")
PROBE_TIMEOUT = 60.0


def _cut_back(entry: _Waiting[Any]) -> bool:
    """Whether a worker sent this document's cut back."""
    f = entry.future
    return f is not None and f.done() and not f.cancelled() and f.exception() is None


@dataclass
class _Waiting(Generic[Tag]):
    tag: Tag
    doc_id: str = ""
    doc: SourceDocument | None = None  # None for a mark (``CutQueue.mark``)
    unchanged_hash: str | None = None
    future: Future[Cut] | None = None
    cut: Cut | None = None
    # It was with a worker when its pool broke: cut again alone, so that it fails only if it
    # breaks a pool by itself.
    suspect: bool = False

    @property
    def size(self) -> int:
        return len(self.doc.content) if self.doc is not None else 0


# The cut of a mark: nothing to cut, it only holds its place in the order.
_MARK = Cut()


class CutQueue(Generic[Tag]):
    """Documents in, cuts out, in the order put; cut in ``processes`` worker processes, or
    here when ``processes`` is 0. ``tag`` travels with each document and comes back with its
    cut (the pipeline's own record of the document; it never crosses to a worker).

    ``put``, ``mark`` and ``drain`` return iterators of the cuts ready, oldest first: each is
    taken off the queue as the caller reaches it, so a caller interrupted while it waits for
    one (Ctrl-C) has handled every cut before it, and the rest stay queued for the next call.
    """

    def __init__(self, chunkers: Chunkers, sparse: Bm25Encoder, model_path: Path, *,
                 processes: int, start_after: int = PARSE_START_AFTER, max_waiting: int = 512,
                 max_waiting_bytes: int = 64 * 2**20) -> None:
        self._chunkers = chunkers
        self._sparse = sparse
        self._model_path = model_path
        self.processes = processes
        self._start_after = start_after
        self._max_waiting = max(max_waiting, 1)
        self._max_waiting_bytes = max_waiting_bytes
        self._waiting_bytes = 0  # content of the documents waiting
        self._waiting: deque[_Waiting[Tag]] = deque()  # every entry not taken, in order
        self._unsent: deque[_Waiting[Tag]] = deque()  # documents not handed to a worker yet
        self._flying = 0  # handed to a worker and not settled
        self._alone = False  # a suspect is in flight: nothing else goes out meanwhile
        self._pool: ProcessPoolExecutor | None = None
        self._asked = 0  # documents put in this run that needed cutting
        self.worker_cuts = 0  # documents the workers answered for in this run
        self.restarts = 0  # pools that broke and were started again

    def put(self, tag: Tag, doc_id: str, doc: SourceDocument,
            unchanged_hash: str | None = None) -> Iterator[tuple[Tag, Cut]]:
        """Queue a document (``cut_document``'s arguments) now; the cuts that are ready,
        oldest first, waiting for the oldest while too many documents wait."""
        entry = _Waiting(tag, doc_id, doc, unchanged_hash)
        if unchanged_hash is not None and doc.content_hash == unchanged_hash:
            # The bytes are those indexed, which were redacted already (redaction leaves its
            # own output as it is): unchanged, with no redaction and no worker. Most documents
            # of a nightly run are.
            entry.cut = Cut(doc, unchanged=True)
        elif not self.processes or self._asked < self._start_after:
            self._asked += 1
            entry.cut = self._cut_here(entry)
        else:
            self._asked += 1
            self._unsent.append(entry)
        self._waiting.append(entry)
        self._waiting_bytes += entry.size
        self._hand_out()
        return self._take(full=True)

    def mark(self, tag: Tag) -> Iterator[tuple[Tag, Cut]]:
        """Queue a mark now: ``tag`` comes back once every document put before it has, with
        an empty cut (a sync checkpoint: the documents before it go on being cut meanwhile)."""
        self._waiting.append(_Waiting(tag, cut=_MARK))
        return self._take(full=False)

    def drain(self) -> Iterator[tuple[Tag, Cut]]:
        """Every cut still owed, in order (waiting for each)."""
        return self._take(full=False, every=True)

    def close(self) -> None:
        """Stop the workers; documents not taken yet are dropped (the run is ending)."""
        self._waiting.clear()
        self._unsent.clear()
        self._waiting_bytes = 0
        self._stop_pool(wait=True)

    def _take(self, *, full: bool, every: bool = False) -> Iterator[tuple[Tag, Cut]]:
        """The cuts at the head of the queue that are ready; waiting for the head while the
        queue is over its bounds (``full``), or for every one (``every``)."""
        while self._waiting:
            # Before the head is taken off, not between that and handing it back: whatever
            # interrupts this (a pool starting again, Ctrl-C) leaves the head in the queue.
            self._hand_out()
            head = self._waiting[0]
            if head.cut is None:
                over = full and (len(self._waiting) > self._max_waiting
                                 or self._waiting_bytes > self._max_waiting_bytes)
                if not (every or over) and not (head.future is not None and head.future.done()):
                    return
                self._settle(head)
            assert head.cut is not None
            self._waiting.popleft()
            self._waiting_bytes -= head.size
            yield head.tag, head.cut

    def _settle(self, head: _Waiting[Tag]) -> None:
        """Wait for the oldest document's cut, starting pools again as workers die."""
        while True:
            self._hand_out()
            if head.cut is not None:  # cut here (workers cannot start), or blamed for a break
                return
            if head.future is None:
                # Out of the queue: handling a break was interrupted (Ctrl-C) after it took
                # the document back. It goes first again, and nothing is thought in flight.
                if head not in self._unsent:
                    self._unsent.appendleft(head)
                head.suspect = self._alone = False  # it goes out now, whatever else flies
                self._flying = sum(1 for e in self._waiting
                                   if e.cut is None and e.future is not None)
                continue
            try:
                cut = head.future.result()
            except BrokenProcessPool:
                self._pool_broke()
                continue
            except Exception as e:  # a cut that could not be sent back (pickling): the document's
                cut = Cut(error=f"{type(e).__name__}: {e}", unexpected=traceback.format_exc())
            head.cut = cut
            self._flying -= 1
            self._alone = False
            self.worker_cuts += 1
            return

    def _pool_broke(self) -> None:
        """A worker died, which breaks the whole pool. What it held is cut again alone; a
        suspect that was alone is the one that broke it, and fails. If a new pool cannot cut
        even a probe, no worker starts now: the run cuts the rest itself, but for the
        suspects when workers had worked before (they fail: one of them may crash it)."""
        held = [e for e in self._waiting if e.cut is None and e.future is not None]
        lone = held[0] if self._alone and len(held) == 1 else None
        # The pool passes work to its workers in the order submitted, at most one more than
        # it has workers: only the first ones not finished can have been with a worker.
        with_a_worker = self.processes + 1
        requeue = []
        for entry in held:
            if _cut_back(entry):
                assert entry.future is not None
                entry.cut = entry.future.result()  # finished before the break
                self.worker_cuts += 1
            else:
                requeue.append(entry)
        # Taken back and queued again in one step (an interruption between the two would
        # leave them nowhere; ``_settle`` finds such a head and queues it again anyway).
        for entry in requeue:
            entry.future = None
            if with_a_worker > 0:
                entry.suspect, with_a_worker = True, with_a_worker - 1
        self._unsent.extendleft(reversed(requeue))
        self._stop_pool(wait=False)
        self.restarts += 1
        if not self._probe():
            if self.worker_cuts:
                # Workers did start, then one died and none starts now (out of memory?):
                # whatever may have killed it is not tried in the run's own process, where it
                # would take the run down. It fails, and the next run reads it again.
                for entry in requeue:
                    if entry.suspect:
                        entry.cut = Cut(error="a parse worker died while this document may have "
                                              "been with it, and no new worker could start to "
                                              "try it alone; the next run tries it again")
            self._cut_the_rest_here()
            return
        if lone is not None:
            lone.cut = Cut(error="parsing this document ended the worker process that parsed "
                                 "it (a crash in a parser, or out of memory); it was tried "
                                 "again alone and ended it again")
            self._unsent.remove(lone)
            requeue.remove(lone)
        log.warning("a parse worker process died; %d documents that may have been with it are "
                    "parsed again, one at a time", sum(1 for e in requeue if e.suspect))

    def _probe(self) -> bool:
        """Whether a new pool's worker starts and cuts a document (the pool is kept if so)."""
        try:
            self._workers().submit(_cut_in_worker, "probe", _PROBE, None).result(PROBE_TIMEOUT)
        except (BrokenProcessPool, TimeoutError) as e:
            log.warning("parse worker processes could not start (%s); this run parses in its "
                        "own process. A script that starts runs must do so under `if __name__ "
                        "== '__main__':`; set CITEWISE_PARSE_PROCESSES=0 to not try",
                        str(e) or type(e).__name__)
            self._stop_pool(wait=False)
            return False
        return True

    def _cut_the_rest_here(self) -> None:
        """Workers cannot start: every document still owed is cut in this process."""
        self.processes = 0
        self._unsent.clear()
        for entry in self._waiting:
            if entry.cut is None:
                entry.future = None
                entry.cut = self._cut_here(entry)

    def _stop_pool(self, *, wait: bool) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
        self._flying = 0
        self._alone = False

    def _hand_out(self) -> None:
        """Give unsent documents to the pool, in order, every one (so that the workers go on
        while the run waits on its writes), but a suspect only alone: nothing else in flight,
        nothing after it until it is cut."""
        while self._unsent and not self._alone:
            entry = self._unsent[0]
            if entry.suspect and self._flying:
                return
            assert entry.doc is not None
            try:
                entry.future = self._workers().submit(_cut_in_worker, entry.doc_id, entry.doc,
                                                      entry.unchanged_hash)
            except BrokenProcessPool:  # a worker died since the last submit
                self._pool_broke()
                continue
            self._unsent.popleft()
            self._flying += 1
            self._alone = entry.suspect

    def _cut_here(self, entry: _Waiting[Tag]) -> Cut:
        assert entry.doc is not None
        return cut_document(self._chunkers, self._sparse, entry.doc_id, entry.doc,
                            entry.unchanged_hash)

    def _workers(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(str(self._model_path), self._chunkers.max_tokens, self._sparse,
                          os.getpid()))
            log.info("parsing with %d worker processes", self.processes)
        return self._pool
