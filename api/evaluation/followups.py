"""Follow-up questions: is the second turn of a conversation answered from the right document?

Each case is two turns (``demo/followups.jsonl``): a first question, then a follow-up that
leans on it ("how do I renew it?"). The second turn is answered twice: as asked (what citewise
did before conversations) and rewritten to stand alone by the rule of
``retrieval/answering/followup.py``. For each: the share of cases whose answer cites a relevant
document, whose first citation is relevant, and which carry the key fact.
"""

from __future__ import annotations

import json
from pathlib import Path

from citewise.api.evaluation.qa import doc_key, has_key_fact
from citewise.retrieval.answering.followup import Previous, standalone
from citewise.types import Identity


def load_followups(path: Path | str) -> list[dict]:
    cases = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            case = json.loads(line)
            if len(case.get("turns", [])) != 2 or not case.get("relevant"):
                raise ValueError(f"{path}:{n}: a case needs two turns and relevant documents")
            cases.append(case)
    return cases


def evaluate_followups(answers, cases: list[dict]) -> dict:
    rows = []
    for case in cases:
        first, follow_up = case["turns"]
        one = answers.answer(first, Identity(), use_cache=False)
        previous = Previous(first, one.citations[0].title if one.citations else None)
        rewritten, how = standalone(follow_up, previous)
        row = {"turns": case["turns"], "rewritten": rewritten, "how": how}
        for name, question in (("as_asked", follow_up), ("rewritten", rewritten)):
            a = answers.answer(question, Identity(), use_cache=False)
            keys = [doc_key(c.source, c.path, c.document_id) for c in a.citations]
            row[name] = {
                "cites_relevant": any(k in case["relevant"] for k in keys),
                "first_relevant": bool(keys) and keys[0] in case["relevant"],
                "key_fact": (not a.abstained and has_key_fact(a.answer, case["must_contain_any"])
                             if case.get("must_contain_any") else None),
                "abstained": a.abstained,
            }
        rows.append(row)

    def share(name: str, field: str) -> float:
        values = [r[name][field] for r in rows if r[name][field] is not None]
        return round(sum(values) / len(values), 3) if values else 0.0

    fields = ("cites_relevant", "first_relevant", "key_fact", "abstained")
    return {"cases": len(rows),
            "as_asked": {f: share("as_asked", f) for f in fields},
            "rewritten": {f: share("rewritten", f) for f in fields},
            "rows": rows}
