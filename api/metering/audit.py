"""The audit log: who created or revoked a key, started an ingest, read usage or the audit log,
and who was refused. Append-only: the store has no way to change or remove an entry (and the
SQLite one's triggers abort any UPDATE or DELETE of a row).

Refusals are the one event an outsider can cause at will; to keep a flood of bad tokens from
filling the disk, at most ``DENIED_PER_MINUTE`` are written per client address and minute, and
the next one written says how many were left out.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from citewise.api.metering.store import AuditEntry, MeteringStore

DENIED_PER_MINUTE = 20


class AuditLog:
    def __init__(self, store: MeteringStore) -> None:
        self.store = store
        self._denied: dict[str, tuple[str, int, int]] = {}  # client -> (minute, written, dropped)
        self._lock = threading.Lock()

    def record(self, action: str, *, actor: str, outcome: str = "ok", key: str | None = None,
               target: str | None = None, detail: dict | None = None,
               client: str | None = None, request_id: str | None = None) -> None:
        detail = dict(detail or {})
        if outcome == "denied":
            dropped = self._admit_denied(client or "")
            if dropped is None:
                return
            if dropped:
                detail["not_logged_before_this"] = dropped
        self.store.append_audit(AuditEntry(
            at=datetime.now(UTC).isoformat(timespec="milliseconds"), actor=actor, key=key,
            action=action, target=target, outcome=outcome, detail=detail, client=client,
            request_id=request_id))

    def _admit_denied(self, client: str) -> int | None:
        """``None`` when this refusal is not written; else how many were dropped before it."""
        minute = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M")
        with self._lock:
            at, written, dropped = self._denied.get(client, (minute, 0, 0))
            if at != minute:
                at, written = minute, 0
            if written >= DENIED_PER_MINUTE:
                self._denied[client] = (at, written, dropped + 1)
                return None
            self._denied[client] = (at, written + 1, 0)
            if len(self._denied) > 10_000:
                self._denied.clear()
            return dropped

    def read(self, since: str | None = None, limit: int = 100, action: str | None = None,
             after_id: int | None = None, *, actor: str | None = None,
             outcome: str | None = None) -> list[dict]:
        return self.store.read_audit(since, limit, action, after_id, actor=actor,
                                     outcome=outcome)
