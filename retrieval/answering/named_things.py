"""The specific things a question names, and the kind of thing it asks for.

"What does `--force` do in the failover script", "which file lists the blocked IPs", "what's the
TTL of the ban key": each wants one line of a document (a flag's description, a path, a number),
whatever section the question's shape leads to. This module only reads the question; finding
the line is ``pinpoint.py``'s job.

A thing is named literally (a flag, a quoted phrase, a path or file name, a setting or
environment variable, an alert or metric name, a number with its unit, an acronym) or, for a
command, by a word the documents write as code (``gsutil``, ``sv restart``): that last kind can
only be told from the documents, so ``pinpoint.py`` finds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from citewise.index.sparse import tokenize
from citewise.language import function_word
from citewise.retrieval.answering.question import Question

# "--force", "-n": a dash that starts a word, never one inside it ("e-mail", "10-minute").
FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*\b")
# "`sv restart`", "\"compaction failed\"": what the question quotes is what it means literally.
QUOTED = re.compile(r"`([^`]{2,80})`|\"([^\"]{2,80})\"|“([^”]{2,80})”|(?<![\w'])'([^']{2,80})'"
                    r"(?![\w'])")
# A path or a file name: "/etc/haproxy/deny-403-ips.lst", "deny-403-ips.lst", "config.toml".
PATH = re.compile(r"(?<![\w/.~-])(?:~|\.{1,2})?/?[\w.-]+(?:/[\w.-]+)+/?|"
                  r"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,5}\b(?![/.]\w)")
# A setting, an environment variable or a config key: "MAX_CONNECTIONS", "cache_writes",
# "hostPrefix", "retention.ms".
KEY = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[a-z][a-z0-9]*_[a-z0-9_]+\b|"
                 r"\b[a-z]+[A-Z][A-Za-z0-9]*\b")
# An alert or a metric: CamelCase with two capitals or more (KubePodCrashLooping).
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+\b")
# A number, with its unit when it has one: "port 5432", "exit code 137", "90%", "30s".
NUMBER = re.compile(r"(?<![\w.:/-])\d+(?:[.,:]\d+)*(?:\s?(?:%|ms|s|sec|secs|m|min|mins|h|hr|hrs|"
                    r"d|gb|gib|mb|mib|kb|kib|tb|k)\b)?(?![\w.-]*\w)", re.I)
# An acronym the question uses as a term: "TTL", "WAL". Ordinary capitals are not terms.
ACRONYM = re.compile(r"\b[A-Z]{2,6}s?\b")
_COMMON_CAPS = frozenset({"I", "A", "OK", "IT", "US", "UK", "EU", "AM", "PM", "TV", "ID", "OR",
                          "AND", "THE", "FYI", "ASAP", "TL", "DR", "PLS", "PLZ", "RN", "IMO",
                          "WTF", "HOW", "WHAT", "WHY", "WHO", "NOW", "HELP", "URGENT"})
_NOT_FILES = frozenset({"e.g", "i.e", "etc", "vs"})

# The kind of thing asked for, when the question names none: "what flag skips ...", "which
# file lists ...", "what's the TTL ...", "what command ...". Each with what such a thing
# looks like in a document.
_ASKS = {
    # "flag" on its own asks for one too: "tsh login flag to request the read-only role".
    "flag": re.compile(r"\b(what|which)\s+(\w+\s+)?(option|switch|argument|parameter|"
                       r"param|arg)s?\b|\bflags?\b", re.I),
    "file": re.compile(r"\b(what|which)\s+(\w+\s+)?(file|path|directory|dir|folder)s?\b|"
                       r"\bwhere (is|are|do|does)\b.*\b(stored|kept|written|logged|listed|"
                       r"saved|configured|defined)\b|"
                       # "where do i bump the sshd limit": the file the change goes in
                       r"\bwhere (do|should|can) (i|we|you) (set|change|bump|raise|lower|edit|"
                       r"configure|put|add|update)\b|"
                       r"\bwhere('s| is| are)? (the )?(\w+ )?(file|path|config|log|list)s?\b",
                       re.I),
    "duration": re.compile(r"\bhow (long|often|soon|frequently|fast|quickly|far back)\b|"
                           r"\b(ttl|timeout|expiry|expiration|"
                           r"expires?|retention|interval|deadline|max age)\b", re.I),
    "number": re.compile(r"\bhow (many|much|big|large|fast)\b|\b(threshold|port|quota|limit|cap|"
                         r"max(imum)?|min(imum)?|percent(age)?|count)\b|%", re.I),
    "command": re.compile(r"\b(what|which)\s+(\w+\s+)?(command|cmd|script|cli|invocation|sql|"
                          r"query|statement)s?\b", re.I),
    # "which slack channel": a channel is written #name.
    "channel": re.compile(r"\b(what|which)\s+(\w+\s+)?channels?\b", re.I),
    "setting": re.compile(r"\b(what|which)\s+(\w+\s+)?(setting|variable|env var|env|key|"
                          r"label|annotation|field|parameter)s?\b|\b(knob|env var)s?\b|"
                          r"\bwhat (do|should|must) (i|we|you) (set|put|add|change)\b", re.I),
}
# What a thing of each kind looks like in a unit of a document.
LOOKS_LIKE = {
    "flag": FLAG,
    "file": re.compile(PATH.pattern),
    "duration": re.compile(r"(?<![\w.:/-])\d+(?:[.,]\d+)?\s?(?:ms|s|secs?|seconds?|m|mins?|"
                           r"minutes?|h|hrs?|hours?|d|days?|weeks?|months?|y|yrs?|years?)\b|"
                           r"\bhalf an? (?:hour|day|minute)\b|"
                           r"\b(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|twelve|"
                           r"fifteen|thirty|sixty|a few|several) (?:seconds?|minutes?|hours?|"
                           r"days?|(?:business |working )?days|weeks?|months?|years?)\b|"
                           r"\b(?:hourly|daily|weekly|monthly|nightly|yearly|annually)\b", re.I),
    # A value, not a digit inside a name ("user:123", "fe-01", "v2").
    "number": re.compile(r"(?<![\w.:/<-])\d+(?:[.,:]\d+)*(?![\w:/>-]*[A-Za-z]\d|[\w:/>-]*[:/>])"),
    "command": re.compile(r"`[^`]{3,}`"),
    "channel": re.compile(r"(?<![\w&#])#[a-z0-9][\w-]{2,}", re.I),
    "setting": re.compile(KEY.pattern + r"|`[^`]{3,}`"),
}


# A number set against another, which is a threshold wherever it is written: "count >= 200"
# in a rule, "above 90%", "more than 5 restarts", a shell test's "-gt 3". Not an arrow ("->1",
# "=> 3"), a tag's end ("<br>2") or a port mapping ("8080->80").
_COMPARED = re.compile(r"(?<![-=<>\w])[<>]=?\s*\d|[≥≤]\s*\d|(?<!\w)-(?:gt|ge|lt|le)\s+\d|"
                       r"\b(?:above|below|exceeds?|exceeding|more than|less than|fewer than|"
                       r"at least|at most|greater than)\s+\d", re.I)
# Inline code in a text: "`sv restart`" (its content is group 1).
CODE_SPAN = re.compile(r"`([^`]+)`")
# A fenced code block of Markdown, fences included.
_FENCED = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)


def _span_value(m: re.Match[str]) -> str:
    """A code span kept when it is a value on its own ("`6432`", "`30s`"), else blanked: the
    numbers of an expression are its arguments ("`topk(5, x)`")."""
    inner = m.group(1).strip()
    return inner if NUMBER.fullmatch(inner) else " "


def looks_like(kind: str, prose: str, code: str = "") -> bool:
    """Whether a text holds a thing of ``kind`` ("number", "command"...): ``prose`` is its
    text, ``code`` its code (a block, an item's commands). A number in code is an argument
    ("== 1", "topk(5, ...)"), not a value, unless it is compared against ("count >= 200")."""
    if kind == "command" and code.strip():
        return True
    if kind != "number":
        return bool(LOOKS_LIKE[kind].search(f"{prose}\n{code}"))
    return bool(_COMPARED.search(f"{prose}\n{code}")
                or LOOKS_LIKE["number"].search(CODE_SPAN.sub(_span_value, prose)))


@dataclass(frozen=True)
class NamedThing:
    text: str  # as the question writes it
    kind: str  # flag | quoted | path | key | alert | number | acronym | command

    def pattern(self) -> re.Pattern[str]:
        """The thing as a whole word of a document's text, case aside: "--force" is not
        "--force-delete", "5432" is not "15432"."""
        return re.compile(r"(?<![\w-])" + re.escape(self.text) + r"(?![\w-]*\w)", re.I)


def named_things(q: Question) -> list[NamedThing]:
    """What the question names literally, longest first within a kind, each once."""
    text = q.text
    found: list[NamedThing] = []

    def add(value: str, kind: str) -> None:
        value = value.strip().strip(".,;:?!()[]")
        if len(value) < 2 or any(value.lower() == t.text.lower() for t in found):
            return
        found.append(NamedThing(value, kind))

    for m in QUOTED.finditer(text):
        add(next(g for g in m.groups() if g), "quoted")
    for m in FLAG.finditer(text):
        add(m.group(0), "flag")
    for m in PATH.finditer(text):
        if m.group(0).lower().rstrip(".") not in _NOT_FILES:
            add(m.group(0), "path")
    for m in KEY.finditer(text):
        add(m.group(0), "key")
    for name in [*q.alerts, *(w for w in CAMEL.findall(text) if sum(c.isupper() for c in w) >= 2)]:
        add(name, "alert")
    for m in NUMBER.finditer(text):
        add(m.group(0), "number")
    for m in ACRONYM.finditer(text):
        if m.group(0).rstrip("s") not in _COMMON_CAPS and m.group(0) not in _COMMON_CAPS:
            add(m.group(0).rstrip("s") if m.group(0).endswith("s") and len(m.group(0)) > 2
                else m.group(0), "acronym")
    # A thing inside another thing ("5432" of "db-1:5432") is named by the longer one.
    return [t for t in found if not any(t is not o and t.text.lower() in o.text.lower()
                                        and len(o.text) > len(t.text) for o in found)]


def asked_kinds(q: Question) -> list[str]:
    """The kinds of thing the question asks for ("what flag": flag), in the order above."""
    return [kind for kind, cue in _ASKS.items() if cue.search(q.text)]


def asking_words(q: Question) -> set[str]:
    """The words that ask for a kind ("what sql": what, sql): they name no thing of their own,
    though the documents may write "sql" as code."""
    return {w.lower() for cue in _ASKS.values() for m in cue.finditer(q.text)
            for w in re.findall(r"[\w.-]+", m.group(0))}


# A value asked for in a unit ("how many seconds", "size in GB", "at what %"): the answer must
# state one of that dimension. Each: how the question asks, and how a value looks.
# "In <unit>" asks only beside a word that asks for a value ("threshold in seconds", "size in
# GB"); "the credentials lapse in days" asks for none.
_VALUE_CUE = re.compile(r"\b(what|which|threshold|size|limit|quota|default|max(imum)?|"
                        r"min(imum)?|timeout|how (long|much|big|large))\b", re.I)
_TIME_UNITS = (r"(ms|milliseconds?|seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|"
               r"months?|years?)")
_SIZE_UNITS = r"(bytes|kb|kib|mb|mib|gb|gib|tb|tib)"
_MONTHS = (r"(jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|"
           r"sep(tember)?|oct(ober)?|nov(ember)?|dec(ember)?)")
_DATE = (rf"\b\d{{1,2}}(st|nd|rd|th)?\s+{_MONTHS}\b|\b{_MONTHS}\s+\d{{1,2}}(st|nd|rd|th)?\b|"
         r"\b\d{4}-\d{2}-\d{2}\b")
# Money asked for: "how much extra do we get paid", "how much is the on-call stipend". Only
# with "how much", since the words also name other things ("the compensation step of a saga",
# "a storage allowance"), and not a pay or payment service ("how much traffic can the payment
# service take"). A cost is left out: "how much CPU does a retry cost" asks for none.
_MONEY_WORDS = r"(paid|pay|payment|stipends?|salary|salaries|per diem|reimbursed|reimbursement)"
_MONEY_ASKS = (rf"\bhow much\b(?:\W+(?!attention\b)\w+){{0,5}}?\W+{_MONEY_WORDS}"
               # The money word ends the phrase: "paid per week", "the stipend?", not "the
               # payment queue", "the salary export job", "pay attention to".
               r"(?=\s*($|[?.,!;:)]|\s(for|per|on|to|if|when|during|each|every|a|an|the|we|i|"
               r"you|in|at|while|after|before|this|that|extra|more|weekly|monthly)\b))")
# An amount: a currency's sign or code beside a number ("£50", "US$1,000", "$10k", "100 USD",
# "50€"). Read in prose only (``states_value``): "$1" in a shell command is no amount.
_AMOUNT = (r"[$£€¥]\s?\d[\d,.]*[km]?\b|\b\d[\d,.]*\s?[km]?\s?(usd|eur|gbp|dollars?|pounds?|"
           r"euros?)\b|\b(usd|eur|gbp)\s?\d|\d[\d,.]*\s?[€£]")
_COUNT_WORDS = "(one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|thirty)"
_DIMENSIONS = {
    # A date answers "how many days ahead" as well ("by 1 December").
    # "number of (consecutive) weeks" is answered by "3 consecutive weeks" too.
    "time": (re.compile(rf"\bhow many\s+{_TIME_UNITS}\b|\bin\s+{_TIME_UNITS}\b|"
                        rf"\bnumber of\s+([\w-]+\s+)?{_TIME_UNITS}(?![\w-])", re.I),
             re.compile(LOOKS_LIKE["duration"].pattern + "|" + _DATE + "|"
                        + rf"(?<![\w.:/-])(\d+|{_COUNT_WORDS})\s+[a-z-]+\s+{_TIME_UNITS}\b",
                        re.I)),
    "size": (re.compile(rf"\bhow many\s+{_SIZE_UNITS}\b|\bin\s+{_SIZE_UNITS}\b", re.I),
             re.compile(r"\d+(?:[.,]\d+)?\s?(?:bytes?|[kmgt]i?b)\b", re.I)),
    "percent": (re.compile(r"\b(what|which)\s*(%|percent(age)?)|\bwhat\s*%|\bin percent\b",
                           re.I),
                re.compile(r"\d+(?:[.,]\d+)?\s?%|\b\d+(?:[.,]\d+)?\s?percent\b", re.I)),
    "money": (re.compile(_MONEY_ASKS, re.I), re.compile(_AMOUNT, re.I)),
}


def asked_unit(q: Question) -> tuple[str, str] | None:
    """The dimension of a value the question asks for in a unit, with the words that ask
    ("how many seconds": time), or None."""
    for dimension, (asks, _) in _DIMENSIONS.items():
        m = asks.search(q.text)
        if m and (not m.group(0).lower().startswith("in") or _VALUE_CUE.search(q.text)):
            return dimension, m.group(0)
    return None


def states_value(dimension: str, text: str) -> bool:
    """Whether ``text`` states a value of ``dimension`` ("15 minutes", "8 GiB", "90%"): a
    placeholder ("XX seconds") or the unit alone ("a measure, in seconds") does not. An amount
    of money is read outside code ("cp $1 $2" names arguments); a timeout in a YAML block is a
    value."""
    if dimension == "money":
        text = CODE_SPAN.sub(" ", _FENCED.sub(" ", text))
    return bool(_DIMENSIONS[dimension][1].search(text))


# Words that ask for a value or name its unit, as BM25 terms: never what the value is of.
_ASKING_VALUE = frozenset(tokenize(
    "how much many long what which number extra get got give given do does did we i you is are "
    "there per percent percentage money amount size time value "
    + re.sub(r"[^a-z ]", " ", f"{_TIME_UNITS} {_SIZE_UNITS} {_MONEY_WORDS}")))


def value_subject(q: Question) -> set[str]:
    """What a value asked for is of, as BM25 terms: "bank" and "holiday" in "how much are we
    paid for working a bank holiday". The question's terms less those that ask for a value or
    name its unit, and less function words ("on" of "on-call", "during"; read before stemming,
    which makes "during" "dure"); empty when nothing is left."""
    words = " ".join(w for w in re.findall(r"[\w-]+", q.text) if not function_word(w))
    return set(tokenize(words)) - _ASKING_VALUE
