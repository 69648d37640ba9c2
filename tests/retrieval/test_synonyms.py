"""On-call shorthand spelled out: what is added to a question, what an organisation's file adds,
and how the BM25 query weighs the additions against the words typed."""

from __future__ import annotations

import pytest

from citewise.errors import ConfigError
from citewise.index.sparse import Bm25Encoder
from citewise.retrieval.synonyms import Synonyms


def test_shorthand_adds_what_it_stands_for_and_keeps_the_question():
    s = Synonyms()
    assert s.additions("pg replica lagging, how do i fix it") == ["postgres", "postgresql"]
    assert s.additions("prom down, bounce it?") == ["prometheus", "restart"]
    assert s.additions("mute that alert") == ["silence"]
    # Whole words only, and nothing the question already says.
    assert s.additions("pgbouncer is slow") == []
    assert s.additions("postgres (pg) replica") == ["postgresql"]
    assert s.additions("how do I restart the cache?") == ["bounce"]


def test_an_organisations_file_adds_its_own_groups(tmp_path):
    path = tmp_path / "synonyms.txt"
    path.write_text("# our jargon\ndotcom, sourcegraph.com\n\nwh, whitehall  # the publisher\n")
    s = Synonyms.from_file(path)
    assert s.additions("dotcom is down") == ["sourcegraph.com"]
    assert s.additions("roll back wh") == ["whitehall"]
    assert s.additions("pg is down") == ["postgres", "postgresql"]  # the built-in groups stay


def test_a_bad_synonyms_file_says_what_is_wrong(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the synonyms file"):
        Synonyms.from_file(tmp_path / "missing.txt")
    path = tmp_path / "synonyms.txt"
    path.write_text("pg, postgres\nlonely\n")
    with pytest.raises(ConfigError, match=r"synonyms.txt:2: a synonym group needs at least two"):
        Synonyms.from_file(path)


def test_the_bm25_query_weighs_additions_at_half(tmp_path):
    from citewise.retrieval.search import SYNONYM_WEIGHT, SearchService

    sparse = Bm25Encoder()
    search = SearchService(catalog=None, index=None, dense=None, sparse=sparse)  # type: ignore
    vector = search.sparse_query("pg replica lag")
    weights = dict(zip(vector.indices, vector.values, strict=True))
    typed = sparse.embed_query("pg replica lag").indices
    added = sparse.embed_query("postgres postgresql").indices
    assert all(weights[i] == 1.0 for i in typed)
    assert all(weights[i] == SYNONYM_WEIGHT for i in added if i not in typed)
    assert SYNONYM_WEIGHT < 1.0


def test_the_answer_reads_the_asked_verb_with_the_organisations_words(tmp_path):
    """"how do I kick it": the section that says restart does it, when the organisation's file
    says kick is restart (the built-in groups do not)."""
    from citewise.retrieval.answering.question import analyse
    from citewise.retrieval.answering.strategies.steps import asked_verbs

    path = tmp_path / "synonyms.txt"
    path.write_text("kick, restart\n")
    question = analyse("metricsd is wedged, how do i kick it")
    assert "restart" in asked_verbs(question, Synonyms.from_file(path))
    assert "restart" not in asked_verbs(question, Synonyms())
