"""Where a text says that two names mean one thing: the patterns the vocabulary miner reads.

A mined synonym is added to every question that uses one of its words, so a wrong one is noise
in every such search: each pattern here is written to miss rather than to guess. What counts:

* an acronym after its long form, where the long form's initials spell it: "incident commander
  (IC)", "Single Source of Truth (SSOT)", "PagerDuty (PD)" (a CamelCase word gives its parts),
  "GitLab Kubernetes Agent Server (`kas`)"; or before it: "IC (incident commander)";
* an alias said as one: "GitLab.com (also called dotcom)", "X, also known as Y", "X (a.k.a. Y)";
* a definition item or table row whose term is an acronym its meaning spells out ("SRE: Site
  Reliability Engineering"), a term written as two names ("Sourcegraph.com / "dotcom""), and,
  in a table whose header says Term | Meaning only, a term whose meaning is a short name;
* a candidate code name: a lowercase name in parentheses after a longer one ("staging
  (`gstg`)"), which the miner keeps only when one side is a service's name and the two are
  seen together in several documents (``vocabulary_mining``).

Not: "(see below)", "(optional)", "(2019)", "(e.g. Ruby)", parenthesised words whose initials do
not spell the acronym, an alias that is a clause ("aka it impacts their work").

Text is the outline's (``index/outline.py``): links read as their text, emphasis dropped, code
kept in backticks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from citewise.index.sparse import STOPWORDS

# What each kind of entry is, for the file and the summary (docs/quality.md lists them too).
KINDS = {
    "acronym": "a long form followed or preceded by its acronym in parentheses",
    "alias": "an alias said as one (also called, also known as, a.k.a.)",
    "heading": "an acronym expanded in a title or heading",
    "glossary": "a definition item or a term | meaning table row",
    "front_matter": "a document's front matter (aliases, aka; a tag its title spells)",
    "code_name": "a code name beside a service's name, seen together in several documents",
}


@dataclass(frozen=True)
class Found:
    """Two names for one thing, as one sentence says it."""

    terms: tuple[str, str]  # as written (cleaned of Markdown): the short name or alias first
    kind: str
    sentence: str


# Words an acronym's letters may skip ("Single Source of Truth" -> SSOT), or use ("DoD").
_MINOR = frozenset("of and the for to in on a an with by at or & via".split())
_PRONOUNS = frozenset("it its they them this that these those we you he she i there".split())
# Words a name does not start or end with: where the noun phrase before a parenthesis stops.
_NOT_NAME = STOPWORDS | _PRONOUNS | frozenset(
    """more most one some all any each other such using use used via like also e.g. i.e. etc
    sometimes often usually always never may might must should could would itself themselves
    himself herself yourself ourselves multiple several many various few
    see per not no only just very its than both either neither about after before over under
    between through during without within above below up down out off here""".split())
_ALIAS_MARKER = (r"also\s+called|also\s+known\s+as|also\s+referred\s+to\s+as|"
                 r"a\.k\.a\.?|aka\.?|sometimes\s+called|otherwise\s+known\s+as")
# "aka, minor issues" is an aside, not a name: no comma after the marker.
_PAREN_ALIAS = re.compile(rf"^(?:{_ALIAS_MARKER}):?\s+(?P<y>.+)$", re.IGNORECASE)
_INLINE_ALIAS = re.compile(rf"(?P<pre>.*?),?\s+(?:is\s+|are\s+)?(?:{_ALIAS_MARKER}):?\s+"
                           r"(?P<y>[^,;:()]+)", re.IGNORECASE)
_PAREN = re.compile(r"\(([^()]{1,80})\)")
_ACRONYM = re.compile(r"[A-Z][A-Za-z&]{1,7}")
_CODE_NAME = re.compile(r"[a-z][a-z0-9-]{1,23}")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'`(\[])")
_CLOSES = re.compile(r"[,;:.!?]$")
_QUOTES = "\"'`“”‘’*_"
_TWO_NAMES = re.compile(r"^(?P<a>[^/\"“]{2,40}?)\s*/\s*[\"“](?P<b>[^\"”]{2,40})[\"”]$")
_DEFINITION = re.compile(r"^(?P<t>[^:]{1,40}?)\s*(?::|\s[-–—]\s)\s*(?P<d>.+)$")
_FIRST_CLAUSE = re.compile(r"[;:(—–]|\.\s|\.$|\s-\s|,\s")
_TERM_HEADERS = frozenset({"term", "acronym", "abbreviation", "alias", "codename", "short name",
                           "code name"})
_MEANING_HEADERS = frozenset({"meaning", "definition", "description", "stands for",
                              "expansion", "full name", "long form", "what it is", "means"})


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (a paragraph, an item: the outline's units)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _bare(word: str) -> str:
    return word.strip(_QUOTES)


def acronym_spellings(short: str, *, code: bool = False) -> list[str]:
    """The letters an acronym may stand for, in the order tried ("PoC": poc, then pc; "SLOs":
    slo). ``code``: it was written in backticks, where a lowercase one is usual (`kas`)."""
    if code and re.fullmatch(r"[a-z]{2,6}", short):
        return [short]
    if not _ACRONYM.fullmatch(short) or sum(c.isupper() for c in short) < 2:
        return []
    base = short[:-1] if short.endswith("s") and short[:-1].isupper() else short
    out = [base.lower()]
    capitals = "".join(c for c in base if c.isupper()).lower()
    if capitals != out[0] and len(capitals) >= 2:
        out.append(capitals)
    return out


def _initials(word: str) -> set[str]:
    """What one word may give an acronym: its first letter, or the first letters of its
    hyphenated or CamelCase parts ("on-call" -> oc, "PagerDuty" -> pd)."""
    out = {word[0].lower()}
    for parts in (re.split(r"[-/]", word), _CAMEL.findall(word)):
        parts = [p for p in parts if p]
        if len(parts) > 1:
            out.add("".join(p[0] for p in parts).lower())
    return out


def spells(letters: str, words: list[str]) -> bool:
    """Whether ``words``, in order, give exactly ``letters``: every word that is not a minor one
    gives its initials, a minor one ("of", "and") may give its first letter or nothing."""
    if not words or words[0].lower() in _MINOR or words[-1].lower() in _MINOR:
        return False

    def match(i: int, j: int) -> bool:
        if i == len(words):
            return j == len(letters)
        word = words[i]
        if not word[0].isalnum():
            return False
        if word.lower() in _MINOR and match(i + 1, j):
            return True
        return any(letters.startswith(o, j) and match(i + 1, j + len(o)) for o in _initials(word))

    return match(0, 0)


def _long_form_before(letters: str, before: list[str]) -> list[str] | None:
    """The fewest words at the end of ``before`` that spell ``letters``, not reaching over a
    comma, a colon or the end of a sentence."""
    for k in range(1, min(len(letters) + 3, len(before)) + 1):
        span = [_bare(w) for w in before[-k:]]
        if any(not w or any(c in w for c in "()[]<>|=#") for w in span):
            return None
        if k > 1 and _CLOSES.search(before[-k]):
            return None  # the span would reach back over a comma or a sentence's end
        if spells(letters, span):
            return span
    return None


def _name_before(before: list[str]) -> str | None:
    """The noun phrase that ends ``before`` (up to four words, stopping at a stop word or
    punctuation), or None when it is longer, absent, or Markdown debris."""
    out: list[str] = []
    for i, raw in enumerate(reversed(before)):
        if i > 0 and _CLOSES.search(raw):
            break
        word = _bare(raw.rstrip(",")) if i == 0 else _bare(raw)
        if not any(c.isalnum() for c in word) or re.split(r"['’]", word.lower())[0] in _NOT_NAME \
                or any(c in word for c in "[]()<>|=#"):
            break
        out.append(word)
        if len(out) > 4:
            return None
    if not out:
        return None
    return " ".join(reversed(out))


def _alias_names(text: str) -> list[str]:
    """The names an alias clause gives ("dotcom or .com", "the draft stack"), or none when it
    reads as a clause rather than a name."""
    out = []
    if re.search(r"\sand\s", text):
        return []  # "job grades and classifications": two names, or one? Neither is kept.
    for part in re.split(r"\s+or\s+|,\s*", text.strip().rstrip(".")):
        words = [_bare(_bare(w).rstrip(".,;:!?")) for w in part.split()]
        words = [w for w in words if w]
        while words and words[0].lower() in ("a", "an", "the"):
            words = words[1:]
        if not words or len(words) > 4 or words[0].lower() in _NOT_NAME:
            return []
        if words[-1].lower() in _NOT_NAME or any(w.isdigit() for w in words):
            return []
        if any(c in " ".join(words) for c in "[]()<>|=#"):
            return []
        out.append(" ".join(words))
    return out


def _usable(a: str, b: str) -> bool:
    la, lb = a.lower(), b.lower()
    return len(la) >= 2 and len(lb) >= 2 and la != lb and la not in STOPWORDS \
        and lb not in STOPWORDS and not la.isdigit() and not lb.isdigit()


def in_sentence(sentence: str, *, heading: bool = False) -> list[Found]:
    """Every pair of names ``sentence`` defines (``heading``: it is a title or heading)."""
    found: list[Found] = []
    acronym_kind = "heading" if heading else "acronym"

    def add(a: str, b: str, kind: str) -> None:
        if _usable(a, b):
            found.append(Found((a, b), kind, sentence))

    for m in _PAREN.finditer(sentence):
        inside = m.group(1).strip()
        before = sentence[:m.start()].split()
        if not before:
            continue
        alias = _PAREN_ALIAS.match(inside)
        if alias:
            name = _name_before(before)
            if name:
                for other in _alias_names(alias.group("y")):
                    add(other, name, "alias")
            continue
        code = inside.startswith("`") and inside.endswith("`")
        short = _bare(inside.removeprefix("the ").strip())
        spellings = acronym_spellings(short, code=code) if " " not in short else []
        spelled = next((span for letters in spellings
                        if (span := _long_form_before(letters, before))), None)
        if spelled:
            add(short, " ".join(spelled), acronym_kind)
            continue
        # SHORT (long form): the word before the parenthesis is the acronym.
        last = _bare(before[-1])
        words = [_bare(w) for w in inside.split()]
        if 1 <= len(words) <= 8 and all(words) and not _CLOSES.search(before[-1]):
            if any(spells(letters, words) for letters in acronym_spellings(last)):
                add(last, " ".join(words), acronym_kind)
                continue
        # A candidate code name: the miner decides (a service's name, seen together often).
        if not heading and code and _CODE_NAME.fullmatch(short):
            name = _name_before(before)
            if name and name.lower() != short:
                add(short, name, "code_name")
    if not any(f.kind == "alias" for f in found):
        for m in _INLINE_ALIAS.finditer(sentence):
            name = _name_before(m.group("pre").split())
            if name:
                for other in _alias_names(m.group("y")):
                    add(other, name, "alias")
    return found


def in_definition(text: str) -> list[Found]:
    """A definition item whose term is an acronym its meaning spells ("SRE: Site Reliability
    Engineering") or two names ("Sourcegraph.com / "dotcom": the public instance"). A term
    defined by a short phrase is not taken from a list item, even on a glossary page: a style
    guide's "Sourcegraph: Main product." is a description, not another name."""
    m = _DEFINITION.match(text.strip())
    if not m:
        return []
    return in_term(m.group("t"), m.group("d"), text, glossary=False)


def in_term(term: str, meaning: str, sentence: str, *, glossary: bool) -> list[Found]:
    """A term and what it means (a definition item, a table row); ``glossary``: a table whose
    header names a term column, where a meaning that is a short name counts too."""
    term = term.strip().strip("*_` ")
    two = _TWO_NAMES.match(term)
    if two:
        a, b = _bare(two.group("a").strip()), _bare(two.group("b").strip())
        return [Found((b, a), "glossary", sentence)] if _usable(a, b) else []
    clause = _FIRST_CLAUSE.split(meaning.strip(), maxsplit=1)[0]
    words = [_bare(w) for w in clause.split()]
    words = [w for w in words if w]
    term = _bare(term)
    if not words or len(term.split()) > 3 or any(c in term for c in "()[]<>|=#/"):
        return []
    if meaning.lstrip().lower().startswith(("http://", "https://", "<http")):
        return []
    for letters in acronym_spellings(term):
        for k in range(1, min(len(letters) + 3, len(words)) + 1):
            if spells(letters, words[:k]):
                long = " ".join(words[:k])
                return [Found((term, long), "glossary", sentence)] if _usable(term, long) else []
    if glossary and len(words) <= 3 and words[0].lower() not in _NOT_NAME \
            and words[-1].lower() not in _NOT_NAME and not acronym_spellings(term):
        name = " ".join(words)
        if _usable(term, name) and not any(c in name for c in "[]()<>|=#/"):
            return [Found((term, name), "glossary", sentence)]
    return []


def in_table(header: list[str], rows: list[list[str]]) -> list[Found]:
    """A table with a meaning column (Meaning, Definition, Stands for...): an acronym in its
    first column that the meaning spells; when the first column's header says it holds terms
    (Term, Acronym, Alias, Code name), a short name as the meaning too."""
    names = [h.strip().lower() for h in header]
    meaning = next((i for i, h in enumerate(names) if h in _MEANING_HEADERS), None)
    if meaning is None or meaning == 0:
        return []
    a_glossary = names[0] in _TERM_HEADERS
    found = []
    for row in rows:
        if len(row) > meaning and row[0].strip() and row[meaning].strip():
            sentence = f"{row[0].strip()} | {row[meaning].strip()}"
            found.extend(in_term(row[0], row[meaning], sentence, glossary=a_glossary))
    return found


def in_front_matter(title: str, metadata: dict[str, Any], tags: list[str]) -> list[Found]:
    """Aliases a document's front matter declares for its title (``aliases``, ``aka``,
    ``also_known_as``; paths and links left out, as Hugo's ``aliases`` are old URLs), and a
    tag that is an acronym its title spells ("Incident Manager On Call", tag ``imoc``)."""
    found: list[Found] = []
    name = title.strip()
    short_title = 0 < len(name.split()) <= 5
    for key in ("aliases", "alias", "aka", "also_known_as", "synonyms"):
        value = metadata.get(key)
        values = value if isinstance(value, list) else [value] if value else []
        for v in values:
            v = str(v).strip()
            if not v or "/" in v or ":" in v or len(v.split()) > 4 or not short_title:
                continue
            if _usable(v, name):
                found.append(Found((v, name), "front_matter", f"{key}: {v} (title: {name})"))
    words = [_bare(w) for w in name.split()]
    for tag in tags:
        tag = str(tag).strip()
        if not re.fullmatch(r"[a-z]{2,6}", tag):
            continue
        for k in range(len(tag), min(len(tag) + 3, len(words)) + 1):
            for start in range(0, len(words) - k + 1):
                span = words[start:start + k]
                if all(span) and spells(tag, span) and _usable(tag, " ".join(span)):
                    found.append(Found((tag, " ".join(span)), "front_matter",
                                       f"tags: {tag} (title: {name})"))
                    return found
    return found
