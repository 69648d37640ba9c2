"""What a question asks for: steps, a fact, a function, a definition. And what it is about.

The shape decides the unit of the answer: "what do I do when X fires" wants the runbook's steps
whole and in order, "who owns the search service" wants an owner (a front-matter field, or a
table row with its headers), "which function refuses ..." wants a function's signature. The
names in a question (an alert, a product, an identifier) decide whether the evidence is about it
at all: a question about a database the knowledge base never mentions must not be answered from
the runbook of another database, however similar the wording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ACTION = re.compile(
    r"\b(what (do|should|can|must) (i|we|you) do|what now|how (do|can|should|would|to) "
    r"(i |we |you )?|how to|what'?s the (fix|procedure|process|workaround)|fix|fixing|mitigat\w*|"
    r"resolv\w*|recover\w*|restor\w*|roll ?back|revert|fail ?over|failover|rotate|restart|"
    r"drain|unblock|remediat\w*|steps?|procedure|get rid of|clean ?up|free up|bring back|"
    r"recreate|renew|replace|scale|unstick|deal with|handle|respond|cmd|command|"
    r"where (do|should|can) (i|we) (start|begin|look)|where to (start|begin|look))\b|"
    r"\bhow\s*\??\s*$", re.I)
CODE = re.compile(
    r"\b((which|what) (function|method|class|module|file|code)|where (in the code|is .+ "
    r"(implemented|defined|computed|derived|handled))|in the code(base)?|source code|"
    r"implemented|which (function|method))\b", re.I)
_PREP = r"(?:(?:at|in|on|for|by|to|from|with|of|under|after|before) )?"
FACT = re.compile(
    r"^\s*" + _PREP + r"(who|whom|which|"
    r"how (long|many|much|often|big|old|soon|fast|large|frequently|far back)|when|where|"
    r"what('s| is| are| was)? (the )?(owner|port|threshold|limit|timeout|value|"
    r"version|name|channel|team|size|url|address|metric|retention|schedule|window|"
    r"default|maximum|max|minimum|min|interval|quota|rate|sla|slo|target|number|path|"
    r"endpoint|label|namespace|region|severity|tier|budget|cap|percentage)\b|"
    # "what expiry do we set", "what mode should the files have": a noun asked about
    r"what (?!steps?\b|procedure\b|process\b|else\b|now\b|happens\b)([a-z/-]+|%) "
    r"(do|does|did|should|must|is|are|was|will|would|can) |"
    # "what tool takes the snapshots", "what channel tells me": the thing is the answer
    r"what (tool|team|service|command|script|file|metric|channel|person|role|job|dashboard|"
    r"repo|repository|bucket|project|cluster|database|table|flag|setting|option|host|url|"
    r"endpoint|email|address|alias|group) )", re.I)
# "how do I see who is on call": the way to look a fact up is asked for, and the fact is wanted.
LOOKUP = re.compile(r"\bhow (do|can|would) (i|we|you) (see|find( out)?|check|know|tell|look up|"
                    r"get|learn) (who|whom|which|when|how (many|long|much|often))\b", re.I)
# A noun phrase asked about: "default pod cap per kubelet?", "latest time i can ship".
FACT_PHRASE = re.compile(
    r"^\s*(the )?(latest|earliest|current|default|usual|normal|max(imum)?|min(imum)?|"
    r"port|owner|sla|slo|threshold|limit|quota|timeout|expiry|retention|deadline|"
    r"cutoff|value|values)\b", re.I)
DEFINITION = re.compile(
    r"^\s*(what('s|’s| is| are) the (point|purpose|use|job|role) of\b|"
    r"what( is| are|'s|’s) (a |an |the )?|what does .+ (mean|stand for|do)\b|define |"
    r"meaning of |explain )", re.I)
# Why something happened: a postmortem's Root cause, a runbook's Possible causes. Only as
# asked ("why did", "what caused", "root cause"); "X fails because Y" states a cause and asks
# what to do about it.
CAUSE = re.compile(r"^\s*why\b|\b(root[ -]?causes?|what caused|cause of|causes of|reason (for|why)|"
                   r"what went wrong|how did .+ happen)\b", re.I)
YESNO = re.compile(r"^\s*(is|are|does|do|can|should|will|has|have|was|were|did|may)\b", re.I)
# A question that starts like one; a statement of trouble ("Builds wait ages...") does not, and
# is a request for what to do about it.
ASKING = re.compile(r"^\s*" + _PREP + r"(who|whom|whose|what|which|when|where|why|how|is|"
                    r"are|does|do|did|can|could|should|would|will|has|have|was|were|may|might|must|shall|define|"
                    r"explain|tell|show|list|give)\b", re.I)
# An alert name: CamelCase with at least three capitals (KubePodCrashLooping, TargetDown is
# two: also accepted when the question says "alert" or "fires").
_CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*){1,}\b")
_ALERT_WORDS = re.compile(r"\b(alert|alerts|fires|fired|firing|paged|pages|page)\b", re.I)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*[A-Za-z0-9]|[A-Za-z0-9]")
FACT_LABELS = {
    "owner": ("who owns", "owner", "owns", "owned", "responsible", "which team", "what team"),
    "channel": ("channel", "slack"),
    "port": ("port",),
    "severity": ("severity", "how bad", "how urgent"),
}


_COMMON_CAPS = frozenset({"I", "A", "OK", "IT", "US", "UK", "EU", "AM", "PM", "TV", "ID", "OR",
                          "AND", "THE", "FYI", "ASAP", "TL", "DR"})


@dataclass
class Question:
    text: str
    kind: str  # action | alert | fact | code | cause | definition | yesno | general
    alerts: list[str] = field(default_factory=list)
    # Name-like words (identifiers, CamelCase, capitalised mid-sentence, with digits or
    # dots): what the question is specifically about.
    names: list[str] = field(default_factory=list)
    fact_label: str | None = None  # owner, channel, port, severity: a field or column to show
    # What its shorthand stands for ("bounce" -> restart, "pg" -> postgres): words a passage
    # may use for what the question says (see ``retrieval/synonyms.py``).
    synonyms: list[str] = field(default_factory=list)

    @property
    def words(self) -> str:
        """The question's text with its synonyms: what passages are matched against."""
        return f"{self.text} {' '.join(self.synonyms)}" if self.synonyms else self.text

    @property
    def wants_steps(self) -> bool:
        return self.kind in ("action", "alert")


VALUE_OF = re.compile(r"^\s*what('s| is| are) (a |an |the )?(normal|typical|usual|default|"
                      r"expected|good|healthy|current|recommended|maximum|minimum)\b", re.I)


# Where one clause of a question ends and the next begins: punctuation, or a dash between words.
_CLAUSE_BREAK = re.compile(r"[,;:?]\s*|\s+-+\s+")


def _clauses(text: str) -> list[str]:
    """The question and its clauses: "If the pager is ignored, who is woken up?" asks who."""
    return [text, *(c for c in _CLAUSE_BREAK.split(text)[1:] if c.strip())]


def defining_clause(text: str) -> str | None:
    """The clause that asks for a definition, when the question says more than that: "what is
    kubemacpool for? it's down and vms won't create" defines by its first clause; the second
    describes the trouble, and matching it would pick the runbook's Impact, not its Meaning."""
    parts = [p.strip() for p in _CLAUSE_BREAK.split(text) if p.strip()]
    if len(parts) < 2:
        return None
    # Only a clause that names what it asks about: in "es cluster health yellow, what does
    # that mean" the subject is in the other clause, and the whole question is the better match.
    return next((p for p in parts if DEFINITION.search(p)
                 and set(re.findall(r"[a-z0-9][a-z0-9_.-]*", p.lower())) - _NAMES_NOTHING), None)


# The words of a defining clause that names nothing: "what does that mean (for us)".
_NAMES_NOTHING = frozenset("""what whats what's is are was were does do did mean means meaning
stand for of the a an and that this it its they them those these one point purpose use job
role define explain us me here there exactly again then so""".split())


def analyse(text: str) -> Question:
    text = (text or "").strip()
    camel = [w for w in _CAMEL.findall(text) if sum(c.isupper() for c in w) >= 2]
    alerts = [w for w in camel if sum(c.isupper() for c in w) >= 3 or _ALERT_WORDS.search(text)]
    clauses = _clauses(text)
    asking = any(ASKING.search(c) for c in clauses)
    if CODE.search(text):
        kind = "code"
    elif alerts:
        kind = "alert"
    elif re.search(r"\b(cmd|command|where (do|should|can) (i|we) (start|begin|look)|"
                   r"where to (start|begin|look))\b", text, re.I):
        kind = "action"  # the command to run, the place to start: steps
    elif LOOKUP.search(text) or FACT_PHRASE.search(text) or any(
            FACT.search(c) or VALUE_OF.search(c) for c in clauses) and not re.match(
            r"^\s*how (do|can|should|to)\b", text, re.I):
        kind = "fact"
    elif not asking and text.rstrip().endswith("?") and not ACTION.search(text):
        kind = "fact"  # a noun phrase asked about: "sshd MaxStartups values on the fe nodes?"
    elif ACTION.search(text) or not asking:
        kind = "action"
    elif CAUSE.search(text):
        kind = "cause"
    elif any(DEFINITION.search(c) for c in clauses):
        kind = "definition"
    elif YESNO.search(text):
        kind = "yesno"
    else:
        kind = "general"
    low = text.lower()
    label = next((name for name, cues in FACT_LABELS.items() if any(c in low for c in cues)),
                 None)
    return Question(text=text, kind=kind, alerts=alerts, names=names_in(text),
                    fact_label=label)


def names_in(text: str) -> list[str]:
    """Words that name something: not English, but an identifier, a product, an alert."""
    out = []
    words = _WORD.findall(text)
    for i, w in enumerate(words):
        bare = w.strip("._/-")
        if len(bare) < 2:
            continue
        name_like = (
            any(c.isdigit() for c in bare) and any(c.isalpha() for c in bare)
            or any(c in bare for c in "._/-") and len(bare) > 3
            or sum(c.isupper() for c in bare) >= 2 and not bare.isupper()
            or bare.isupper() and bare not in _COMMON_CAPS
            or (i > 0 and bare[0].isupper() and bare[1:].islower() and len(bare) > 2)
        )
        if name_like and bare not in out:
            out.append(bare)
    return out
