"""Streamed answer text released at the model's pace, held back only as far as cleaning needs.

The guardrails clean text (secrets, personal data, denied terms) with patterns read over a
whole text, and a model's answer arrives a few characters at a time. Cleaning each piece alone
would miss a secret split over two pieces; holding text to a line or sentence end, as streams
once did, sent a short paragraph as one delta at its end. ``TextRelease`` keeps what has
arrived and releases it up to the latest cut that

* lies just after whitespace (no credential holds any, so none is cut in two) and at least
  ``window`` characters before the end of what has arrived: a pattern that holds spaces (a
  private key's header, a phone or card number, a denied phrase) and starts before the cut is
  then whole in what is held, and seen (``Guardrails.stream_window`` sizes it per policy);
* is consistent: what the text up to the cut cleans to begins what everything held cleans to,
  so nothing found spans the cut (else an earlier cut is tried);
* comes before any token shaped like an AWS secret that later text could still make one
  (``redact.undecided_from``: its key id may follow it by 300 characters).

Each piece is cleaned after some of the text already released (``redact.reach_back``), so a
detector that reads what precedes a secret (its key id, a private key's header, the name a
password is assigned to) still fires; that context's own cleaned text is not sent again. The
checks clean text that is not released: only the released piece's decisions are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from os.path import commonprefix

from citewise.ingest.redact import reach_back, undecided_from

log = logging.getLogger("citewise.api")

Clean = Callable[[str], tuple[str, list]]  # text -> (cleaned text, decisions); may raise
_TRIES = 8  # cuts tried per piece of text arrived; the next piece tries again


class TextRelease:
    """One stream's text: ``feed`` each piece as it arrives and send what it returns; ``finish``
    returns the rest. ``decisions`` gathers those of the text released, for the audit log."""

    def __init__(self, clean: Clean, window: int) -> None:
        self._clean = clean
        self.window = window
        self.received = ""
        self.released = 0  # characters of ``received`` already sent, cleaned
        self.decisions: list = []

    def feed(self, text: str) -> str:
        self.received += text
        return self._release(final=False)

    def finish(self) -> str:
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        held = self.received[self.released:]
        start = reach_back(self.received, self.released)
        context = self.received[start:self.released]
        if final:
            cuts = [len(held)] if held else []
        else:
            limit = min(len(held) - self.window,
                        undecided_from(context + held) - len(context))
            cuts = [c for c in range(limit, 0, -1) if held[c - 1].isspace()][:_TRIES]
        if not cuts:
            return ""
        whole, decisions = self._clean(context + held)  # a blocked term raises here
        for cut in cuts:
            out, found = (whole, decisions) if cut == len(held) else \
                self._clean(context + held[:cut])
            if whole.startswith(out):
                break
        else:
            return ""  # something found spans every cut tried: wait for more text
        before, known = self._clean(context) if context else ("", [])
        sent = len(before)
        if not out.startswith(before):
            # Text already sent cleans differently now: the window was too small for some
            # pattern. Send the new part; what went before cannot be taken back.
            sent = len(commonprefix([before, out]))
            log.warning("a streamed answer's released text cleans differently with what "
                        "followed it (the guardrails' stream window is too small for it)")
        self.released += cut
        self.decisions.extend(d for d in found if d not in known)
        return out[sent:]
