"""Keeping the embedding model busy: a run's writes on a thread of their own.

A run reads and parses a batch of documents (Python, one core), then embeds its chunks (the
model, every core) and writes them. Done one after the other, the model waits for every
parse. ``Writer`` takes the embed-and-write of a batch to one worker thread, in order, while
the run reads and parses the next batch; the model releases the interpreter lock while it
computes, so both go on at once.

Order is kept: tasks run one at a time in the order submitted, so a syncing connector's
checkpoint (submitted after its batch) is saved only once the batch is written, and a crash
resumes after written batches only. At most ``depth`` batches wait, which bounds memory. A
task that raises stops the writer: later tasks are dropped and the error is raised in the
run's thread at its next ``submit`` or ``drain``, so the run fails as if it had written the
batch itself.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable

_STOP = object()


class Writer:
    def __init__(self, depth: int = 2) -> None:
        self._tasks: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        context = contextvars.copy_context()  # the run's log context follows into the thread
        self._thread = threading.Thread(target=context.run, args=(self._work,),
                                        name="citewise-ingest-writer", daemon=True)
        self._thread.start()

    def submit(self, task: Callable[[], None]) -> None:
        self._raise()
        self._tasks.put(task)

    def drain(self) -> None:
        """Wait until every task submitted so far is done; raise the error of one that failed."""
        self._tasks.join()
        self._raise()

    def close(self) -> None:
        """Stop the thread once the queued tasks are done (none run after one failed): a run
        that fails or is interrupted still writes the batches it had read, as it did when
        reading and writing took turns."""
        if self._thread.is_alive():
            self._tasks.put(_STOP)
            self._thread.join()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                if task is _STOP:
                    return
                if self._error is None:
                    task()
            except BaseException as e:  # handed to the run's thread
                self._error = e
            finally:
                self._tasks.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
