"""On-call shorthand, spelled out: "pg replica lagging" also searches for postgres.

Engineers ask the way they talk in an incident channel ("prom down, bounce it?", "es cluster
yellow", "mute that alert"), and runbooks are written out in full (Prometheus, Elasticsearch,
silence). Neither BM25 nor a small embedding model bridges that gap: "pg" shares no characters
with "postgresql", and all-MiniLM-L6-v2 never learnt that "bounce" means "restart". Search
therefore adds the written-out forms to the query, the way a search engine's synonym filter
does, and the answer composer counts them as the question's words when it picks a section.

A group is a set of words that mean the same thing to an engineer. Only whole words of the
question are looked up, and only the other members of its group are added: the question keeps
its own words and their weight. An organisation adds its own jargon ("dotcom" for its main site,
a product's code name) with a synonyms file, one group per line::

    # <word>, <word>, ...
    dotcom, sourcegraph.com
    wh, whitehall

The vocabulary mined from the corpus (``vocabulary.py``: "incident commander (IC)", "GitLab.com
(also called dotcom)") comes in as ``mined`` groups, after review. The hand list wins: a word
that a hand-written group holds is left out of every mined group, so "pg" means what the hand
list says, and no mined group adds "pg" to another word (a group left with one word is
dropped). A mined group's member may be a phrase ("incident commander"): a question that says
the phrase gets the other members too (a hand-written group is looked up by its single words
only, as it always was).
"""

from __future__ import annotations

import re
from pathlib import Path

from citewise.errors import ConfigError

# Each group: words an engineer uses for one thing. Abbreviations first, then what they stand for.
BUILT_IN: tuple[tuple[str, ...], ...] = (
    ("pg", "postgres", "postgresql"),
    ("prom", "prometheus"),
    ("es", "elasticsearch"),
    ("k8s", "kubernetes"),
    ("tf", "terraform"),
    ("db", "database"),
    ("dbs", "databases"),
    ("prod", "production"),
    ("stg", "staging"),
    ("env", "environment"),
    ("infra", "infrastructure"),
    ("creds", "credentials"),
    ("perms", "permissions"),
    ("repo", "repository"),
    ("config", "configuration"),
    ("ns", "namespace"),
    ("pv", "persistentvolume"),
    ("pvc", "persistentvolumeclaim"),
    ("hpa", "horizontalpodautoscaler"),
    ("ocp", "openshift"),
    ("gcp", "google cloud"),
    ("cert", "certificate"),
    ("certs", "certificates"),
    ("tls", "ssl"),
    ("ack", "acknowledge"),
    ("pager", "pagerduty", "on-call"),
    ("oncall", "on-call"),
    ("bounce", "restart"),
    ("mute", "silence"),
    ("muting", "silencing"),
    ("nuke", "delete"),
    ("wipe", "delete"),
    ("trashed", "corrupted"),
    ("grow", "expand", "resize"),
    ("rollback", "roll back"),
    ("cmd", "command"),
    ("rn", "now"),
)

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+-]*[A-Za-z0-9]|[A-Za-z0-9]")


# The longest phrase looked up as one member ("google cloud", "incident manager on call").
_LONGEST_PHRASE = 5

Groups = tuple[tuple[str, ...], ...] | list[tuple[str, ...]]


def _normal(word: str) -> str:
    return " ".join(word.strip().lower().split())


class Synonyms:
    def __init__(self, groups: Groups = BUILT_IN, mined: Groups = ()) -> None:
        self._by_word: dict[str, list[str]] = {}
        self.mined = 0  # mined groups that add something the hand list does not
        for group in groups:
            # A hand-written group is looked up by its single words, as it always was.
            self._add([_normal(w) for w in group if w.strip()], phrases=False)
        hand = set(self._by_word)
        for group in mined:
            # The hand list owns its words: a mined group neither adds to them nor adds them.
            words = [w for w in (_normal(w) for w in group if w.strip()) if w not in hand]
            if len(words) >= 2 and self._add(words):
                self.mined += 1
        self._longest = max((len(w.split()) for w in self._by_word), default=1)
        self._longest = min(self._longest, _LONGEST_PHRASE)

    def _add(self, words: list[str], phrases: bool = True) -> bool:
        added = False
        for w in words:
            if " " in w and not phrases:
                continue
            others = self._by_word.setdefault(w, [])
            new = [o for o in words if o != w and o not in others]
            others.extend(new)
            added = added or bool(new)
        return added

    @classmethod
    def from_file(cls, path: Path | str | None, mined: Groups = ()) -> Synonyms:
        """The built-in groups, plus the groups of ``path`` when one is given, plus the
        ``mined`` groups where the hand-written ones do not know the word."""
        if path is None:
            return cls(mined=mined)
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(
                f"cannot read the synonyms file {path}: {e.strerror or e}",
                hint="set CITEWISE_SYNONYMS_FILE to a readable file, or unset it",
            ) from None
        groups = list(BUILT_IN)
        for number, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            words = tuple(w.strip() for w in line.split(",") if w.strip())
            if len(words) < 2:
                raise ConfigError(
                    f"{path}:{number}: a synonym group needs at least two words, got {line!r}",
                    hint="one group per line, comma-separated: pg, postgres, postgresql",
                )
            groups.append(words)
        return cls(groups, mined)

    def additions(self, text: str) -> list[str]:
        """The words to add to ``text``: the other members of the groups its words belong to,
        leaving out what it already says."""
        words = [w.lower() for w in _WORD.findall(text)]
        present = set(words)
        # Phrases of the question, for members that are phrases ("incident commander").
        for n in range(2, self._longest + 1):
            present.update(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
        low = " ".join(words)
        out: list[str] = []
        for w in present:
            for other in self._by_word.get(w, ()):
                if other not in present and other not in out and not _says(low, other):
                    out.append(other)
        return sorted(out)


def _says(low: str, phrase: str) -> bool:
    """Whether the question's words (lowercase, one space apart) hold ``phrase`` whole: "ic" is
    not said by "topic"."""
    return re.search(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", low) is not None
