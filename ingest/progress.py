"""Progress of an ingest run: a bar on a terminal, log lines otherwise, state for the API."""

from __future__ import annotations

import logging
import sys
import time
from typing import Protocol

log = logging.getLogger("citewise.ingest")


class ProgressSink(Protocol):
    def start(self, total: int | None) -> None: ...

    def documents(self, n: int) -> None: ...

    def chunks_embedded(self, n: int) -> None: ...

    def close(self) -> None: ...


class SilentProgress:
    def start(self, total: int | None) -> None:
        pass

    def documents(self, n: int) -> None:
        pass

    def chunks_embedded(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


class TerminalProgress:
    """A tqdm bar when stderr is a terminal; a log line every ``every`` seconds otherwise."""

    def __init__(self, source: str, total: int | None = None, every: float = 10.0,
                 verb: str = "ingest") -> None:
        self.source = source
        self.verb = verb
        self.done = 0
        self.embedded = 0
        self.every = every
        self._last = time.monotonic()
        self._bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=f"{verb} {source}", unit="doc", leave=True)

    def start(self, total: int | None) -> None:
        if self._bar is not None and total is not None:
            self._bar.total = total
            self._bar.refresh()

    def documents(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        self._maybe_log()

    def chunks_embedded(self, n: int) -> None:
        self.embedded += n
        if self._bar is not None:
            self._bar.set_postfix(embedded=self.embedded, refresh=False)
        self._maybe_log()

    def _maybe_log(self) -> None:
        if self._bar is None and time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            log.info("%s %s: %d documents done, %d chunks embedded", self.verb, self.source,
                     self.done, self.embedded)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
