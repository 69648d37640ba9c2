"""Answering a question: the one path every door takes.

``/v1/answer`` (JSON and its event stream), ``/v1/chat/completions`` (plain and streamed) and
the in-process MCP ``answer`` tool all ask ``Answering``; the web page, the Slack bot and the
stdio MCP server reach it through ``/v1/answer``. Each rule an answer is held to is applied
here and nowhere else, so that a door cannot skip one (the MCP tool once answered without any):
the question's deny list, the cache, search and answering, passages carrying injections left
out, what goes out cleaned (secrets, personal data, denied terms), the conversation's turn
(rewritten to stand alone when it leans on the one before, and kept only once the answer was
delivered), the usage the front door records for the request, and every guardrail decision in
the audit log. The doors only parse their protocol and render the result.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from citewise.api.conversations import Viewer, history_of, previous_of
from citewise.api.guardrails import Guarded
from citewise.api.identity.caller import Caller
from citewise.api.sse import until
from citewise.errors import AuthError, GuardrailBlocked
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.followup import Previous, standalone
from citewise.retrieval.answering.stream import AnswerEvent
from citewise.types import SearchFilters

if TYPE_CHECKING:
    from citewise.api.conversations import Turn
    from citewise.api.metering.audit import AuditLog

__all__ = ["Answered", "Answering", "Asker", "Carried", "Question", "meter"]


@dataclass(frozen=True)
class Asker:
    """Who asks, and the HTTP request they asked in. ``state`` is that request's state: the
    front door decided the caller there, and records the request's usage row from it when the
    request ends (``frontdoor.py``), so what is metered here lands on that row, whichever door
    the request came through (an MCP tool call runs inside its ``/mcp/`` request)."""

    caller: Caller
    state: dict

    @classmethod
    def of(cls, request) -> Asker:
        state = request.scope.setdefault("state", {})
        found = state.get("caller")
        if not isinstance(found, Caller):
            raise AuthError("no caller was established for this request",
                            hint="requests reach answers only through the front door")
        return cls(found, state)

    @property
    def request_id(self) -> str | None:
        return self.state.get("request_id")


@dataclass(frozen=True)
class Carried:
    """The conversation as a protocol that sends its whole history with each question carries
    it (the OpenAI one): its first question, the messages before this one, and the question
    before it. What it leans on comes from these, not from the stored turns; it is kept as a
    conversation of the caller's named by its owner and first question (``named``)."""

    first: str
    history: list[dict]
    previous: Previous | None

    def named(self, owner: str) -> str:
        return hashlib.sha256(f"{owner}\0{self.first}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Question:
    text: str
    route: str  # the door: the guardrails' scope, and the route in their audit records
    filters: SearchFilters | None = None
    conversation_id: str | None = None  # a follow-up in this conversation of the caller's
    use_cache: bool = True
    carried: Carried | None = None


@dataclass
class Answered:
    """An answer as it may go out (cleaned), and the turn it was kept as."""

    answer: Answer
    conversation_id: str
    answer_id: str
    question: str  # as searched
    rewritten_by: str

    def ids(self) -> dict:
        return {"conversation_id": self.conversation_id, "answer_id": self.answer_id,
                "question": self.question, "rewritten_by": self.rewritten_by}


def meter(state: dict, answer: dict) -> None:
    """What usage records for this request: the passages cited, the model's tokens and cost
    and the provider that wrote it (as the gateway named it on the answer), or for an answer
    from the cache, the tokens it saved (its usage is the original call's, and no provider was
    called); and whether it answered or abstained, as the answer itself says."""
    state["results"] = len(answer.get("citations") or [])
    usage = answer.get("usage") or {}
    tokens = (usage.get("tokens_in", 0), usage.get("tokens_out", 0), usage.get("cost", 0.0))
    state["provider"] = answer.get("provider")
    if answer.get("cached"):
        state["cache_hits"] = 1
        state["saved_tokens"] = tokens[0] + tokens[1]
        state["provider"] = None
        tokens = (0, 0, 0.0)
    state["tokens_in"], state["tokens_out"], state["cost"] = tokens
    abstained = bool(answer.get("abstained"))
    state["answers"], state["abstentions"] = (0, 1) if abstained else (1, 0)


@dataclass
class _Asking:
    """One question on its way: the turn it will be, and the guardrails' decisions so far."""

    asker: Asker
    question: Question
    guard: Guarded
    viewer: Viewer
    conversation_id: str = ""
    searched: str = ""
    rewritten_by: str = "asked"
    history: list[dict] = field(default_factory=list)


class Answering:
    """The application service that answers, for every door. Reads ``services.guardrails`` at
    each question, since a config reload swaps them by assignment."""

    def __init__(self, services, audit: AuditLog) -> None:
        self.services = services
        self.audit = audit

    def answer(self, asker: Asker, question: Question) -> Answered:
        """The cited answer, cleaned, kept as the conversation's turn and metered. Raises
        ``GuardrailBlocked`` (403) for a denied question or answer, 404/409 for a conversation
        that is not the caller's or is full."""
        asking = self._begin(asker, question)
        services = self.services
        try:
            with services.conversations.turn(asking.conversation_id, asking.viewer) as turns:
                self._lean(asking, turns)
                answer = asking.guard.answer(services.answers.answer(
                    asking.searched, asker.caller.identity, question.filters,
                    history=asking.history, use_cache=question.use_cache,
                    injection=asking.guard.injection))
                answered = self._keep(asking, answer)
        finally:
            self._report(asking)
        meter(asker.state, answer.model_dump())
        return answered

    def stream(self, asker: Asker, question: Question,
               gone: threading.Event) -> Iterator[AnswerEvent]:
        """The answer as events (``citations``, ``delta``, ``block``, then ``done`` or
        ``error``), cleaned as they go; ``done`` carries the answer with the turn's ids
        (``Answered.ids``). A denied question raises here, before the first event (the door
        answers 403); a follow-up whose rewrite is denied ends the stream with the error.
        ``gone`` is set when the client went away: the model's request is closed at its next
        token and no turn is kept, since nobody received the answer."""
        asking = self._begin(asker, question)
        return self._events(asking, gone)

    def _events(self, asking: _Asking, gone: threading.Event) -> Iterator[AnswerEvent]:
        services, question = self.services, asking.question
        try:
            with services.conversations.turn(asking.conversation_id, asking.viewer) as turns:
                self._lean(asking, turns)
                for event in asking.guard.events(until(gone, services.answers.stream(
                        asking.searched, asking.asker.caller.identity, question.filters,
                        history=asking.history, use_cache=question.use_cache,
                        injection=asking.guard.injection))):
                    if gone.is_set():
                        return
                    if event.event == "done":
                        answered = self._keep(asking, Answer.model_validate(
                            event.data["answer"]))
                        event.data["answer"].update(answered.ids())
                        meter(asking.asker.state, event.data["answer"])
                    if event.event in ("done", "error"):
                        self._report(asking)  # before the client can read the last event
                    yield event
        finally:
            self._report(asking)

    # The steps ----------------------------------------------------------------------------
    def _begin(self, asker: Asker, question: Question) -> _Asking:
        """Before any search: the conversation is the caller's and has room, the question is
        not denied (nor its rewrite, when the protocol carries what it leans on), and the
        conversation exists."""
        services = self.services
        viewer = Viewer.of(asker.caller)
        asking = _Asking(asker, question, Guarded(services.guardrails, question.route), viewer)
        conversations = services.conversations
        carried = question.carried
        try:
            if question.conversation_id and carried is None:
                conversations.check(question.conversation_id, viewer)
            asking.guard.question(question.text)
            if carried is not None:
                asking.history = carried.history
                self._rewrite(asking, carried.previous)
        except GuardrailBlocked:
            self._report(asking)
            raise
        if carried is not None:
            asking.conversation_id = conversations.start(
                viewer, question.text, conversation_id=carried.named(viewer.owner))
        else:
            asking.conversation_id = question.conversation_id or conversations.start(
                viewer, question.text)
        return asking

    def _lean(self, asking: _Asking, turns: list[Turn]) -> None:
        """A follow-up in a stored conversation leans on its turns the caller may still read
        (inside the turn's hold, so it sees the turn before it)."""
        if asking.question.carried is not None:
            return
        asking.history = history_of(turns)
        self._rewrite(asking, previous_of(turns))

    def _rewrite(self, asking: _Asking, previous: Previous | None) -> None:
        text = asking.question.text
        asking.searched, asking.rewritten_by = standalone(
            text, previous, gateway=self.services.gateway, history=asking.history)
        if asking.searched != text:
            asking.searched = asking.guard.rewritten(asking.searched)

    def _keep(self, asking: _Asking, answer: Answer) -> Answered:
        answer_id = self.services.conversations.record(
            asking.viewer, asking.question.text, asking.searched, answer,
            asking.conversation_id)
        return Answered(answer, asking.conversation_id, answer_id, asking.searched,
                        asking.rewritten_by)

    def _report(self, asking: _Asking) -> None:
        """The decisions not yet in the audit log and the metrics (each once)."""
        if asking.guard.decisions:
            asking.guard.report(self.audit, asking.asker.caller.principal,
                                asking.asker.request_id, key=asking.asker.caller.key)
