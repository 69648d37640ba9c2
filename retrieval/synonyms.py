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


class Synonyms:
    def __init__(self, groups: tuple[tuple[str, ...], ...] | list[tuple[str, ...]] = BUILT_IN):
        self._by_word: dict[str, list[str]] = {}
        for group in groups:
            words = [w.strip().lower() for w in group if w.strip()]
            for w in words:
                others = self._by_word.setdefault(w, [])
                others.extend(o for o in words if o != w and o not in others)

    @classmethod
    def from_file(cls, path: Path | str | None) -> Synonyms:
        """The built-in groups, plus the groups of ``path`` when one is given."""
        if path is None:
            return cls()
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
        return cls(groups)

    def additions(self, text: str) -> list[str]:
        """The words to add to ``text``: the other members of the groups its words belong to,
        leaving out what it already says."""
        present = {w.lower() for w in _WORD.findall(text)}
        low = text.lower()
        out: list[str] = []
        for w in present:
            for other in self._by_word.get(w, ()):
                if other not in present and other not in out and other not in low:
                    out.append(other)
        return sorted(out)
