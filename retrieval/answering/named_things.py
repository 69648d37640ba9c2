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
    "flag": re.compile(r"\b(what|which)\s+(\w+\s+)?(flag|option|switch|argument|parameter|"
                       r"param|arg)s?\b", re.I),
    "file": re.compile(r"\b(what|which)\s+(\w+\s+)?(file|path|directory|dir|folder)s?\b|"
                       r"\bwhere (is|are|do|does)\b.*\b(stored|kept|written|logged|listed|"
                       r"saved|configured|defined)\b|"
                       r"\bwhere('s| is| are)? (the )?(\w+ )?(file|path|config|log|list)s?\b",
                       re.I),
    "duration": re.compile(r"\bhow (long|often|soon|frequently)\b|\b(ttl|timeout|expiry|expiration|"
                           r"expires?|retention|interval|deadline|max age)\b", re.I),
    "number": re.compile(r"\bhow (many|much|big|large|fast)\b|\b(threshold|port|quota|limit|cap|"
                         r"max(imum)?|min(imum)?|percent(age)?)\b|%", re.I),
    "command": re.compile(r"\b(what|which)\s+(\w+\s+)?(command|cmd|script|cli|invocation)s?\b",
                          re.I),
    "setting": re.compile(r"\b(what|which)\s+(\w+\s+)?(setting|variable|env var|env|key|"
                          r"label|annotation|field|parameter)s?\b", re.I),
}
# What a thing of each kind looks like in a unit of a document.
LOOKS_LIKE = {
    "flag": FLAG,
    "file": re.compile(PATH.pattern),
    "duration": re.compile(r"(?<![\w.:/-])\d+(?:[.,]\d+)?\s?(?:ms|s|secs?|seconds?|m|mins?|"
                           r"minutes?|h|hrs?|hours?|d|days?|weeks?|months?)\b|\b(?:an?|one) "
                           r"(?:second|minute|hour|day|week|month)\b|\b(?:hourly|daily|weekly|"
                           r"monthly|nightly)\b", re.I),
    # A value, not a digit inside a name ("user:123", "fe-01", "v2").
    "number": re.compile(r"(?<![\w.:/<-])\d+(?:[.,:]\d+)*(?![\w:/>-]*[A-Za-z]\d|[\w:/>-]*[:/>])"),
    "command": re.compile(r"`[^`]{3,}`"),
    "setting": re.compile(KEY.pattern + r"|`[^`]{3,}`"),
}


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
