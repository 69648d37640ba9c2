"""Conversations: durable turns owned by one caller, shown only through today's rights, and
every answer kept for feedback.

A conversation belongs to the caller who started it and to nobody else: its owner is the
principal (``user:dana``, a key's service account) *and* how it signed in, so an agent key
created with ``--principal user:bob`` is not Bob's browser session (unless the key was created
with ``--shares-conversations``). Anyone else asking for it gets 404, as if it did not exist, so
ids cannot be probed.

Stored turns are never shown as they were answered, only as the caller may read today: a turn
whose answer cites a document the caller can no longer read (its readers were narrowed, the
caller left a group, it was deleted) comes back withheld, with a reason and without its text,
and a follow-up leans only on turns the caller may still read. The turns (the question as
asked, as searched, the answer and the documents it cited) live in a ``ConversationStore``
(``conversation_store.py``), so they survive restarts; a conversation idle longer than ``idle``
seconds is gone, and one holds at most ``max_turns``. Two requests on one conversation are
serialised: the second waits for the first to write its turn, so follow-ups always see the turn
before them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from citewise.api.conversation_store import ConversationRow, ConversationStore, StoredAnswer
from citewise.api.identity.caller import Caller
from citewise.errors import ConflictError, NotFoundError
from citewise.index.catalog import DocumentCatalog
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.followup import Previous

WITHHELD_TEXT = ("This answer is withheld: it cites documents you can no longer read. Ask the "
                 "question again to be answered from what you may read now.")
GONE = "it cites a document that is no longer in the knowledge base or that you may not read"


@dataclass(frozen=True)
class Viewer:
    """Who is looking at a conversation: the owner it must belong to, and the principals whose
    documents they may read now (each stored turn is re-checked against them)."""

    owner: str
    principals: tuple[str, ...]
    principal: str = ""  # the name feedback is recorded under, as usage and the audit log say

    @classmethod
    def of(cls, caller: Caller) -> Viewer:
        owner = caller.principal
        if caller.method == "key" and not caller.shares_conversations:
            # A key acting as user:bob is Bob's agent, not Bob: its conversations are its own.
            owner = f"{owner} via key:{caller.key_id}"
        return cls(owner, tuple(caller.identity.principals()), caller.principal)


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds")


@dataclass
class Turn:
    answer_id: str
    turn: int
    question: str
    standalone: str
    answer: Answer
    created_at: str
    withheld: str | None = None  # why the caller may not see this turn's answer now

    def as_dict(self) -> dict:
        out = {"answer_id": self.answer_id, "turn": self.turn, "question": self.question,
               "standalone_question": self.standalone, "created_at": self.created_at,
               "answer": self.answer.model_dump(), "withheld": self.withheld is not None}
        if self.withheld:
            out["withheld_reason"] = self.withheld
        return out


def previous_of(turns: list[Turn]) -> Previous | None:
    """What a follow-up leans on: the last turn the caller may still read, its question and the
    document it cited first (a withheld turn lends nothing, not even a title)."""
    visible = [t for t in turns if t.withheld is None]
    if not visible:
        return None
    last = visible[-1]
    title = last.answer.citations[0].title if last.answer.citations else None
    return Previous(last.standalone, title)


def history_of(turns: list[Turn], last: int = 5) -> list[dict]:
    """The conversation so far as chat messages, for a model: only the turns the caller may
    still read."""
    messages: list[dict] = []
    for t in [t for t in turns if t.withheld is None][-last:]:
        messages += [{"role": "user", "content": t.question},
                     {"role": "assistant", "content": t.answer.answer}]
    return messages


def _withheld(turn: Turn, reason: str) -> Turn:
    """The turn as shown to someone who may no longer read what it cites: the question (their
    own words) stays; the answer, its citations and any rewrite that named a document go."""
    answer = Answer(answer=WITHHELD_TEXT, abstained=True, kind=turn.answer.kind,
                    mode=turn.answer.mode, reason=f"withheld: {reason}")
    return Turn(turn.answer_id, turn.turn, turn.question, turn.question, answer,
                turn.created_at, withheld=reason)


class Conversations:
    """The rules of conversations, over a ``ConversationStore``; ``catalog`` says which cited
    documents a viewer may read today."""

    def __init__(self, store: ConversationStore, catalog: DocumentCatalog, *,
                 idle: float = 7 * 86400.0, max_turns: int = 100) -> None:
        self.store = store
        self.catalog = catalog
        self.idle = idle
        self.max_turns = max_turns
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # Ownership and life -------------------------------------------------------------------
    def check(self, conversation_id: str, viewer: Viewer) -> None:
        """404 unless the conversation exists, is live and is the viewer's; 409 when it holds
        as many turns as one may."""
        row = self._row(conversation_id, viewer.owner)
        if row.turns >= self.max_turns:
            raise ConflictError(
                f"conversation {conversation_id!r} already holds {row.turns} turns, the most "
                "one may hold here",
                hint="start a new conversation by leaving conversation_id out (the limit is "
                     "CITEWISE_CONVERSATION_MAX_TURNS)")

    def _row(self, conversation_id: str, owner: str) -> ConversationRow:
        row = self.store.get(conversation_id)
        if row is None or row.owner != owner or self._expired(row.updated_at):
            raise NotFoundError(f"no conversation {conversation_id!r}",
                                hint="conversations belong to who started them and end after "
                                     "a while without questions; start a new one by leaving "
                                     "conversation_id out")
        return row

    def _expired(self, updated_at: str) -> bool:
        return datetime.fromisoformat(updated_at) < _now() - timedelta(seconds=self.idle)

    def start(self, viewer: Viewer, question: str, *, conversation_id: str | None = None
              ) -> str:
        """A new conversation (or, with an id that already names one of the owner's, that
        one: the OpenAI protocol names its conversations by their first question)."""
        conversation_id = conversation_id or uuid.uuid4().hex
        self.store.start(conversation_id, viewer.owner, question[:200], _iso(_now()))
        return conversation_id

    @contextmanager
    def turn(self, conversation_id: str, viewer: Viewer) -> Iterator[list[Turn]]:
        """Hold the conversation for one turn: yields the turns so far as the viewer may see
        them (after any turn in progress has been written) and keeps others out until the
        block ends."""
        self.check(conversation_id, viewer)
        with self._guard:
            lock = self._locks.setdefault(conversation_id, threading.Lock())
        with lock:
            self.check(conversation_id, viewer)  # a turn written while we waited counts
            yield self._turns(conversation_id, viewer)

    def turns(self, conversation_id: str, viewer: Viewer) -> list[Turn]:
        self._row(conversation_id, viewer.owner)
        return self._turns(conversation_id, viewer)

    def _turns(self, conversation_id: str, viewer: Viewer) -> list[Turn]:
        stored = self.store.answers(conversation_id)
        readable = self.catalog.readable_documents(
            {d for a in stored for d in a.documents}, list(viewer.principals))
        out: list[Turn] = []
        tainted = False  # the turn before leaned, directly or through a chain, on a withheld one
        for a in stored:
            turn = Turn(a.id, a.turn or 0, a.question, a.standalone, a.answer, a.created_at)
            rewritten = turn.standalone != turn.question
            if not set(a.documents) <= readable:
                turn = _withheld(turn, GONE)
                tainted = True
            elif rewritten and tainted:
                # Rewritten from a withheld turn: the rewrite may name its document's title.
                turn.standalone = turn.question
            else:
                tainted = False
            out.append(turn)
        return out

    def get(self, conversation_id: str, viewer: Viewer) -> dict:
        row = self._row(conversation_id, viewer.owner)
        return {**asdict(row), "turns": [t.as_dict() for t in self._turns(conversation_id, viewer)]}

    def owned_by(self, viewer: Viewer, limit: int = 50) -> list[dict[str, Any]]:
        since = _iso(_now() - timedelta(seconds=self.idle))
        return [row.summary() for row in self.store.owned_by(viewer.owner, since, limit)]

    def delete(self, conversation_id: str, viewer: Viewer) -> None:
        self._row(conversation_id, viewer.owner)
        self.store.delete(conversation_id)
        with self._guard:
            self._locks.pop(conversation_id, None)

    def expire(self) -> int:
        """Forget conversations idle for longer than ``idle``; returns how many."""
        return self.store.expire(_iso(_now() - timedelta(seconds=self.idle)))

    # Answers --------------------------------------------------------------------------------
    def record(self, viewer: Viewer, question: str, standalone: str, answer: Answer,
               conversation_id: str | None = None) -> str:
        """Keep an answer (for feedback, and as the conversation's next turn)."""
        stored = self.store.add_answer(StoredAnswer(
            id=uuid.uuid4().hex, owner=viewer.owner, question=question, standalone=standalone,
            answer=answer, created_at=_iso(_now()), conversation_id=conversation_id,
            documents=sorted({c.document_id for c in answer.citations})))
        return stored.id

    def answer(self, answer_id: str, viewer: Viewer) -> dict:
        """One answer the viewer was given, as they may see it now (withheld like a turn)."""
        stored = self.store.answer(answer_id)
        if stored is None or stored.owner != viewer.owner:
            raise NotFoundError(f"no answer {answer_id!r}",
                                hint="feedback is for answers you were given")
        turn = Turn(stored.id, stored.turn or 0, stored.question, stored.standalone,
                    stored.answer, stored.created_at)
        cited = set(stored.documents)
        if not cited <= self.catalog.readable_documents(cited, list(viewer.principals)):
            turn = _withheld(turn, GONE)
        return {"id": turn.answer_id, "question": turn.question, "standalone": turn.standalone,
                "answer": turn.answer.model_dump(), "conversation_id": stored.conversation_id,
                "withheld": turn.withheld is not None}

    def feedback(self, answer_id: str, viewer: Viewer, *, helpful: bool, comment: str | None,
                 wrong_citation: int | None, right_document: str | None = None) -> dict:
        self.answer(answer_id, viewer)
        at = _iso(_now())
        right_document = (right_document or "").strip() or None
        self.store.add_feedback(answer_id, viewer.principal or viewer.owner, helpful, comment,
                                wrong_citation, at, right_document=right_document)
        return {"answer_id": answer_id, "helpful": helpful, "comment": comment,
                "wrong_citation": wrong_citation, "right_document": right_document,
                "created_at": at}

    def feedback_export(self, since: str | None = None, status: str | None = None
                        ) -> list[dict]:
        """Feedback with its question and answer, as golden-set candidates: a helpful answer's
        cited documents are its expected sources; an unhelpful one is a case to write.
        ``status`` keeps one triage state (open, added, dismissed)."""
        out = []
        for given, stored in self.store.feedback_since(since or ""):
            if status is not None and given.get("status") != status:
                continue
            wrong = given["wrong_citation"]
            cited = [c for c in stored.answer.citations if c.n != wrong]
            out.append({
                "question": stored.standalone or stored.question, "asked_as": stored.question,
                "expected_sources": sorted({c.path or c.url or c.document_id for c in cited})
                if given["helpful"] else [],
                "helpful": given["helpful"], "comment": given["comment"],
                "wrong_citation": wrong, "right_document": given.get("right_document"),
                "answer": stored.answer.answer,
                "answer_id": stored.id, "at": given["created_at"],
                "status": given.get("status")})
        return out
