"""Guardrails: policies on what goes into an answer and what comes out of it.

Each policy has a kind, an action and a scope (routes, and for passages, sources):

* ``injection``: passages that carry instructions aimed at the model (``index/injection.py``).
  ``redact`` drops them from what answers read, ``flag`` keeps them fenced as data and records
  it, ``block`` refuses an answer whose evidence holds one. Ingest records flagged chunks per
  document (``DocumentRecord.injection_chunks``).
* ``secrets``: credentials in an answer or its quotes, found by the same detectors as ingest
  (``ingest/redact.py``), are replaced by ``[REDACTED:kind]`` (``redact``) or refuse the answer.
* ``pii``: email addresses, phone numbers (the ``phonenumbers`` library) and card numbers (with
  the Luhn check) in an answer or its quotes.
* ``deny``: terms or topics (``terms``, case-insensitive, whole words) in the question or the
  answer: ``block`` refuses with a problem naming the policy and no content.

Every decision is returned for the audit log and the metrics; nothing is decided silently.
Without ``[[guardrails]]`` in the config: injection ``redact``, secrets ``redact``, pii ``off``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import phonenumbers

from citewise import metrics
from citewise.api.guarded_stream import TextRelease
from citewise.api.settings import GuardrailConfig
from citewise.errors import GuardrailBlocked
from citewise.ingest.redact import redact_text
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.markdown import blocks_from_markdown

log = logging.getLogger("citewise.api")

DEFAULTS = [GuardrailConfig(name="injection", kind="injection", action="redact"),
            GuardrailConfig(name="secrets", kind="secrets", action="redact"),
            GuardrailConfig(name="pii", kind="pii", action="off")]

# What a stream holds back, in characters (api/guarded_stream.py): from a space inside a pattern
# to where it is recognised. Secrets: a private key block's header, whose first space is after
# "-----BEGIN " and which is recognised at the line break after it ("ENCRYPTED PRIVATE KEY-----"
# or "PGP PRIVATE KEY BLOCK-----", 27 with it). Personal data: a phone number written with spaces
# and an extension ("(415) 555-0132 ext. 2087" after "+1 ", 24), a card number of 19 digits in
# groups (18 after its first space, 35 if every digit stands alone). The samples of
# tests/api/test_guarded_stream.py need 27 and 14, and leak below that.
SECRETS_WINDOW = 32
PII_WINDOW = 40
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")


@dataclass(frozen=True)
class Decision:
    policy: str
    kind: str
    action: str
    where: str  # question, answer, passage
    detail: str

    def as_dict(self) -> dict:
        return {"policy": self.policy, "kind": self.kind, "action": self.action,
                "where": self.where, "detail": self.detail}


def luhn_ok(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for i, ch in enumerate(digits):
        d = int(ch)
        if i % 2 == parity:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def find_pii(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each email address, phone number and card number."""
    found = [(m.start(), m.end(), "email") for m in _EMAIL.finditer(text)]
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and luhn_ok(digits):
            found.append((m.start(), m.end(), "card-number"))
    # Numbers written for people to dial: international (+44 ...) or, failing a country, as
    # written in the US; durations, versions and ids do not parse as valid numbers.
    for match in phonenumbers.PhoneNumberMatcher(text, "US",
                                                 leniency=phonenumbers.Leniency.VALID):
        if not any(s <= match.start < e for s, e, _ in found):
            found.append((match.start, match.end, "phone-number"))
    return sorted(found)


def redact_pii(text: str) -> tuple[str, list[str]]:
    kinds = []
    for start, end, kind in reversed(find_pii(text)):
        text = f"{text[:start]}[REDACTED:{kind}]{text[end:]}"
        kinds.append(kind)
    return text, kinds


class Guardrails:
    def __init__(self, policies: list[GuardrailConfig] | None = None) -> None:
        given = {p.kind for p in policies or []}
        self.policies = [*(policies or []), *(d for d in DEFAULTS if d.kind not in given)]
        self._deny = {p.name: re.compile(r"\b(" + "|".join(re.escape(t) for t in p.terms)
                                         + r")\b", re.I)
                      for p in self.policies if p.kind == "deny" and p.terms}

    def _active(self, kind: str, route: str) -> list[GuardrailConfig]:
        return [p for p in self.policies if p.kind == kind and p.action != "off"
                and (not p.routes or route in p.routes)]

    def injection(self, route: str) -> tuple[str, str, frozenset[str]] | None:
        """The policy for injected passages on this route: its name, action and the sources it
        covers (empty: all), for the answer service; None when off."""
        active = self._active("injection", route)
        if not active:
            return None
        p = active[0]
        return p.name, p.action, frozenset(p.sources)

    # Questions ----------------------------------------------------------------------------
    def check_question(self, question: str, route: str) -> list[Decision]:
        decisions = []
        for p in self._active("deny", route):
            pattern = self._deny.get(p.name)
            found = pattern.search(question) if pattern else None
            if found:
                decision = Decision(p.name, "deny", p.action, "question",
                                    f"the question mentions '{found.group(0)}'")
                decisions.append(decision)
                if p.action == "block":
                    raise self._blocked(decision, decisions)
        return decisions

    def _blocked(self, decision: Decision, decisions: list[Decision]) -> GuardrailBlocked:
        return GuardrailBlocked(decision.policy, decision.detail,
                                [d.as_dict() for d in decisions])

    # Text going out -----------------------------------------------------------------------
    def stream_window(self, route: str) -> int:
        """Characters a stream on this route holds back before cleaning and sending: what the
        active policies' patterns need to see whole (a denied phrase: its length)."""
        window = 0
        if self._active("secrets", route):
            window = SECRETS_WINDOW
        if self._active("pii", route):
            window = max(window, PII_WINDOW)
        for p in self._active("deny", route):
            window = max([window, *(len(t) + 1 for t in p.terms)])
        return window

    def clean(self, text: str, route: str, where: str = "answer") -> tuple[str, list[Decision]]:
        """Text with secrets and personal data handled per policy; a denied term in it, or a
        secret or personal data under ``block``, raises ``GuardrailBlocked``."""
        decisions: list[Decision] = []
        for p in self._active("secrets", route):
            cleaned, found = redact_text(text)
            if found:
                decision = Decision(p.name, "secrets", p.action, where, ", ".join(
                    sorted({f["kind"] for f in found})))
                decisions.append(decision)
                if p.action == "block":
                    raise self._blocked(decision, decisions)
                if p.action == "redact":
                    text = cleaned
        for p in self._active("pii", route):
            cleaned, kinds = redact_pii(text)
            if kinds:
                decision = Decision(p.name, "pii", p.action, where, ", ".join(sorted(set(kinds))))
                decisions.append(decision)
                if p.action == "block":
                    raise self._blocked(decision, decisions)
                if p.action == "redact":
                    text = cleaned
        for p in self._active("deny", route):
            pattern = self._deny.get(p.name)
            mention = pattern.search(text) if pattern else None
            if mention:
                decision = Decision(p.name, "deny", p.action, where,
                                    f"the answer mentions '{mention.group(0)}'")
                decisions.append(decision)
                if p.action == "block":
                    raise self._blocked(decision, decisions)
        return text, decisions

    def clean_answer(self, answer: Answer, route: str) -> tuple[Answer, list[Decision]]:
        """The answer, its blocks and its quotes cleaned alike."""
        decisions: list[Decision] = []

        def clean(text: str, where: str = "answer") -> str:
            if not text:
                return text
            out, found = self.clean(text, route, where)
            decisions.extend(found)
            return out

        def clean_optional(text: str | None) -> str | None:
            return None if text is None else clean(text)

        answer = answer.model_copy(deep=True)
        answer.answer = clean(answer.answer)
        for block in answer.blocks:
            block.text, block.value = clean_optional(block.text), clean_optional(block.value)
            for step in block.steps or []:
                step.text = clean(step.text)
                step.notes = [clean(n) for n in step.notes]
                for code in step.code:
                    code.text = clean(code.text)
        for c in answer.citations:
            c.quote = clean(c.quote, "quote")
        unique = list(dict.fromkeys(decisions))
        return answer, unique




def _block_end(received: str, index: int) -> int:
    """How much of the text received a block's event must follow: up to the last line break
    when a later block has started (the block ended before that line), else all of it (the
    answer's last block, sent when the model finished)."""
    if len(blocks_from_markdown(received)) > index + 1:
        return received.rfind("\n") + 1
    return len(received)


class Guarded:
    """One request's guardrails: its route, and every decision taken, for the audit log."""

    def __init__(self, guardrails: Guardrails, route: str) -> None:
        self.guardrails = guardrails
        self.route = route
        self.decisions: list[dict] = []
        self._reported = 0  # decisions already in the audit log

    @property
    def injection(self) -> tuple[str, str, frozenset[str]] | None:
        return self.guardrails.injection(self.route)

    def _note(self, decisions) -> None:
        for d in decisions:
            d = d.as_dict() if isinstance(d, Decision) else d
            if d not in self.decisions:
                self.decisions.append(d)

    def question(self, question: str) -> None:
        try:
            self._note(self.guardrails.check_question(question, self.route))
        except GuardrailBlocked as e:
            self._note(e.decisions)
            raise

    def rewritten(self, question: str) -> str:
        """A question the model rewrote to stand alone: the model's text, so held to the
        answer's rules before anything else sees it (it is searched, kept with the
        conversation and shown back with it), then checked as a question."""
        try:
            cleaned = self._text(question, where="rewritten question")
        except GuardrailBlocked as e:
            self._note(e.decisions)
            raise
        self.question(cleaned)
        return cleaned

    def answer(self, answer: Answer) -> Answer:
        self._note(answer.guardrails)
        try:
            cleaned, decisions = self.guardrails.clean_answer(answer, self.route)
        except GuardrailBlocked as e:
            self._note(e.decisions)
            raise
        self._note(decisions)
        cleaned.guardrails = list(self.decisions)
        return cleaned

    def _text(self, text: str, where: str = "answer") -> str:
        cleaned, decisions = self.guardrails.clean(text, self.route, where)
        self._note(decisions)
        return cleaned

    def events(self, events):
        """Streamed answer events, cleaned: text is sent as it comes, less a tail the cleaning
        may still change (``TextRelease``); a block is sent once the text it closes has been;
        quotes and blocks are cleaned whole; ``done`` carries the cleaned answer. A block ends
        the stream with an ``error`` event and nothing more."""
        from citewise.retrieval.answering.stream import AnswerEvent

        text = TextRelease(lambda t: self.guardrails.clean(t, self.route),
                           self.guardrails.stream_window(self.route))
        blocks: list[tuple[int, AnswerEvent]] = []  # (text that must be sent first, event)
        sent: list[str] = []  # the cleaned text the client has been sent

        def ready(everything: bool = False):
            while blocks and (everything or blocks[0][0] <= text.released):
                yield blocks.pop(0)[1]

        def release(out: str):
            self._note(text.decisions)
            text.decisions.clear()
            if out:
                sent.append(out)
                yield AnswerEvent("delta", {"text": out})
            yield from ready()

        try:
            for event in events:
                if event.event == "citations":
                    for c in event.data["citations"]:
                        c["quote"] = self._text(c["quote"]) if c.get("quote") else c.get("quote")
                elif event.event == "delta":
                    yield from release(text.feed(event.data["text"]))
                    continue
                elif event.event == "block":
                    block = Answer(answer="", blocks=[event.data["block"]])
                    event.data["block"] = self.answer(block).blocks[0].model_dump()
                    blocks.append((_block_end(text.received, event.data["index"]), event))
                    yield from ready()
                    continue
                elif event.event == "done":
                    yield from release(text.finish())
                    yield from ready(everything=True)
                    answer = self.answer(Answer.model_validate(event.data["answer"]))
                    event = AnswerEvent("done", {**event.data, "answer": answer.model_dump()})
                elif event.event == "error":
                    # A stream that broke: "received" is what the client was sent (cleaned),
                    # never the model's raw text, which the held-back tail may still hold.
                    event = AnswerEvent("error", {**event.data, "received": "".join(sent)})
                yield event
        except GuardrailBlocked as e:
            self._note(e.decisions)
            yield AnswerEvent("error", {**e.problem(), "received": ""})

    def report(self, audit, principal: str, request_id: str | None = None, *,
               key: str | None = None) -> None:
        """Every decision not reported yet to the audit log and the metrics, with the
        principal and the key (its name) that asked."""
        fresh, self._reported = self.decisions[self._reported:], len(self.decisions)
        for d in fresh:
            metrics.GUARDRAIL_DECISIONS.labels(d["policy"], d["kind"], d["action"]).inc()
            try:
                audit.record(f"guardrail.{d['action']}", actor=principal, key=key,
                             target=d["policy"],
                             outcome="denied" if d["action"] == "block" else "ok",
                             detail={"kind": d["kind"], "where": d["where"],
                                     "detail": d["detail"], "route": self.route},
                             request_id=request_id)
            except Exception:  # the decision stands even if the audit write fails
                log.exception("could not write the audit record of a guardrail decision")
