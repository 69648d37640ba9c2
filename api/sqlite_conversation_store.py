"""Conversations (``conversation_store.py``) in the embedded SQLite database:
``conversations``, ``answers`` and ``feedback``."""

from __future__ import annotations

import json
from collections.abc import Iterator

from citewise.api.conversation_store import ConversationRow, FeedbackRow, StoredAnswer
from citewise.retrieval.answering import Answer
from citewise.sqlite import SqliteStore
from citewise.sqlite_schema import Migration, StoreSchema

# ``shipped_as``: the catalog's PRAGMA user_version that first held the change, before the
# stores split (``citewise.sqlite_schema``).
SCHEMA = StoreSchema("conversations", (
    # Conversations, every answer given (for feedback), and the feedback.
    Migration("""
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        turns INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX conversations_owner ON conversations(owner, updated_at);
    CREATE TABLE answers (
        id TEXT PRIMARY KEY,
        conversation_id TEXT,
        turn INTEGER,
        owner TEXT NOT NULL,
        question TEXT NOT NULL,
        standalone TEXT NOT NULL,
        answer TEXT NOT NULL,
        documents TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX answers_conversation ON answers(conversation_id, turn);
    CREATE TABLE feedback (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        answer_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        helpful INTEGER NOT NULL,
        comment TEXT,
        wrong_citation INTEGER,
        created_at TEXT NOT NULL
    );
    CREATE INDEX feedback_at ON feedback(created_at);
    """, shipped_as=7),
    # "Not helpful: the right document was ...": what `feedback export --golden` learns from.
    Migration("ALTER TABLE feedback ADD COLUMN right_document TEXT"),
    # The console's triage: what an operator did with each (open until someone acts).
    Migration("""
    ALTER TABLE feedback ADD COLUMN status TEXT NOT NULL DEFAULT 'open';
    ALTER TABLE feedback ADD COLUMN triaged_at TEXT;
    ALTER TABLE feedback ADD COLUMN triaged_by TEXT;
    CREATE INDEX feedback_status ON feedback(status, id);
    """),
))

_FEEDBACK = ("answer_id, principal, helpful, comment, wrong_citation, created_at, "
             "right_document, status, triaged_at, triaged_by")

_CONVERSATION = "id, owner, title, created_at, updated_at, turns"
_ANSWER = "id, owner, question, standalone, answer, created_at, conversation_id, turn, documents"


class SqliteConversationStore(SqliteStore):
    """``ConversationStore`` over the tables above, in ``database``."""

    schema = SCHEMA

    def start(self, conversation_id: str, owner: str, title: str, at: str) -> None:
        self._conn().execute(
            "INSERT INTO conversations (id, owner, title, created_at, updated_at, turns) "
            "VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT(id) DO UPDATE SET updated_at = "
            "CASE WHEN conversations.owner = excluded.owner THEN excluded.updated_at "
            "ELSE conversations.updated_at END",
            (conversation_id, owner, title, at, at))

    def get(self, conversation_id: str) -> ConversationRow | None:
        row = self._conn().execute(f"SELECT {_CONVERSATION} FROM conversations WHERE id = ?",
                                   (conversation_id,)).fetchone()
        return ConversationRow(*row) if row is not None else None

    def owned_by(self, owner: str, since: str, limit: int) -> list[ConversationRow]:
        return [ConversationRow(*r) for r in self._conn().execute(
            f"SELECT {_CONVERSATION} FROM conversations WHERE owner = ? AND updated_at >= ? "
            "ORDER BY updated_at DESC LIMIT ?", (owner, since, limit))]

    def add_answer(self, answer: StoredAnswer) -> StoredAnswer:
        with self.database.transaction():
            conn = self._conn()
            if answer.conversation_id is not None:
                answer.turn = conn.execute("SELECT turns FROM conversations WHERE id = ?",
                                           (answer.conversation_id,)).fetchone()[0] + 1
                conn.execute("UPDATE conversations SET turns = ?, updated_at = ? WHERE id = ?",
                             (answer.turn, answer.created_at, answer.conversation_id))
            conn.execute(
                f"INSERT INTO answers ({_ANSWER}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (answer.id, answer.owner, answer.question, answer.standalone,
                 answer.answer.model_dump_json(), answer.created_at, answer.conversation_id,
                 answer.turn, json.dumps(answer.documents)))
        return answer

    def answers(self, conversation_id: str) -> list[StoredAnswer]:
        return [_answer(r) for r in self._conn().execute(
            f"SELECT {_ANSWER} FROM answers WHERE conversation_id = ? ORDER BY turn",
            (conversation_id,))]

    def answer(self, answer_id: str) -> StoredAnswer | None:
        row = self._conn().execute(f"SELECT {_ANSWER} FROM answers WHERE id = ?",
                                   (answer_id,)).fetchone()
        return _answer(row) if row is not None else None

    def delete(self, conversation_id: str) -> None:
        with self.database.transaction():
            conn = self._conn()
            conn.execute("DELETE FROM answers WHERE conversation_id = ?", (conversation_id,))
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def expire(self, before: str) -> int:
        with self.database.transaction():
            conn = self._conn()
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM conversations WHERE updated_at < ?", (before,))]
            conn.executemany("DELETE FROM answers WHERE conversation_id = ? AND id NOT IN "
                             "(SELECT answer_id FROM feedback)", [(i,) for i in ids])
            conn.executemany("DELETE FROM conversations WHERE id = ?", [(i,) for i in ids])
        return len(ids)

    def add_feedback(self, answer_id: str, principal: str, helpful: bool, comment: str | None,
                     wrong_citation: int | None, at: str,
                     right_document: str | None = None) -> None:
        self._conn().execute(
            "INSERT INTO feedback (answer_id, principal, helpful, comment, wrong_citation, "
            "created_at, right_document) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (answer_id, principal, int(helpful), comment, wrong_citation, at, right_document))

    def feedback_since(self, since: str) -> list[tuple[dict, StoredAnswer]]:
        columns = ", ".join(f"a.{c.strip()}" for c in _ANSWER.split(","))
        rows = self._conn().execute(
            f"SELECT f.helpful, f.comment, f.wrong_citation, f.created_at, f.right_document, "
            f"f.status, {columns} FROM feedback f JOIN answers a ON a.id = f.answer_id "
            "WHERE f.created_at >= ? ORDER BY f.created_at, f.id", (since,)).fetchall()
        return [({"helpful": bool(r[0]), "comment": r[1], "wrong_citation": r[2],
                  "created_at": r[3], "right_document": r[4], "status": r[5]},
                 _answer(r[6:])) for r in rows]

    # Triage ------------------------------------------------------------------------------------
    def feedback_items(self, status: str | None, limit: int
                       ) -> list[tuple[int, FeedbackRow, StoredAnswer]]:
        where, args = ("WHERE f.status = ?", [status]) if status else ("", [])
        return [(r[0], _feedback(r[1:11]), _answer(r[11:])) for r in self._conn().execute(
            f"SELECT f.id, {_columns('f', _FEEDBACK)}, {_columns('a', _ANSWER)} "
            f"FROM feedback f JOIN answers a ON a.id = f.answer_id {where} "
            "ORDER BY f.id DESC LIMIT ?", [*args, limit])]

    def feedback_item(self, feedback_id: int) -> tuple[FeedbackRow, StoredAnswer] | None:
        r = self._conn().execute(
            f"SELECT {_columns('f', _FEEDBACK)}, {_columns('a', _ANSWER)} "
            "FROM feedback f JOIN answers a ON a.id = f.answer_id WHERE f.id = ?",
            [feedback_id]).fetchone()
        return (_feedback(r[:10]), _answer(r[10:])) if r else None

    def set_feedback_status(self, feedback_id: int, status: str, by: str, at: str) -> bool:
        return self._conn().execute(
            "UPDATE feedback SET status = ?, triaged_by = ?, triaged_at = ? WHERE id = ?",
            [status, by, at, feedback_id]).rowcount > 0

    def feedback_per_day(self, since: str) -> list[tuple[str, int, int]]:
        return [(r[0], r[1], r[2]) for r in self._conn().execute(
            "SELECT substr(created_at, 1, 10), sum(helpful), sum(1 - helpful) FROM feedback "
            "WHERE created_at >= ? GROUP BY 1 ORDER BY 1", [since])]

    # A copy of the whole store -------------------------------------------------------------------
    def export_conversations(self) -> Iterator[ConversationRow]:
        for row in self._conn().execute(f"SELECT {_CONVERSATION} FROM conversations ORDER BY id"):
            yield ConversationRow(*row)

    def export_answers(self) -> Iterator[StoredAnswer]:
        for row in self._conn().execute(f"SELECT {_ANSWER} FROM answers ORDER BY created_at, id"):
            yield _answer(row)

    def export_feedback(self) -> Iterator[tuple[int, FeedbackRow]]:
        for r in self._conn().execute(f"SELECT id, {_FEEDBACK} FROM feedback ORDER BY id"):
            yield r[0], _feedback(r[1:])

    def import_conversations(self, rows: list[ConversationRow]) -> None:
        with self.database.transaction():
            for row in rows:
                self.database.upsert("conversations", {
                    "id": row.id, "owner": row.owner, "title": row.title,
                    "created_at": row.created_at, "updated_at": row.updated_at,
                    "turns": row.turns}, pk="id")

    def import_answers(self, answers: list[StoredAnswer]) -> int:
        with self.database.transaction():
            return sum(self._conn().execute(
                f"INSERT INTO answers ({_ANSWER}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO NOTHING",
                (a.id, a.owner, a.question, a.standalone, a.answer.model_dump_json(),
                 a.created_at, a.conversation_id, a.turn, json.dumps(a.documents))).rowcount
                for a in answers)

    def import_feedback(self, rows: list[tuple[int, FeedbackRow]]) -> int:
        with self.database.transaction():
            return sum(self._conn().execute(
                f"INSERT INTO feedback (id, {_FEEDBACK}) VALUES ({', '.join('?' * 11)}) "
                "ON CONFLICT(id) DO NOTHING",
                (row_id, f.answer_id, f.principal, int(f.helpful), f.comment,
                 f.wrong_citation, f.created_at, f.right_document, f.status, f.triaged_at,
                 f.triaged_by)).rowcount
                for row_id, f in rows)


def _answer(row) -> StoredAnswer:
    (answer_id, owner, question, standalone, answer, created_at, conversation_id, turn,
     documents) = tuple(row)
    return StoredAnswer(id=answer_id, owner=owner, question=question, standalone=standalone,
                        answer=Answer.model_validate_json(answer), created_at=created_at,
                        conversation_id=conversation_id, turn=turn,
                        documents=json.loads(documents or "[]"))


def _columns(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _feedback(row) -> FeedbackRow:
    (answer_id, principal, helpful, comment, wrong_citation, created_at, right_document,
     status, triaged_at, triaged_by) = tuple(row)
    return FeedbackRow(answer_id=answer_id, principal=principal, helpful=bool(helpful),
                       comment=comment, wrong_citation=wrong_citation, created_at=created_at,
                       right_document=right_document, status=status, triaged_at=triaged_at,
                       triaged_by=triaged_by)
