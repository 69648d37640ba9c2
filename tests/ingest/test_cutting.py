"""Parsing and chunking in worker processes (ingest/cutting.py): the same cuts, in the order the
documents were given, as in the run's own process; a worker that dies loses no document and
only the document that kills it fails; workers that cannot start leave the run to parse
itself; and a run through workers indexes exactly what a run without them does."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import textwrap
import time

import psutil
import pytest

from citewise.index.catalog import document_id
from citewise.index.sparse import Bm25Encoder
from citewise.ingest.chunking import Chunkers
from citewise.ingest.cutting import WORKER_NICENESS, CutQueue, available_cores, cut_document
from citewise.ingest.jobs import run_source
from citewise.settings import SourceConfig
from citewise.types import SourceDocument

SPARSE = Bm25Encoder()
# A GitHub token's shape (``ingest/redact.py``): it must never reach a chunk, here or in a worker.
TOKEN = "ghp_" + "Zq3xR8vKw2LmN5pT7yB4cD6fH9jS1aE0uGiO"


def markdown(i: int) -> str:
    """A runbook of a size that varies with ``i``: headings, steps with commands, a table."""
    steps = "\n".join(f"{n}. Run `svc-{i}-ctl step {n}` and wait for the {n}th check to pass."
                      for n in range(1, 2 + i % 7))
    prose = " ".join(f"Service {i} keeps its state in shard {k}, replicated twice." for k in
                     range(3 + (i * 5) % 40))
    return textwrap.dedent(f"""\
        # Service {i} recovery

        {prose}

        ## Steps

        {{steps}}

        ## Limits

        | setting | value |
        | --- | --- |
        | retries | {i % 5} |
        | timeout | {10 + i}s |

        ```bash
        kubectl -n svc-{i} rollout restart deploy/api
        ```
        """).replace("{steps}", steps)


def documents(n: int) -> list[SourceDocument]:
    docs = []
    for i in range(n):
        if i % 9 == 4:
            docs.append(SourceDocument(f"wiki/page-{i}.html", f"Page {i}",
                                       f"<h1>Page {i}</h1><p>Owner: team {i}.</p>".encode(),
                                       "text/html"))
        else:
            docs.append(SourceDocument(f"runbooks/svc-{i}.md", f"Service {i} recovery",
                                       markdown(i).encode(), "text/markdown",
                                       path=f"runbooks/svc-{i}.md"))
    return docs


class EndsTheWorker(SourceDocument):
    """A document whose arrival kills the process that receives it: unpickling it calls
    ``os._exit``, as a parser's crash (or the out-of-memory killer) would end a worker. In the
    test's own process it is an ordinary document."""

    def __reduce__(self):  # noqa: D105
        return (os._exit, (70,))


@pytest.fixture(scope="module")
def chunkers(dense) -> Chunkers:
    return Chunkers(dense.count_tokens, 200, dense.count_tokens_many)


def run_queue(queue: CutQueue, docs: list[SourceDocument]) -> list[tuple[int, object]]:
    out = []
    try:
        for i, doc in enumerate(docs):
            out += queue.put(i, f"doc-{i}", doc)
        out += queue.drain()
    finally:
        queue.close()
    return out


def test_workers_cut_as_the_run_does_and_hand_cuts_back_in_order(chunkers, dense):
    docs = documents(40)
    for i in (20, 25):
        docs[i].content += f"\n\nexport GITHUB_TOKEN={TOKEN}\n".encode()
    # Documents asked for with the hash they had when indexed are left alone: 30 and up at
    # once (their bytes are those indexed), 25 once redacted (its token was taken out).
    known = {i: cut_document(chunkers, SPARSE, f"doc-{i}", docs[i]).doc.content_hash
             for i in (25, *range(30, 40))}
    before = {p.pid for p in psutil.Process().children()}
    queue: CutQueue[int] = CutQueue(chunkers, SPARSE, dense.model_path, processes=2,
                                    start_after=3, max_waiting=8)
    out = []
    try:
        for i, doc in enumerate(docs):
            out += queue.put(i, f"doc-{i}", doc, known.get(i))
        out += queue.drain()
        # The workers give way to the process they work for (and to a server's requests).
        workers = [p for p in psutil.Process().children()
                   if p.pid not in before and "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2
        assert {p.nice() for p in workers} == {min(19, os.nice(0) + WORKER_NICENESS)}
        # Ctrl-C reaches the whole process group; the workers leave it to the run.
        for worker in workers:
            worker.send_signal(signal.SIGINT)
        time.sleep(0.5)
        more = list(queue.put(40, "doc-40", documents(41)[40])) + list(queue.drain())
        assert [tag for tag, _ in more] == [40] and more[0][1].chunks
        assert queue.restarts == 0 and all(w.is_running() for w in workers)
    finally:
        queue.close()
    assert [tag for tag, _ in out] == list(range(40))
    # The first three were cut here, before the pool started; 30 and up needed no cut; and
    # document 40 came after the Ctrl-C.
    assert queue.worker_cuts == 28
    for (i, cut), doc in zip(out, docs, strict=True):
        here = cut_document(chunkers, SPARSE, f"doc-{i}", doc, known.get(i))
        assert cut.error is None and cut.doc == here.doc
        assert cut.unchanged == (i in known)
        assert cut.chunks == here.chunks and bool(cut.chunks) == (i not in known)
        assert cut.sparse == here.sparse and len(cut.sparse) == len(cut.chunks)
        assert cut.outline == here.outline
    redacted = out[20][1]
    assert TOKEN.encode() not in redacted.doc.content
    assert not any(TOKEN in c.text for c in redacted.chunks)


def test_a_dying_worker_loses_no_document_and_only_its_killer_fails(chunkers, dense, caplog):
    docs = documents(24)
    docs[10] = EndsTheWorker(**vars(docs[10]))
    queue: CutQueue[int] = CutQueue(chunkers, SPARSE, dense.model_path, processes=1,
                                    start_after=2)
    before = {p.pid for p in psutil.Process().children()}
    out = []
    with caplog.at_level(logging.WARNING, logger="citewise.ingest"):
        try:
            for i, doc in enumerate(docs):
                out += queue.put(i, f"doc-{i}", doc)
                if i == 10:
                    # The worker dies when it reaches it: the next documents are put into a
                    # pool that is already broken (where submitting raises).
                    worker = [p for p in psutil.Process().children() if p.pid not in before
                              and "spawn_main" in " ".join(p.cmdline())]
                    assert len(worker) == 1
                    deadline = time.monotonic() + 60
                    while running(worker[0].pid) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    time.sleep(1)  # for the pool to notice
            out += queue.drain()
        finally:
            queue.close()
    assert [tag for tag, _ in out] == list(range(24))
    failed = {i: cut.error for i, cut in out if cut.error}
    assert list(failed) == [10]
    assert "ended the worker process" in failed[10] and "tried again alone" in failed[10]
    for i, cut in out:
        if i != 10:
            assert cut.chunks == cut_document(chunkers, SPARSE, f"doc-{i}", docs[i]).chunks
    # It broke the pool it shared, then the one it had to itself.
    assert queue.restarts == 2
    assert "parse worker process died" in caplog.text


def test_when_no_worker_starts_after_one_died_the_suspects_fail_and_the_rest_is_cut_here(
        chunkers, dense, tmp_path, caplog):
    """Workers ran, one died on a document, and new ones cannot start (here: the tokenizer
    they read is gone). The documents that may have killed it are not tried in the run's own
    process, where a crash would end the run: they fail, to be read again next run; the others
    are cut here."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(dense.model_path / "tokenizer.json", model / "tokenizer.json")
    docs = documents(16)
    docs[8] = EndsTheWorker(**vars(docs[8]))
    queue: CutQueue[int] = CutQueue(chunkers, SPARSE, model, processes=1, start_after=0)
    out = []
    with caplog.at_level(logging.WARNING, logger="citewise.ingest"):
        try:
            for i, doc in enumerate(docs[:8]):
                out += queue.put(i, f"doc-{i}", doc)
            out += queue.drain()  # the workers did cut
            (model / "tokenizer.json").unlink()
            for i, doc in enumerate(docs[8:], start=8):
                out += queue.put(i, f"doc-{i}", doc)
            out += queue.drain()
        finally:
            queue.close()
    assert [tag for tag, _ in out] == list(range(16))
    failed = {i for i, cut in out if cut.error}
    assert 8 in failed and failed <= set(range(8, 16))
    assert "no new worker could start" in dict(out)[8].error
    for i, cut in out:
        if i not in failed:
            assert cut.chunks == cut_document(chunkers, SPARSE, f"doc-{i}", docs[i]).chunks
    assert queue.processes == 0
    assert "parse worker processes could not start" in caplog.text


def test_workers_that_cannot_start_leave_the_run_to_parse_itself(chunkers, dense, tmp_path,
                                                                  caplog):
    # A model folder without a tokenizer: every worker stops in its initializer.
    queue: CutQueue[int] = CutQueue(chunkers, SPARSE, tmp_path, processes=1, start_after=1)
    docs = documents(12)
    with caplog.at_level(logging.WARNING, logger="citewise.ingest"):
        out = run_queue(queue, docs)
    assert [tag for tag, _ in out] == list(range(12))
    assert all(cut.error is None and cut.chunks for _, cut in out)
    assert queue.processes == 0 and queue.worker_cuts == 0
    assert "parse worker processes could not start" in caplog.text
    assert "CITEWISE_PARSE_PROCESSES=0" in caplog.text


def test_a_run_through_workers_indexes_what_a_run_without_them_does(make_services, tmp_path,
                                                                    caplog):
    folder = tmp_path / "kb"
    for doc in documents(45):
        path = folder / doc.external_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(doc.content)
    (folder / "runbooks/broken.md").write_bytes(b"\xff\xfe not text \x00\x81")
    source = SourceConfig(name="kb", type="folder", path=str(folder), readers=["group:eng"])
    indexed = {}
    for processes in (0, 2):
        services = make_services(data_dir=tmp_path / f"data-{processes}",
                                 parse_processes=processes)
        assert services.pipeline.parse_processes == processes
        # Windows of a few documents: cuts still on their way come back after a window has
        # gone to the embedder, and must join the next one (a run once dropped them).
        services.pipeline.embed_window = 40
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="citewise.ingest"):
            report = run_source(services.pipeline, source, trigger="test")
        assert report.counts.added + report.counts.failed == 46, report.summary()
        assert ("parsing with 2 worker processes" in caplog.text) == (processes == 2)
        records = services.catalog.documents_of_source("kb")
        ids = sorted(r.id for r in records.values())
        outlines = services.catalog.outlines(ids)
        indexed[processes] = {
            "report": (report.status, report.counts.added, report.counts.failed,
                       report.counts.chunks_written, sorted(e for e, _ in report.errors)),
            "chunks": {i: [(c.ordinal, c.heading, c.text, c.start_line, c.end_line)
                           for c in services.catalog.chunk_rows(i)] for i in ids},
            "outlines": {i: outlines[i].to_json() for i in outlines},
            "points": services.index.count(),
        }
    assert indexed[2] == indexed[0]
    assert indexed[0]["points"] == indexed[0]["report"][3] > 45
    assert document_id("kb", "runbooks/svc-7.md") in indexed[2]["chunks"]


def test_the_run_chooses_workers_by_where_the_model_runs(make_services, tmp_path):
    services = make_services()
    # The packaged model computes on every core itself: nothing beside it.
    assert services.pipeline.parse_processes == 0
    assert 1 <= available_cores() <= (os.cpu_count() or 1)


KILLED_RUN = """
import os, signal, sys
from citewise.index.dense import DenseEncoder
from citewise.index.sparse import Bm25Encoder
from citewise.ingest.chunking import Chunkers
from citewise.ingest.cutting import CutQueue
from citewise.types import SourceDocument

if __name__ == "__main__":
    dense = DenseEncoder()
    chunkers = Chunkers(dense.count_tokens, 200, dense.count_tokens_many)
    queue = CutQueue(chunkers, Bm25Encoder(), dense.model_path, processes=2, start_after=0)
    for i in range(6):
        queue.put(i, str(i), SourceDocument(f"{i}.md", "t", b"# T\\n\\nhello\\n", "text/markdown"))
    queue.drain()
    import psutil
    print(" ".join(str(p.pid) for p in psutil.Process().children()
                   if "spawn_main" in " ".join(p.cmdline())), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
"""


def running(pid: int) -> bool:
    """Alive, not merely a zombie waiting for whoever adopted it to reap it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_end_when_the_run_is_killed(tmp_path):
    """A run killed outright never closes its pool; its workers must not live on."""
    import subprocess
    import sys
    import time

    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN)
    # Output to files, not pipes: workers that lived on would hold a pipe open.
    with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
        returncode = subprocess.run([sys.executable, str(script)], stdout=out, stderr=err,
                                    timeout=120).returncode
    assert returncode == -9, (tmp_path / "err").read_text()
    pids = [int(p) for p in (tmp_path / "out").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.2)
    alive = [p for p in pids if running(p)]
    for pid in alive:  # do not leave them behind if the test fails
        psutil.Process(pid).kill()
    assert not alive, "parse workers outlived the killed run"


def test_marks_come_back_in_their_place_while_workers_cut_past_them(chunkers, dense):
    queue: CutQueue[str] = CutQueue(chunkers, SPARSE, dense.model_path, processes=2,
                                    start_after=0)
    order = []
    try:
        for i, doc in enumerate(documents(30)):
            order += [tag for tag, _ in queue.put(f"doc-{i}", f"doc-{i}", doc)]
            if i % 10 == 9:
                order += [tag for tag, _ in queue.mark(f"checkpoint after {i}")]
        order += [tag for tag, _ in queue.drain()]
    finally:
        queue.close()
    expected = []
    for i in range(30):
        expected.append(f"doc-{i}")
        if i % 10 == 9:
            expected.append(f"checkpoint after {i}")
    assert order == expected
    assert queue.worker_cuts == 30
