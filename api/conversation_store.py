"""Where conversations are kept: each conversation's owner and turn count, every answer given
(as a turn of a conversation, or alone, for feedback), and the feedback on them.

``ConversationStore`` is the contract; ``sqlite_conversation_store.py`` keeps it in the embedded
database. The rules (who may see what, what a turn shows today, when a conversation expires)
are ``conversations.py``'s: the store keeps rows and answers plain questions about them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from citewise.retrieval.answering import Answer


@dataclass
class ConversationRow:
    id: str
    owner: str
    title: str
    created_at: str
    updated_at: str
    turns: int = 0

    def summary(self) -> dict:
        """What a conversation's listing shows (the owner is the caller's own)."""
        return {"id": self.id, "title": self.title, "created_at": self.created_at,
                "updated_at": self.updated_at, "turns": self.turns}


@dataclass
class StoredAnswer:
    id: str
    owner: str
    question: str  # as asked
    standalone: str  # as searched (a follow-up rewritten to stand alone)
    answer: Answer
    created_at: str
    conversation_id: str | None = None
    turn: int | None = None  # its place in the conversation, from 1
    documents: list[str] = field(default_factory=list)  # the documents it cites


@dataclass
class FeedbackRow:
    """Feedback as kept: who gave it on which answer."""

    answer_id: str
    principal: str
    helpful: bool
    comment: str | None
    wrong_citation: int | None
    created_at: str
    # Not helpful, and the right document was this (a path, `<source>/<path>` or a link, as
    # the person wrote it): `citewise feedback export --golden` makes it a golden-set entry.
    right_document: str | None = None
    # What an operator did with it in the console: open, added (to the golden set), dismissed.
    status: str = "open"
    triaged_at: str | None = None
    triaged_by: str | None = None


class ConversationStore(Protocol):
    def start(self, conversation_id: str, owner: str, title: str, at: str) -> None:
        """A new conversation; for an id that exists, only its ``updated_at`` moves, and only
        when ``owner`` is its owner (someone else's is left as it is)."""
        ...

    def get(self, conversation_id: str) -> ConversationRow | None: ...

    def owned_by(self, owner: str, since: str, limit: int) -> list[ConversationRow]:
        """The owner's conversations updated since ``since``, most recent first."""
        ...

    def add_answer(self, answer: StoredAnswer) -> StoredAnswer:
        """Keep an answer; one of a conversation becomes its next turn (``turn`` set, the
        conversation's turn count and ``updated_at`` moved), atomically."""
        ...

    def answers(self, conversation_id: str) -> list[StoredAnswer]:
        """The conversation's turns, in order."""
        ...

    def answer(self, answer_id: str) -> StoredAnswer | None: ...

    def delete(self, conversation_id: str) -> None:
        """The conversation and its turns gone."""
        ...

    def expire(self, before: str) -> int:
        """Forget conversations not updated since ``before``, and their turns, except the
        answers that received feedback (golden-set candidates); how many conversations."""
        ...

    def add_feedback(self, answer_id: str, principal: str, helpful: bool, comment: str | None,
                     wrong_citation: int | None, at: str,
                     right_document: str | None = None) -> None: ...

    def feedback_since(self, since: str) -> list[tuple[dict, StoredAnswer]]:
        """Feedback given since ``since`` (``helpful``, ``comment``, ``wrong_citation``,
        ``right_document``, ``created_at``, and its triage ``status``: open, added or
        dismissed) with the answer it is about, oldest first."""
        ...

    # Triage (the operator console) -----------------------------------------------------------
    def feedback_items(self, status: str | None, limit: int
                       ) -> list[tuple[int, FeedbackRow, StoredAnswer]]:
        """Feedback with its id and the answer it is about, newest first, of one triage
        ``status`` (open, added, dismissed) or all (None)."""
        ...

    def feedback_item(self, feedback_id: int) -> tuple[FeedbackRow, StoredAnswer] | None: ...

    def set_feedback_status(self, feedback_id: int, status: str, by: str, at: str) -> bool:
        """Record what an operator did with the feedback; False when there is none of that
        id."""
        ...

    def feedback_per_day(self, since: str) -> list[tuple[str, int, int]]:
        """``(YYYY-MM-DD, helpful, not helpful)`` per day with feedback since ``since``, oldest
        first."""
        ...

    # A copy of the whole store (``citewise migrate-catalog``: another installation's records
    # brought into this one, rerun until the cut-over, so every write here is idempotent) ----
    def export_conversations(self) -> Iterator[ConversationRow]: ...

    def export_answers(self) -> Iterator[StoredAnswer]:
        """Every answer kept: the turns of conversations, and the answers kept alone or for
        their feedback."""
        ...

    def export_feedback(self) -> Iterator[tuple[int, FeedbackRow]]:
        """Every feedback with its id, lowest first."""
        ...

    def import_conversations(self, rows: list[ConversationRow]) -> None:
        """Keep these conversations as they are (owner, title, times, turn count), each
        replacing the conversation of its id."""
        ...

    def import_answers(self, answers: list[StoredAnswer]) -> int:
        """Keep these answers under their own ids and turns (the conversations' counts are
        ``import_conversations``'), all or none; an answer whose id is kept already is left as
        it is (an answer never changes). How many were new."""
        ...

    def import_feedback(self, rows: list[tuple[int, FeedbackRow]]) -> int:
        """Keep these under their own ids, all or none; one whose id is kept already is left
        as it is. How many were new. Feedback given later gets a higher id."""
        ...

    def close(self) -> None: ...
