"""Conversations (``conversation_store.py``) in PostgreSQL (``CITEWISE_DATABASE_URL``):
``conversations``, ``answers`` and ``feedback``, shared by every replica, so a conversation
started through one continues through another.

An answer is kept as ``jsonb``, the documents it cites as ``text[]``; a turn is numbered by the
same statement that counts it (``UPDATE ... RETURNING``), so two replicas adding turns to one
conversation at once number them 1, 2, never 1, 1. Times are ISO text ``COLLATE "C"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from psycopg.types.json import Jsonb

from citewise.api.conversation_store import ConversationRow, FeedbackRow, StoredAnswer
from citewise.errors import NotFoundError
from citewise.postgres import PostgresStore, Row
from citewise.retrieval.answering import Answer
from citewise.store_schema import Migration, StoreSchema

SCHEMA = StoreSchema("conversations", (
    Migration("""
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL,
        updated_at TEXT COLLATE "C" NOT NULL,
        turns INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX conversations_owner ON conversations (owner, updated_at);
    CREATE INDEX conversations_updated ON conversations (updated_at);
    CREATE TABLE answers (
        id TEXT PRIMARY KEY,
        conversation_id TEXT,
        turn INTEGER,
        owner TEXT NOT NULL,
        question TEXT NOT NULL,
        standalone TEXT NOT NULL,
        answer JSONB NOT NULL,
        documents TEXT[] NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL
    );
    CREATE INDEX answers_conversation ON answers (conversation_id, turn);
    CREATE TABLE feedback (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        answer_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        helpful BOOLEAN NOT NULL,
        comment TEXT,
        wrong_citation INTEGER,
        created_at TEXT COLLATE "C" NOT NULL
    );
    CREATE INDEX feedback_at ON feedback (created_at);
    CREATE INDEX feedback_answer ON feedback (answer_id);
    """),
    # "Not helpful: the right document was ...": what `feedback export --golden` learns from.
    Migration("ALTER TABLE feedback ADD COLUMN right_document TEXT"),
    # The console's triage: what an operator did with each (open until someone acts).
    Migration("""
    ALTER TABLE feedback ADD COLUMN status TEXT NOT NULL DEFAULT 'open';
    ALTER TABLE feedback ADD COLUMN triaged_at TEXT COLLATE "C";
    ALTER TABLE feedback ADD COLUMN triaged_by TEXT;
    CREATE INDEX feedback_status ON feedback (status, id);
    """),
))

_FEEDBACK = ("answer_id, principal, helpful, comment, wrong_citation, created_at, "
             "right_document, status, triaged_at, triaged_by")

_CONVERSATION = "id, owner, title, created_at, updated_at, turns"
_ANSWER = "id, owner, question, standalone, answer, created_at, conversation_id, turn, documents"


class PostgresConversationStore(PostgresStore):
    """``ConversationStore`` over the tables above, in ``database``."""

    schema = SCHEMA

    def start(self, conversation_id: str, owner: str, title: str, at: str) -> None:
        self.database.execute(
            "INSERT INTO conversations (id, owner, title, created_at, updated_at, turns) "
            "VALUES (%s, %s, %s, %s, %s, 0) ON CONFLICT (id) DO UPDATE SET updated_at = "
            "CASE WHEN conversations.owner = excluded.owner THEN excluded.updated_at "
            "ELSE conversations.updated_at END",
            [conversation_id, owner, title, at, at])

    def get(self, conversation_id: str) -> ConversationRow | None:
        row = self.database.row(f"SELECT {_CONVERSATION} FROM conversations WHERE id = %s",
                                [conversation_id])
        return ConversationRow(**row) if row is not None else None

    def owned_by(self, owner: str, since: str, limit: int) -> list[ConversationRow]:
        return [ConversationRow(**r) for r in self.database.rows(
            f"SELECT {_CONVERSATION} FROM conversations WHERE owner = %s AND updated_at >= %s "
            "ORDER BY updated_at DESC LIMIT %s", [owner, since, limit])]

    def add_answer(self, answer: StoredAnswer) -> StoredAnswer:
        with self.database.transaction() as conn:
            if answer.conversation_id is not None:
                counted = conn.execute(
                    "UPDATE conversations SET turns = turns + 1, updated_at = %s WHERE id = %s "
                    "RETURNING turns", [answer.created_at, answer.conversation_id]).fetchone()
                if counted is None:
                    raise NotFoundError(f"no conversation {answer.conversation_id!r}",
                                        hint="start a new conversation")
                answer.turn = int(counted["turns"])
            conn.execute(
                f"INSERT INTO answers ({_ANSWER}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [answer.id, answer.owner, answer.question, answer.standalone,
                 Jsonb(answer.answer.model_dump(mode="json")), answer.created_at,
                 answer.conversation_id, answer.turn, list(answer.documents)])
        return answer

    def answers(self, conversation_id: str) -> list[StoredAnswer]:
        return [_answer(r) for r in self.database.rows(
            f"SELECT {_ANSWER} FROM answers WHERE conversation_id = %s ORDER BY turn",
            [conversation_id])]

    def answer(self, answer_id: str) -> StoredAnswer | None:
        row = self.database.row(f"SELECT {_ANSWER} FROM answers WHERE id = %s", [answer_id])
        return _answer(row) if row is not None else None

    def delete(self, conversation_id: str) -> None:
        with self.database.transaction() as conn:
            conn.execute("DELETE FROM answers WHERE conversation_id = %s", [conversation_id])
            conn.execute("DELETE FROM conversations WHERE id = %s", [conversation_id])

    def expire(self, before: str) -> int:
        with self.database.transaction() as conn:
            ids = [r["id"] for r in conn.execute(
                "DELETE FROM conversations WHERE updated_at < %s RETURNING id", [before])]
            conn.execute(
                "DELETE FROM answers a WHERE a.conversation_id = ANY(%s::text[]) AND NOT EXISTS "
                "(SELECT 1 FROM feedback f WHERE f.answer_id = a.id)", [ids])
        return len(ids)

    def add_feedback(self, answer_id: str, principal: str, helpful: bool, comment: str | None,
                     wrong_citation: int | None, at: str,
                     right_document: str | None = None) -> None:
        self.database.execute(
            "INSERT INTO feedback (answer_id, principal, helpful, comment, wrong_citation, "
            "created_at, right_document) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [answer_id, principal, helpful, comment, wrong_citation, at, right_document])

    def feedback_since(self, since: str) -> list[tuple[dict[str, Any], StoredAnswer]]:
        columns = ", ".join(f"a.{c.strip()}" for c in _ANSWER.split(","))
        rows = self.database.rows(
            "SELECT f.helpful, f.comment, f.wrong_citation, f.created_at AS given_at, "
            f"f.right_document, f.status AS triage, {columns} FROM feedback f "
            "JOIN answers a ON a.id = f.answer_id "
            "WHERE f.created_at >= %s ORDER BY f.created_at, f.id", [since])
        return [({"helpful": r["helpful"], "comment": r["comment"],
                  "wrong_citation": r["wrong_citation"], "created_at": r["given_at"],
                  "right_document": r["right_document"], "status": r["triage"]},
                 _answer(r)) for r in rows]

    # Triage ------------------------------------------------------------------------------------
    def feedback_items(self, status: str | None, limit: int
                       ) -> list[tuple[int, FeedbackRow, StoredAnswer]]:
        where, args = ("WHERE f.status = %s", [status]) if status else ("", [])
        rows = self.database.rows(
            f"SELECT f.id AS feedback_id, {_given('f')}, {_columns('a', _ANSWER)} "
            f"FROM feedback f JOIN answers a ON a.id = f.answer_id {where} "
            "ORDER BY f.id DESC LIMIT %s", [*args, limit])
        return [(r["feedback_id"], _feedback(r), _answer(r)) for r in rows]

    def feedback_item(self, feedback_id: int) -> tuple[FeedbackRow, StoredAnswer] | None:
        rows = self.database.rows(
            f"SELECT {_given('f')}, {_columns('a', _ANSWER)} "
            "FROM feedback f JOIN answers a ON a.id = f.answer_id WHERE f.id = %s",
            [feedback_id])
        return (_feedback(rows[0]), _answer(rows[0])) if rows else None

    def set_feedback_status(self, feedback_id: int, status: str, by: str, at: str) -> bool:
        with self.database.transaction() as conn:
            return conn.execute(
                "UPDATE feedback SET status = %s, triaged_by = %s, triaged_at = %s "
                "WHERE id = %s", [status, by, at, feedback_id]).rowcount > 0

    def feedback_per_day(self, since: str) -> list[tuple[str, int, int]]:
        return [(r["day"], r["helpful"], r["not_helpful"]) for r in self.database.rows(
            "SELECT substr(created_at, 1, 10) AS day, "
            "sum(helpful::int)::int AS helpful, sum((NOT helpful)::int)::int AS not_helpful "
            "FROM feedback WHERE created_at >= %s GROUP BY 1 ORDER BY 1", [since])]

    # A copy of the whole store -------------------------------------------------------------------
    def export_conversations(self) -> Iterator[ConversationRow]:
        for row in self.database.rows(
                f"SELECT {_CONVERSATION} FROM conversations ORDER BY id COLLATE \"C\""):
            yield ConversationRow(**row)

    def export_answers(self) -> Iterator[StoredAnswer]:
        for row in self.database.rows(
                f"SELECT {_ANSWER} FROM answers ORDER BY created_at, id COLLATE \"C\""):
            yield _answer(row)

    def export_feedback(self) -> Iterator[tuple[int, FeedbackRow]]:
        for r in self.database.rows(f"SELECT id, {_FEEDBACK} FROM feedback ORDER BY id"):
            yield r["id"], FeedbackRow(**{k: v for k, v in r.items() if k != "id"})

    def import_conversations(self, rows: list[ConversationRow]) -> None:
        with self.database.transaction() as conn:
            conn.cursor().executemany(
                f"INSERT INTO conversations ({_CONVERSATION}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, title = excluded.title, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "turns = excluded.turns",
                [(r.id, r.owner, r.title, r.created_at, r.updated_at, r.turns) for r in rows])

    def import_answers(self, answers: list[StoredAnswer]) -> int:
        new = 0
        with self.database.transaction() as conn:
            for a in answers:
                added = conn.execute(
                    f"INSERT INTO answers ({_ANSWER}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
                    "%s) ON CONFLICT (id) DO NOTHING RETURNING id",
                    [a.id, a.owner, a.question, a.standalone,
                     Jsonb(a.answer.model_dump(mode="json")), a.created_at, a.conversation_id,
                     a.turn, list(a.documents)]).fetchone()
                new += added is not None
        return new

    def import_feedback(self, rows: list[tuple[int, FeedbackRow]]) -> int:
        new = 0
        with self.database.transaction() as conn:
            for row_id, f in rows:
                added = conn.execute(
                    f"INSERT INTO feedback (id, {_FEEDBACK}) OVERRIDING SYSTEM VALUE "
                    f"VALUES ({', '.join(['%s'] * 11)}) ON CONFLICT (id) DO NOTHING "
                    "RETURNING id",
                    [row_id, f.answer_id, f.principal, f.helpful, f.comment, f.wrong_citation,
                     f.created_at, f.right_document, f.status, f.triaged_at,
                     f.triaged_by]).fetchone()
                new += added is not None
            if new:
                # The ids given move the identity past them: feedback given later comes after.
                conn.execute("SELECT setval(pg_get_serial_sequence('feedback', 'id'), "
                             "(SELECT max(id) FROM feedback))")
        return new


def _answer(row: Row) -> StoredAnswer:
    return StoredAnswer(id=row["id"], owner=row["owner"], question=row["question"],
                        standalone=row["standalone"], answer=Answer.model_validate(row["answer"]),
                        created_at=row["created_at"], conversation_id=row["conversation_id"],
                        turn=row["turn"], documents=list(row["documents"]))


def _columns(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _given(alias: str) -> str:
    """The feedback's columns, named apart from the answer's (both have ``created_at``)."""
    return ", ".join(f"{alias}.{c.strip()} AS f_{c.strip()}" for c in _FEEDBACK.split(","))


def _feedback(row: Row) -> FeedbackRow:
    return FeedbackRow(**{c.strip(): row[f"f_{c.strip()}"] for c in _FEEDBACK.split(",")})
