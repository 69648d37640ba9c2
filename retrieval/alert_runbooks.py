"""An alert named in a question finds its own runbook first.

On-call engineers paste the alert's name as the payload shows it ("KubeletPlegDurationHigh -
what's the threshold"). Runbooks of sibling alerts share most of their words (the same
component, the same Meaning and Mitigation headings), and a sibling with more to say can
outscore the runbook the question names, in both the dense and the BM25 list. The answer then
cites another alert's procedure, the one thing an alert's name should never lead to. So when a
question names an alert and a runbook is named after it (its file name, its title or its top
heading is the alert's name), that runbook's passages go first. When the page holds none, one
more BM25 query for the name alone looks for it, with the same permission filter as every
query: a runbook the caller may not read is never found this way.

Only names written as alerts and metrics are (two or more capitals inside one word:
``KubePodCrashLooping``, ``etcdBackendQuotaLowSpace``); a plain word names no runbook.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from citewise.retrieval.search import SearchResult

# A word with two inner capitals or more: how alert and metric names are written.
ALERT_NAME = re.compile(r"(?<![\w/.-])[A-Za-z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*[a-z0-9]){2,}"
                        r"(?![\w/-])")
# How many passages the extra query for a named runbook reads.
LOOKUP_DEPTH = 10


def alert_names(query: str) -> list[str]:
    """The alert names a query writes, each once, in order."""
    return list(dict.fromkeys(m.group(0) for m in ALERT_NAME.finditer(query)))


def _plain(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def names_runbook(result: SearchResult, alert: str) -> bool:
    """Whether ``result`` is a passage of the runbook named after ``alert``: its file name,
    its title or its top heading is the alert's name."""
    name = _plain(alert)
    stem = (result.path or "").rsplit("/", 1)[-1].rsplit(".", 1)[0]
    top = (result.heading or "").split(" > ", 1)[0]
    return name in (_plain(stem), _plain(result.title or ""), _plain(top))


def runbooks_first(query: str, results: list[SearchResult],
                   lookup: Callable[[str], Sequence[SearchResult]]) -> list[SearchResult]:
    """``results`` with the passages of each named alert's runbook first (in the order the
    alerts are named, each runbook's passages in their own order). ``lookup(name)`` is the
    extra query for a runbook the page lacks."""
    alerts = alert_names(query)
    if not alerts:
        return results
    first: list[SearchResult] = []
    for alert in alerts:
        own = [r for r in results if names_runbook(r, alert)]
        if not own:
            own = [r for r in lookup(alert) if names_runbook(r, alert)]
        seen = {r.chunk_id for r in first}
        first.extend(r for r in own if r.chunk_id not in seen)
    if not first:
        return results
    ids = {r.chunk_id for r in first}
    return first + [r for r in results if r.chunk_id not in ids]
