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
asked, as searched, the answer and the documents it cited) live in the catalog database, so
they survive restarts; a conversation idle longer than ``idle`` seconds is gone, and one holds at
most ``max_turns``. Two requests on one conversation are serialised: the second waits for the
first to write its turn, so follow-ups always see the turn before them.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from citewise.api.identity.caller import Caller
from citewise.errors import ConflictError, NotFoundError
from citewise.index.catalog import Catalog
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
    def __init__(self, catalog: Catalog, *, idle: float = 7 * 86400.0,
                 max_turns: int = 100) -> None:
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
        if row["turns"] >= self.max_turns:
            raise ConflictError(
                f"conversation {conversation_id!r} already holds {row['turns']} turns, the most "
                "one may hold here",
                hint="start a new conversation by leaving conversation_id out (the limit is "
                     "CITEWISE_CONVERSATION_MAX_TURNS)")

    def _row(self, conversation_id: str, owner: str) -> dict:
        row = self.catalog.connection().execute(
            "SELECT id, owner, title, created_at, updated_at, turns FROM conversations "
            "WHERE id = ?", (conversation_id,)).fetchone()
        if row is None or row[1] != owner or self._expired(row[4]):
            raise NotFoundError(f"no conversation {conversation_id!r}",
                                hint="conversations belong to who started them and end after "
                                     "a while without questions; start a new one by leaving "
                                     "conversation_id out")
        return dict(zip(("id", "owner", "title", "created_at", "updated_at", "turns"), row,
                        strict=True))

    def _expired(self, updated_at: str) -> bool:
        return datetime.fromisoformat(updated_at) < _now() - timedelta(seconds=self.idle)

    def start(self, viewer: Viewer, question: str, *, conversation_id: str | None = None
              ) -> str:
        """A new conversation (or, with an id that already names one of the owner's, that
        one: the OpenAI protocol names its conversations by their first question)."""
        owner = viewer.owner
        conversation_id = conversation_id or uuid.uuid4().hex
        at = _iso(_now())
        with self.catalog.transaction():
            self.catalog.connection().execute(
                "INSERT INTO conversations (id, owner, title, created_at, updated_at, turns) "
                "VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT(id) DO UPDATE SET updated_at = "
                "CASE WHEN conversations.owner = excluded.owner THEN excluded.updated_at "
                "ELSE conversations.updated_at END",
                (conversation_id, owner, question[:200], at, at))
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
        rows = self.catalog.connection().execute(
            "SELECT id, turn, question, standalone, answer, created_at, documents FROM answers "
            "WHERE conversation_id = ? ORDER BY turn", (conversation_id,)).fetchall()
        cited = {r[0]: set(json.loads(r[6] or "[]")) for r in rows}
        readable = self.catalog.readable_documents(
            set().union(*cited.values()) if cited else (), list(viewer.principals))
        out: list[Turn] = []
        tainted = False  # the turn before leaned, directly or through a chain, on a withheld one
        for r in rows:
            turn = Turn(r[0], r[1], r[2], r[3], Answer.model_validate_json(r[4]), r[5])
            rewritten = turn.standalone != turn.question
            if not cited[r[0]] <= readable:
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
        return {**row, "turns": [t.as_dict() for t in self._turns(conversation_id, viewer)]}

    def list(self, viewer: Viewer, limit: int = 50) -> list[dict]:
        owner = viewer.owner
        since = _iso(_now() - timedelta(seconds=self.idle))
        rows = self.catalog.connection().execute(
            "SELECT id, title, created_at, updated_at, turns FROM conversations "
            "WHERE owner = ? AND updated_at >= ? ORDER BY updated_at DESC LIMIT ?",
            (owner, since, limit)).fetchall()
        return [dict(zip(("id", "title", "created_at", "updated_at", "turns"), r, strict=True))
                for r in rows]

    def delete(self, conversation_id: str, viewer: Viewer) -> None:
        self._row(conversation_id, viewer.owner)
        with self.catalog.transaction():
            conn = self.catalog.connection()
            conn.execute("DELETE FROM answers WHERE conversation_id = ?", (conversation_id,))
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        with self._guard:
            self._locks.pop(conversation_id, None)

    def expire(self) -> int:
        """Forget conversations idle for longer than ``idle``; returns how many."""
        before = _iso(_now() - timedelta(seconds=self.idle))
        with self.catalog.transaction():
            conn = self.catalog.connection()
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM conversations WHERE updated_at < ?", (before,))]
            # Answers with feedback stay: they are golden-set candidates.
            conn.executemany("DELETE FROM answers WHERE conversation_id = ? AND id NOT IN "
                             "(SELECT answer_id FROM feedback)", [(i,) for i in ids])
            conn.executemany("DELETE FROM conversations WHERE id = ?", [(i,) for i in ids])
        return len(ids)

    # Answers --------------------------------------------------------------------------------
    def record(self, viewer: Viewer, question: str, standalone: str, answer: Answer,
               conversation_id: str | None = None) -> str:
        """Keep an answer (for feedback, and as the conversation's next turn)."""
        owner = viewer.owner
        answer_id = uuid.uuid4().hex
        at = _iso(_now())
        documents = sorted({c.document_id for c in answer.citations})
        with self.catalog.transaction():
            conn = self.catalog.connection()
            turn = None
            if conversation_id is not None:
                turn = conn.execute("SELECT turns FROM conversations WHERE id = ?",
                                    (conversation_id,)).fetchone()[0] + 1
                conn.execute("UPDATE conversations SET turns = ?, updated_at = ? WHERE id = ?",
                             (turn, at, conversation_id))
            conn.execute(
                "INSERT INTO answers (id, conversation_id, turn, owner, question, standalone, "
                "answer, documents, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (answer_id, conversation_id, turn, owner, question, standalone,
                 answer.model_dump_json(), json.dumps(documents), at))
        return answer_id

    def answer(self, answer_id: str, viewer: Viewer) -> dict:
        """One answer the viewer was given, as they may see it now (withheld like a turn)."""
        row = self.catalog.connection().execute(
            "SELECT id, owner, question, standalone, answer, conversation_id, turn, "
            "created_at, documents FROM answers WHERE id = ?", (answer_id,)).fetchone()
        if row is None or row[1] != viewer.owner:
            raise NotFoundError(f"no answer {answer_id!r}",
                                hint="feedback is for answers you were given")
        turn = Turn(row[0], row[6] or 0, row[2], row[3], Answer.model_validate_json(row[4]),
                    row[7])
        cited = set(json.loads(row[8] or "[]"))
        if not cited <= self.catalog.readable_documents(cited, list(viewer.principals)):
            turn = _withheld(turn, GONE)
        return {"id": turn.answer_id, "question": turn.question, "standalone": turn.standalone,
                "answer": turn.answer.model_dump(), "conversation_id": row[5],
                "withheld": turn.withheld is not None}

    def feedback(self, answer_id: str, viewer: Viewer, *, helpful: bool, comment: str | None,
                 wrong_citation: int | None) -> dict:
        self.answer(answer_id, viewer)
        owner = viewer.principal or viewer.owner
        at = _iso(_now())
        with self.catalog.transaction():
            self.catalog.connection().execute(
                "INSERT INTO feedback (answer_id, principal, helpful, comment, wrong_citation, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (answer_id, owner, int(helpful), comment, wrong_citation, at))
        return {"answer_id": answer_id, "helpful": helpful, "comment": comment,
                "wrong_citation": wrong_citation, "created_at": at}

    def feedback_export(self, since: str | None = None) -> list[dict]:
        """Feedback with its question and answer, as golden-set candidates: a helpful answer's
        cited documents are its expected sources; an unhelpful one is a case to write."""
        rows = self.catalog.connection().execute(
            "SELECT f.answer_id, f.helpful, f.comment, f.wrong_citation, f.created_at, "
            "a.question, a.standalone, a.answer FROM feedback f JOIN answers a "
            "ON a.id = f.answer_id WHERE f.created_at >= ? ORDER BY f.created_at",
            (since or "",)).fetchall()
        out = []
        for answer_id, helpful, comment, wrong, at, question, standalone, answer_json in rows:
            answer = json.loads(answer_json)
            cited = [c for c in answer.get("citations", []) if c["n"] != wrong]
            out.append({
                "question": standalone or question, "asked_as": question,
                "expected_sources": sorted({c.get("path") or c.get("url") or c["document_id"]
                                            for c in cited}) if helpful else [],
                "helpful": bool(helpful), "comment": comment, "wrong_citation": wrong,
                "answer": answer.get("answer"), "answer_id": answer_id, "at": at})
        return out
