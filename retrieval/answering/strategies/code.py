"""Code ("which function refuses..."): the function's signature and docstring, with file and lines.

A chunk that is a later part of a long function (the code chunker splits one along its
statements) has no signature to show: the part itself is what was found, and it is quoted as
such. The chunker says which chunks continue their definition (``continues_symbol`` in the
chunk's payload); points written before it did carry no such mark, and for them the first line
is read instead, as it always was.
"""

from __future__ import annotations

import textwrap

from citewise.retrieval.answering.code_signature import opens_definition, signature_and_docstring
from citewise.retrieval.answering.evidence import Citations, Composed, Evidence
from citewise.retrieval.answering.model import AnswerBlock
from citewise.retrieval.answering.question import Question
from citewise.retrieval.search import SearchResult

# How far down the results a definition may sit and still be what the question is about.
CLOSEST = 5
# A part of a long function is shown up to this many lines.
MAX_CODE_LINES = 20


def closest_definition(ev: Evidence) -> SearchResult | None:
    """The best of the first results that holds a named definition (a function, a class)."""
    return next((r for r in ev.results[:CLOSEST] if r.symbol), None)


def shows_signature(hit: SearchResult) -> bool:
    """Whether the chunk begins its definition with a header that can be read as one.

    A later part of a split definition does not (the chunker marks it). ``continues_symbol``
    is None for points written before the chunker marked the parts of a
    split definition (an index built by an older version, or points rebuilt from the catalog,
    which does not keep the mark): the first line alone then decides, as it did before the
    mark existed, so answers from such an index do not change. A whole definition that opens
    with no header (a comment above it, a YAML key) has no signature to read either."""
    return not hit.continues_symbol and opens_definition(hit.text)


class CodeStrategy:
    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        hit = closest_definition(ev)
        if hit is None:
            return None
        language = (hit.metadata or {}).get("language")
        cites = Citations(ev)
        n = cites.cite(hit.document_id, hit.heading, hit.anchor, hit.start_line, hit.end_line,
                       hit.text, symbol=hit.symbol, score=hit.score)
        where = f"`{hit.path}`" + (f" (lines {hit.start_line}-{hit.end_line})"
                                   if hit.start_line else "")
        name = (hit.symbol or "").rsplit(" > ", 1)[-1]
        if shows_signature(hit):
            signature, doc = signature_and_docstring(hit.text)
            lead = f"`{name}` in {where}" + (f": {doc}" if doc else ".")
        else:
            lines = textwrap.dedent(hit.text.rstrip()).split("\n")
            signature = "\n".join(lines[:MAX_CODE_LINES])
            if len(lines) > MAX_CODE_LINES:
                signature += "\n..."
            lead = f"Part of `{name}` in {where}:"
        blocks = [AnswerBlock(type="paragraph", text=lead, citations=[n]),
                  AnswerBlock(type="code", language=language, text=signature, citations=[n])]
        score = ev.relevance.get(hit.chunk_id, hit.score)
        return Composed(blocks, cites.all(), score, [hit.document_id])
