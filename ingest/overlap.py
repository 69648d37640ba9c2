"""Keeping the embedding model busy: a run's embedding and writing on threads of their own.

A run reads and parses documents (Python, one core), then embeds their chunks a window at a
time (the pipeline's ``EMBED_WINDOW``) and writes them. When the model is remote its requests
mostly wait on the network; done one after the other, parsing would wait for every request
and the endpoint for every parse. ``Writer`` takes a stage to a worker thread, in order,
while the run reads and parses the next window. When the model is local it computes on every
core itself, and work beside it only slows it down: ``Inline`` runs the same stages in the
caller's thread, in turn (the pipeline chooses; its ``_stages`` says what was measured).

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


class Writer:
    def __init__(self, depth: int = 2) -> None:
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=depth)
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
            self._tasks.put(None)  # the thread ends after the tasks queued before it
            self._thread.join()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                if task is None:
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


class Inline:
    """A stage run in the caller's thread: ``submit`` returns once the task is done, and a
    task's error is raised from it. The same interface as ``Writer``, for stages that a
    thread would only set against the caller's work for the CPU."""

    def submit(self, task: Callable[[], None]) -> None:
        task()

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass
