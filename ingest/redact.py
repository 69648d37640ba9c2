"""Secrets never reach the index: credentials in a document are replaced before anything is stored.

(First cut by the lead: AWS access key ids and private key blocks. The git connector's work
extends the detectors.) Replacements keep the line count, so line citations stay right.
"""

from __future__ import annotations

import dataclasses
import re

from citewise.types import SourceDocument

_DETECTORS: list[tuple[str, re.Pattern[str]]] = [
    ("private-key", re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)),
    ("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
]


def redact_text(text: str) -> tuple[str, list[dict]]:
    findings: list[dict] = []
    for kind, pattern in _DETECTORS:
        def replace(m: re.Match[str], kind: str = kind, scanned: str = text) -> str:
            findings.append({"kind": kind, "line": scanned.count("\n", 0, m.start()) + 1})
            return "\n".join(f"[REDACTED:{kind}]" for _ in m.group(0).split("\n"))
        text = pattern.sub(replace, text)
    return text, findings


def redact_document(doc: SourceDocument) -> SourceDocument:
    try:
        raw = doc.content.decode("utf-8")
    except UnicodeDecodeError:
        return doc  # not text: the parser rejects it with its own message
    content, findings = redact_text(raw)
    if not findings:
        return doc
    body = redact_text(doc.body)[0] if doc.body is not None else None
    metadata = {**doc.metadata, "redactions": findings}
    return dataclasses.replace(doc, content=content.encode(), body=body, metadata=metadata)
