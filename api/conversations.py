"""Conversations: durable turns owned by one principal, and every answer kept for feedback.

A conversation belongs to the principal who started it (``user:dana``, a key's service account)
and to nobody else: anyone else asking for it gets 404, as if it did not exist, so ids cannot be
probed. Its turns (the question as asked, the question as searched, the answer and the
documents it cited) live in the catalog database, so they survive restarts; a conversation idle
longer than ``idle`` seconds is gone. Two requests on one conversation are serialised: the
second waits for the first to write its turn, so follow-ups always see the turn before them.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from citewise.errors import NotFoundError
from citewise.index.catalog import Catalog
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.followup import Previous


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

    def as_dict(self) -> dict:
        return {"answer_id": self.answer_id, "turn": self.turn, "question": self.question,
                "standalone_question": self.standalone, "created_at": self.created_at,
                "answer": self.answer.model_dump()}


def previous_of(turns: list[Turn]) -> Previous | None:
    """What a follow-up leans on: the last turn's question and the document it cited first."""
    if not turns:
        return None
    last = turns[-1]
    title = last.answer.citations[0].title if last.answer.citations else None
    return Previous(last.standalone, title)


def history_of(turns: list[Turn], last: int = 5) -> list[dict]:
    """The conversation so far as chat messages, for a model."""
    messages: list[dict] = []
    for t in turns[-last:]:
        messages += [{"role": "user", "content": t.question},
                     {"role": "assistant", "content": t.answer.answer}]
    return messages


class Conversations:
    def __init__(self, catalog: Catalog, *, idle: float = 7 * 86400.0) -> None:
        self.catalog = catalog
        self.idle = idle
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    # Ownership and life -------------------------------------------------------------------
    def check(self, conversation_id: str, owner: str) -> None:
        """404 unless the conversation exists, is live and is the owner's."""
        self._row(conversation_id, owner)

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

    def start(self, owner: str, question: str, *, conversation_id: str | None = None) -> str:
        """A new conversation (or, with an id that already names one of the owner's, that
        one: the OpenAI protocol names its conversations by their first question)."""
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
    def turn(self, conversation_id: str, owner: str) -> Iterator[list[Turn]]:
        """Hold the conversation for one turn: yields the turns so far (after any turn in
        progress has been written) and keeps others out until the block ends."""
        self._row(conversation_id, owner)
        with self._guard:
            lock = self._locks.setdefault(conversation_id, threading.Lock())
        with lock:
            yield self._turns(conversation_id)

    def turns(self, conversation_id: str, owner: str) -> list[Turn]:
        self._row(conversation_id, owner)
        return self._turns(conversation_id)

    def _turns(self, conversation_id: str) -> list[Turn]:
        rows = self.catalog.connection().execute(
            "SELECT id, turn, question, standalone, answer, created_at FROM answers "
            "WHERE conversation_id = ? ORDER BY turn", (conversation_id,)).fetchall()
        return [Turn(r[0], r[1], r[2], r[3], Answer.model_validate_json(r[4]), r[5])
                for r in rows]

    def get(self, conversation_id: str, owner: str) -> dict:
        row = self._row(conversation_id, owner)
        return {**row, "turns": [t.as_dict() for t in self._turns(conversation_id)]}

    def list(self, owner: str, limit: int = 50) -> list[dict]:
        since = _iso(_now() - timedelta(seconds=self.idle))
        rows = self.catalog.connection().execute(
            "SELECT id, title, created_at, updated_at, turns FROM conversations "
            "WHERE owner = ? AND updated_at >= ? ORDER BY updated_at DESC LIMIT ?",
            (owner, since, limit)).fetchall()
        return [dict(zip(("id", "title", "created_at", "updated_at", "turns"), r, strict=True))
                for r in rows]

    def delete(self, conversation_id: str, owner: str) -> None:
        self._row(conversation_id, owner)
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
    def record(self, owner: str, question: str, standalone: str, answer: Answer,
               conversation_id: str | None = None) -> str:
        """Keep an answer (for feedback, and as the conversation's next turn)."""
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

    def answer(self, answer_id: str, owner: str) -> dict:
        row = self.catalog.connection().execute(
            "SELECT id, owner, question, standalone, answer, conversation_id FROM answers "
            "WHERE id = ?", (answer_id,)).fetchone()
        if row is None or row[1] != owner:
            raise NotFoundError(f"no answer {answer_id!r}",
                                hint="feedback is for answers you were given")
        return {"id": row[0], "question": row[2], "standalone": row[3],
                "answer": json.loads(row[4]), "conversation_id": row[5]}

    def feedback(self, answer_id: str, owner: str, *, helpful: bool, comment: str | None,
                 wrong_citation: int | None) -> dict:
        self.answer(answer_id, owner)
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
