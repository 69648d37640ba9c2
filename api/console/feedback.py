"""Feedback triage in the console: what people said of answers, with the question, the answer
and its citations; **Add to golden set** turns one into a golden-set entry with the same rules
as `citewise feedback export --golden` (``feedback_golden.py``) and appends it to
``<data dir>/golden/feedback.jsonl``, which `citewise eval --qa` reads; **Dismiss** closes it.
What was done is kept with the feedback (its triage status), so every replica shows the same."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from citewise.api.conversation_store import ConversationStore, FeedbackRow, StoredAnswer
from citewise.api.feedback_golden import DocumentNames, golden_entries
from citewise.errors import CitewiseError, NotFoundError
from citewise.index.catalog import DocumentCatalog
from citewise.index.source_store import SourceStore
from citewise.private_files import private_file, private_folder

DAYS = 30  # the counts' span
_APPEND = threading.Lock()  # one writer of the golden file at a time in this process


class NotAGoldenEntry(CitewiseError):
    """The feedback cannot become a golden-set entry (nothing says which document is right)."""

    status_code = 422
    code = "not_a_golden_entry"


def golden_file(data_dir: Path) -> Path:
    """Where the console appends the entries it makes (JSON Lines, the golden set's format)."""
    return data_dir / "golden" / "feedback.jsonl"


def item(feedback_id: int, given: FeedbackRow, stored: StoredAnswer) -> dict[str, Any]:
    """One feedback as the console's ``FeedbackItem``."""
    return {
        "id": feedback_id, "at": given.created_at, "principal": given.principal,
        "helpful": given.helpful, "question": stored.question, "answer": stored.answer.answer,
        "citations": [{"title": c.title, "uri": c.url or f"{c.source}/{c.path or c.document_id}",
                       "locator": _locator(c.start_line, c.end_line, c.heading)}
                      for c in stored.answer.citations],
        "comment": given.comment, "right_document": given.right_document,
        "status": given.status, "answer_id": stored.id}


def triage(store: ConversationStore, status: str | None, limit: int,
           now: datetime | None = None) -> dict[str, Any]:
    now = now or datetime.now(UTC)
    first = (now - timedelta(days=DAYS - 1)).date()
    per_day = {day: (h, n) for day, h, n in store.feedback_per_day(first.isoformat())}
    counts = []
    for i in range(DAYS):
        day = (first + timedelta(days=i)).isoformat()
        helpful, not_helpful = per_day.get(day, (0, 0))
        counts.append({"day": day, "helpful": helpful, "not_helpful": not_helpful})
    return {"items": [item(i, g, s) for i, g, s in store.feedback_items(status, limit)],
            "counts": counts}


def add_to_golden(store: ConversationStore, catalog: DocumentCatalog, sources: SourceStore,
                  data_dir: Path, feedback_id: int, by: str) -> dict[str, Any]:
    """The feedback's golden-set entry, appended to ``golden_file``; the feedback marked
    ``added``. Refused (422, saying why) when the feedback names no relevant document."""
    found = store.feedback_item(feedback_id)
    if found is None:
        raise NotFoundError(f"no feedback {feedback_id}")
    given, stored = found
    export = golden_entries([(_as_given(given), stored)], DocumentNames.of(catalog, sources))
    if not export.entries:
        why = next(iter(export.skipped), "it names no relevant document")
        raise NotAGoldenEntry(
            f"feedback {feedback_id} cannot become a golden-set entry: {why}",
            hint="a not-helpful answer needs the right document (a <source>/<path> of an "
                 "indexed document); dismiss it, or ask the person which document was right")
    entry = {**export.entries[0], "from_feedback": feedback_id}
    path = golden_file(data_dir)
    with _APPEND:
        private_folder(path.parent)
        with private_file(path).open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    store.set_feedback_status(feedback_id, "added", by, _now())
    return {"id": feedback_id, "status": "added", "entry": entry, "path": str(path)}


def dismiss(store: ConversationStore, feedback_id: int, by: str) -> dict[str, Any]:
    if not store.set_feedback_status(feedback_id, "dismissed", by, _now()):
        raise NotFoundError(f"no feedback {feedback_id}")
    return {"id": feedback_id, "status": "dismissed"}


def _as_given(given: FeedbackRow) -> dict[str, Any]:
    # The shape ``feedback_since`` gives ``golden_entries``.
    return {"helpful": given.helpful, "comment": given.comment,
            "wrong_citation": given.wrong_citation, "created_at": given.created_at,
            "right_document": given.right_document, "status": given.status}


def _locator(start: int | None, end: int | None, heading: str | None) -> str | None:
    if start is not None:
        return f"lines {start}-{end}" if end is not None and end != start else f"line {start}"
    return heading or None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
