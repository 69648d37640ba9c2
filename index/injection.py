"""Text aimed at a model rather than a reader: the prompt injections a wiki page can carry.

"Ignore previous instructions and ...", "you are now ...", fake role markers, requests to reveal
the prompt. Found by patterns with weights, summed into a score: one strong pattern (an order to
ignore the instructions) flags a passage by itself, weaker ones (a role marker, "from now on")
only together. Ingest records the flagged chunks of each document; answers fence or drop them
according to the guardrail policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from citewise.types import Chunk

FLAG_AT = 1.0

_PATTERNS: list[tuple[float, re.Pattern[str]]] = [
    (1.0, re.compile(r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|"
                     r"above|earlier|preceding|all|any|your|the|system)\b[^.\n]{0,30}\b("
                     r"instructions?|rules|prompts?|guidelines|directions|constraints)", re.I)),
    (1.0, re.compile(r"\b(reveal|print|show|repeat|output|leak)\b[^.\n]{0,30}\b(system prompt|"
                     r"your (instructions|prompt|rules)|the prompt)", re.I)),
    (0.6, re.compile(r"\byou are now\b|\bfrom now on,? you\b|\bact as (an?|the) "
                     r"(unfiltered|unrestricted|different)\b|\bnew instructions\s*:", re.I)),
    (0.6, re.compile(r"<\|(im_start|im_end|system|assistant)\|>|\[/?INST\]|^#{2,3} ?(system|"
                     r"instruction)s?\s*:?\s*$", re.I | re.M)),
    (0.5, re.compile(r"\b(do not|don't|never) (tell|inform|mention to) the user\b|"
                     r"\b(as an ai|language model),? (you must|you should)\b", re.I)),
    (0.4, re.compile(r"^\s*(system|assistant)\s*:", re.I | re.M)),
    (0.4, re.compile(r"\bIMPORTANT (SYSTEM )?(NOTICE|MESSAGE|INSTRUCTION)\b")),
]


def injection_score(text: str) -> float:
    return round(sum(w for w, p in _PATTERNS if p.search(text)), 2)


def is_injection(text: str) -> bool:
    return injection_score(text) >= FLAG_AT


def injected_chunks(chunks: Iterable[Chunk]) -> list[int]:
    """The ordinals of the chunks aimed at a model: what ingest records for a document
    (``DocumentRecord.injection_chunks``).

    Nearly every document has none, so each pattern first searches the chunks joined by
    newlines, once: a match inside one chunk is a match in the joined text too (next to a
    newline, ``\\b``, ``^`` and ``$`` hold where they held at the chunk's ends), so a document
    none of them matches has no flagged chunk, and only the others are scored chunk by chunk:
    seven searches per document instead of seven per chunk."""
    chunks = list(chunks)
    joined = "\n".join(c.text for c in chunks)
    if not any(p.search(joined) for _, p in _PATTERNS):
        return []
    return [c.ordinal for c in chunks if is_injection(c.text)]
