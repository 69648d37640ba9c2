"""Logging set-up for the CLI and the server: readable text, or JSON lines for log shippers."""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TextIO

# The id of the HTTP request being served (X-Request-Id), set by the front door: every log line
# written while serving it carries it, so one request's lines can be found among many.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        record.request_id = rid
        record.request_tag = f" [{rid}]" if rid else ""
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)  # set by RequestIdFilter
        if request_id:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class _BarFriendlyHandler(logging.StreamHandler[TextIO]):
    """On a terminal, print through tqdm so that log lines do not tear a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:
            self.handleError(record)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    tty = fmt == "text" and sys.stderr.isatty()
    handler = _BarFriendlyHandler(sys.stderr) if tty else logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Libraries that are chatty at INFO.
    for name in ("httpx", "urllib3", "botocore", "unstructured", "sentence_transformers",
                 "werkzeug", "numba"):
        logging.getLogger(name).setLevel(logging.WARNING)
