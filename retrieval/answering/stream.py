"""A streamed answer as events, the same for extractive and generated answers.

``citations`` first (the numbered passages, so a front end can show sources before any text),
then ``delta`` (text to append) and ``block`` (a structured block, once complete), and finally
``done`` with the whole validated answer, which is authoritative: when a generated answer turns
out to cite nothing and the extractive one replaces it, ``done`` carries the replacement. An
``error`` event carries a problem body and the text received before the break.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from citewise.retrieval.answering.markdown import blocks_from_markdown
from citewise.retrieval.answering.model import Answer, AnswerBlock, Citation, render_markdown

EVENTS = ("citations", "delta", "block", "done", "error")


@dataclass
class AnswerEvent:
    event: str
    data: dict[str, Any]


def citations_event(citations: list[Citation]) -> AnswerEvent:
    return AnswerEvent("citations", {"citations": [c.model_dump() for c in citations]})


def block_event(index: int, block: AnswerBlock) -> AnswerEvent:
    return AnswerEvent("block", {"index": index, "block": block.model_dump()})


def replay(answer: Answer) -> Iterator[AnswerEvent]:
    """A finished answer (extractive, or an abstention) as the stream a front end expects."""
    yield citations_event(answer.citations)
    for i, block in enumerate(answer.blocks):
        text = render_markdown([block])
        yield AnswerEvent("delta", {"text": text + ("\n\n" if i < len(answer.blocks) - 1
                                                    else "")})
        yield block_event(i, block)
    yield AnswerEvent("done", {"answer": answer.model_dump()})


_PARTIAL_MARK = re.compile(r"\[\d{0,4}$")
_MARK = re.compile(r"\[(\d+)\]")


class MarkerFilter:
    """Removes citation markers that point at no passage from text arriving piece by piece.

    A marker may be split over deltas (``[`` then ``12]``), so a trailing ``[`` with digits is
    held back until it closes. The model's NO_ANSWER is held back too, until the text has
    either become it or gone elsewhere, so it never reaches a reader as an answer.
    """

    def __init__(self, passages: int, no_answer: str) -> None:
        self.passages = passages
        self.no_answer = no_answer
        self._held = ""
        self._started = False

    def _clean(self, text: str) -> str:
        return _MARK.sub(lambda m: m.group(0) if 1 <= int(m.group(1)) <= self.passages
                         else "", text)

    def feed(self, text: str) -> str:
        held = self._held + text
        if not self._started:
            stripped = held.lstrip()
            if self.no_answer.startswith(stripped) or stripped.startswith(self.no_answer):
                self._held = held
                return ""
            self._started = True
        partial = _PARTIAL_MARK.search(held)
        cut = partial.start() if partial else len(held)
        self._held = held[cut:]
        return self._clean(held[:cut])

    def flush(self) -> str:
        held, self._held = self._held, ""
        return self._clean(held) if self._started or held.strip() != self.no_answer else held

    @property
    def is_no_answer(self) -> bool:
        return not self._started and self._held.strip().startswith(self.no_answer)


class BlockTracker:
    """Emits a block event once the Markdown received so far has started the block after it
    (only then is it complete); ``final`` emits the rest. A block can only end at a line
    break, so the text is parsed again only when a new line has arrived."""

    def __init__(self) -> None:
        self.sent = 0
        self._lines = 0

    def update(self, text: str, final: bool = False) -> Iterator[AnswerEvent]:
        lines = text.count("\n")
        if not final and lines == self._lines:
            return
        self._lines = lines
        blocks = blocks_from_markdown(text)
        ready = len(blocks) if final else len(blocks) - 1
        while self.sent < ready:
            yield block_event(self.sent, blocks[self.sent])
            self.sent += 1
