"""Each answer strategy on its own, and the composer's choice among them.

The knowledge base is written here and ingested by the real pipeline (real files, a real git
repository, the real model); each test hands one strategy the evidence the composer would get
for a question (real search, the catalog's outlines and records) and checks the shape it
answers in. ``test_answer.py`` checks the same shapes through the whole answer service.
"""

from __future__ import annotations

import numpy as np
import pytest

from citewise.index.dense import embedding_text
from citewise.ingest.jobs import run_source
from citewise.retrieval.answering.compose import Composer, answers_with_code
from citewise.retrieval.answering.evidence import Evidence
from citewise.retrieval.answering.question import Question, analyse
from citewise.retrieval.answering.strategies.alert import AlertStrategy
from citewise.retrieval.answering.strategies.cause import CauseStrategy
from citewise.retrieval.answering.strategies.code import CodeStrategy, shows_signature
from citewise.retrieval.answering.strategies.definition import DefinitionStrategy
from citewise.retrieval.answering.strategies.expansion import ExpansionStrategy
from citewise.retrieval.answering.strategies.fact import FactStrategy
from citewise.retrieval.answering.strategies.listing import ListingStrategy
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.answering.strategies.sentences import SentencesStrategy
from citewise.retrieval.answering.strategies.steps import StepsStrategy
from citewise.retrieval.synonyms import Synonyms
from citewise.settings import SourceConfig
from citewise.types import Identity, SearchFilters
from tests.connectors.gitrepo import GitRepo
from tests.ingest.test_code_chunking import PAGED_FETCH
from tests.kb import folder_source, write

ANON = Identity.anonymous()

QUEUE = """
---
title: Order queue backlog
service: order-worker
owner: team-orders
severity: high
alerts: [OrderQueueBacklogHigh]
---
# Order queue backlog

## What the alert means

OrderQueueBacklogHigh fires when more than ten thousand orders wait in the queue for five
minutes. Buyers see their orders as pending.

## Diagnosis

Check how many messages wait:

```bash
queuectl depth orders
```

## Mitigation

Drain the backlog in this order:

1. Scale the order workers out.
   ```bash
   kubectl -n orders scale deploy/order-worker --replicas=20
   ```
2. Pause the nightly export, which competes for the same queue.
3. Scale the workers back in once the depth is under a thousand.

## Related

- Payment webhook backlog
"""
POSTMORTEM = """
---
title: Postmortem of the search outage
---
# Postmortem of the search outage

## Timeline

At 14:02 the search cluster turned red and every query failed for forty minutes.

## Root cause

A mapping change doubled the size of every shard, and the data nodes ran out of disk. The
cluster then refused writes and reads alike.

- The mapping change was not reviewed by the search team.
- Disk alerts fired at 95 percent, too late to act.
"""
HANDBOOK = """
---
title: Incident handbook
---
# Incident handbook

Every incident has one commander and one channel.

## Severity levels

The commander sets the severity when the incident is declared.

### SEV1 - critical

Checkout or payments are down for everyone.

### SEV2 - major

A feature is down for some buyers.

## The incident commander

The IC coordinates the response; they do not debug. They page whoever is needed.

## Glossary

- `error budget` - the unreliability a service may spend in a quarter before releases stop.
- `toil` - manual work that grows with the size of the service.
"""
SERVICES = """
---
title: Service directory
---
# Service directory

| Service | Owner | Port |
|---|---|---|
| billing-api | team-billing | 8443 |
| order-worker | team-orders | 9090 |
"""
RETENTION = """
---
title: Audit log retention
---
# Audit log retention

## Retention

Audit logs are kept for 400 days in the archive bucket, then deleted by a lifecycle rule.
Nobody may shorten that period without the security team.
"""
GUARDS = '''"""Ingest guards: refusing runs that would do more harm than good."""


def refuse_mass_deletion(gone: int, existing: int, force: bool) -> None:
    """Refuse a run that would delete most of a source, unless forced.

    An emptied checkout looks exactly like everything was deleted.
    """
    if not force and gone > existing / 2:
        raise RuntimeError("refusing")
'''


@pytest.fixture(scope="module")
def services(tmp_path_factory, dense):
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings

    base = tmp_path_factory.mktemp("strategies")
    docs = base / "docs"
    write(docs, "runbooks/order-queue-backlog.md", QUEUE)
    write(docs, "wiki/postmortem-search-outage.md", POSTMORTEM)
    write(docs, "wiki/incident-handbook.md", HANDBOOK)
    write(docs, "wiki/service-directory.md", SERVICES)
    write(docs, "wiki/audit-log-retention.md", RETENTION)
    repo = GitRepo(base / "repo")
    repo.write("guards.py", GUARDS)
    repo.write("partner/fetch.js", PAGED_FETCH)
    repo.commit("init")
    # Small chunks, so that fetchPage is split into parts (as in test_code_chunking).
    s = build_services(Settings(data_dir=base / "data", chunk_max_tokens=80))
    assert run_source(s.pipeline, folder_source(docs), trigger="t").status == "succeeded"
    code = SourceConfig(name="code", type="git", path=str(repo.root), readers=["public"])
    assert run_source(s.pipeline, code, trigger="t").status == "succeeded"
    yield s
    s.close()


def scorer(services, question: str) -> Scorer:
    """The model's similarity of texts to ``question`` (or to a clause of it)."""
    asked = np.asarray(services.search.query_vector(question), dtype=np.float32)

    def score(texts: list[str], clause: str | None = None) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        target = np.asarray(services.search.query_vector(clause), dtype=np.float32) \
            if clause else asked
        return services.dense.embed_documents(texts, use_cache=False) @ target

    return score


def evidence(services, question: str, sources: list[str] | None = None
             ) -> tuple[Question, Evidence]:
    """What the composer gets for ``question``: the passages search finds for an anonymous
    caller, their documents' outlines and records, each passage's similarity to it."""
    q = analyse(question)
    q.synonyms = services.search.synonyms.additions(question)
    results = services.search.search(question, ANON, top_k=8,
                                     filters=SearchFilters(sources=sources or []))
    similarity = scorer(services, question)(
        [embedding_text(r.title, r.heading, r.text) for r in results])
    ids = {r.document_id for r in results}
    return q, Evidence(results=results, outlines=services.catalog.outlines(ids),
                       records={d: services.catalog.get_document(d) for d in ids},
                       relevance={r.chunk_id: float(v) for r, v in
                                  zip(results, similarity, strict=True)})


def texts(composed) -> list[str]:
    return [b.text or "" for b in composed.blocks]


# The choice ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("question", "expected"), [
    ("how do I drain the order queue backlog?", [StepsStrategy, SentencesStrategy]),
    ("What do I do when OrderQueueBacklogHigh fires?", [AlertStrategy, SentencesStrategy]),
    ("who owns billing-api?", [FactStrategy, SentencesStrategy]),
    ("what was the root cause of the search outage?", [CauseStrategy, SentencesStrategy]),
    ("What is an error budget?", [ExpansionStrategy, DefinitionStrategy, SentencesStrategy]),
    ("Are audit logs ever deleted?", [SentencesStrategy]),
])
def test_each_kind_of_question_gets_its_strategies_in_order(services, question, expected):
    q, ev = evidence(services, question, sources=["kb"])
    assert not answers_with_code(q, ev)
    chosen = Composer(scorer(services, question)).strategies_for(q, ev)
    assert [type(s) for s in chosen] == expected


def test_a_function_found_is_the_answer_to_a_code_question(services):
    question = "Which function refuses a run that would delete most of a source?"
    q, ev = evidence(services, question)
    assert q.kind == "code" and answers_with_code(q, ev)
    composer = Composer(scorer(services, question))
    assert [type(s) for s in composer.strategies_for(q, ev)] == [CodeStrategy]
    # Without a definition among the passages, a code question is answered in sentences.
    q, prose = evidence(services, question, sources=["kb"])
    assert not answers_with_code(q, prose)
    assert [type(s) for s in composer.strategies_for(q, prose)] == [SentencesStrategy]


def test_the_first_strategy_that_finds_its_shape_answers(services):
    """"What is an error budget?" asks for no abbreviation: the expansion strategy finds
    nothing, and the definition's answer is the composer's."""
    question = "What is an error budget?"
    q, ev = evidence(services, question, sources=["kb"])
    score = scorer(services, question)
    assert ExpansionStrategy(score).compose(q, ev) is None
    defined = DefinitionStrategy(score).compose(q, ev)
    composed = Composer(score).compose(q, ev)
    assert defined is not None and composed is not None
    assert texts(composed) == texts(defined) and composed.citations == defined.citations


def test_no_evidence_no_answer(services):
    q = analyse("how do I drain the order queue backlog?")
    empty = Evidence(results=[], outlines={}, records={}, relevance={})
    assert Composer(scorer(services, q.text)).compose(q, empty) is None


# The strategies -----------------------------------------------------------------------------

def test_steps_are_the_procedure_whole_with_its_commands(services):
    question = "how do I drain the order queue backlog?"
    q, ev = evidence(services, question, sources=["kb"])
    composed = StepsStrategy(scorer(services, question), Synonyms()).compose(q, ev)
    assert composed is not None
    framing, steps = composed.blocks
    assert framing.text == "Drain the backlog in this order:"
    assert [s.text for s in steps.steps][0] == "Scale the order workers out."
    assert len(steps.steps) == 3 and steps.ordered
    assert steps.steps[0].code[0].text.startswith("kubectl -n orders scale")
    (citation,) = composed.citations
    assert citation.heading == "Mitigation" and citation.path == "runbooks/order-queue-backlog.md"


def test_an_alert_gets_its_meaning_then_the_steps(services):
    question = "What do I do when OrderQueueBacklogHigh fires?"
    q, ev = evidence(services, question, sources=["kb"])
    score = scorer(services, question)
    composed = AlertStrategy(score, Synonyms()).compose(q, ev)
    assert composed is not None
    meaning = composed.blocks[0]
    assert meaning.text.startswith("OrderQueueBacklogHigh fires when") and meaning.citations == [1]
    assert [c.heading for c in composed.citations] == ["What the alert means", "Mitigation"]
    assert composed.blocks[-1].type == "steps" and composed.blocks[-1].citations == [2]
    # The same evidence through the steps strategy alone: no meaning.
    plain = StepsStrategy(score, Synonyms()).compose(q, ev)
    assert plain is not None and texts(plain) == texts(composed)[1:]
    assert [c.heading for c in plain.citations] == ["Mitigation"]


def test_a_fact_is_the_table_row_with_the_column_asked_for_first(services):
    question = "who owns billing-api?"
    q, ev = evidence(services, question, sources=["kb"])
    score = scorer(services, question)
    composed = FactStrategy(score, ListingStrategy(), SentencesStrategy(score)).compose(q, ev)
    assert composed is not None
    assert [(b.label, b.value) for b in composed.blocks] == [("Owner", "team-billing"),
                                                             ("Service", "billing-api")]
    assert composed.citations[0].path == "wiki/service-directory.md"


def test_a_fact_no_table_holds_comes_from_the_front_matter(services):
    question = "who owns the order queue backlog runbook?"
    q, ev = evidence(services, question, sources=["kb"])
    runbook = ev.results[0].document_id
    assert ev.results[0].path == "runbooks/order-queue-backlog.md"
    ev.results = [r for r in ev.results if r.document_id == runbook]  # no table among them
    score = scorer(services, question)
    composed = FactStrategy(score, ListingStrategy(), SentencesStrategy(score)).compose(q, ev)
    assert composed is not None
    assert [(b.label, b.value) for b in composed.blocks] == [("Owner", "team-orders"),
                                                             ("Service", "order-worker")]


def test_a_listing_is_the_section_named_so(services):
    question = "What are the severity levels?"
    q, ev = evidence(services, question, sources=["kb"])
    composed = ListingStrategy().compose(q, ev)
    assert composed is not None
    (block,) = composed.blocks
    assert [s.text for s in block.steps] == [
        "SEV1 - critical: Checkout or payments are down for everyone.",
        "SEV2 - major: A feature is down for some buyers."]
    assert composed.citations[0].heading == "Severity levels"
    # A question that names no section asks for no listing.
    q, ev = evidence(services, "who owns billing-api?", sources=["kb"])
    assert ListingStrategy().compose(q, ev) is None


def test_a_cause_is_the_root_cause_section_whole(services):
    question = "what was the root cause of the search outage?"
    q, ev = evidence(services, question, sources=["kb"])
    composed = CauseStrategy(scorer(services, question)).compose(q, ev)
    assert composed is not None
    assert composed.blocks[0].text.startswith("A mapping change doubled the size")
    assert [s.text for s in composed.blocks[1].steps] == [
        "The mapping change was not reviewed by the search team.",
        "Disk alerts fired at 95 percent, too late to act."]
    assert composed.citations[0].heading == "Root cause"


def test_an_abbreviation_is_spelled_out_by_the_heading_that_spells_it(services):
    question = "What does IC stand for?"
    q, ev = evidence(services, question, sources=["kb"])
    composed = ExpansionStrategy(scorer(services, question)).compose(q, ev)
    assert composed is not None
    fact, said = composed.blocks
    assert (fact.label, fact.value) == ("IC", "incident commander")
    assert said.text == "The IC coordinates the response; they do not debug."
    assert composed.citations[0].heading == "The incident commander"


def test_a_definition_is_the_item_that_defines_the_term(services):
    question = "What is an error budget?"
    q, ev = evidence(services, question, sources=["kb"])
    composed = DefinitionStrategy(scorer(services, question)).compose(q, ev)
    assert composed is not None
    assert any("the unreliability a service may spend in a quarter" in t
               for t in texts(composed)), texts(composed)
    assert composed.citations[0].heading == "Glossary"


def test_sentences_bring_the_one_with_the_number_asked_for(services):
    question = "How long are audit logs kept?"
    q, ev = evidence(services, question, sources=["kb"])
    composed = SentencesStrategy(scorer(services, question)).compose(q, ev)
    assert composed is not None
    assert "kept for 400 days" in composed.blocks[0].text
    assert composed.citations[0].path == "wiki/audit-log-retention.md"


def test_sentences_of_documents_without_an_outline_come_from_their_chunks(services):
    """Source files have no outline: their passages' own sentences are quoted."""
    question = "Does an emptied checkout look like everything was deleted?"
    q, ev = evidence(services, question, sources=["code"])
    assert ev.outlines == {}
    composed = SentencesStrategy(scorer(services, question)).compose(q, ev)
    assert composed is not None
    assert any("emptied checkout" in t for t in texts(composed)), texts(composed)
    assert composed.citations[0].path == "guards.py"


def test_code_is_the_signature_and_docstring_with_file_and_lines(services):
    question = "Which function refuses a run that would delete most of a source?"
    q, ev = evidence(services, question)
    composed = CodeStrategy().compose(q, ev)
    assert composed is not None
    lead, code = composed.blocks
    assert lead.text.startswith("`def refuse_mass_deletion` in `guards.py` (lines 4-")
    assert "Refuse a run that would delete most of a source" in lead.text
    assert code.text.startswith("def refuse_mass_deletion(gone: int") and code.language == "python"


def test_a_later_part_of_a_split_function_is_quoted_as_that_part(services):
    """The part of fetchPage that starts with ``const response = ...`` opens like a definition;
    the chunk's mark says it continues fetchPage, so it is shown as a part, not a signature.
    A point written before chunks were marked (no mark) is read by its first line, as it was
    then."""
    question = "What does fetchPage do when the partner API answers 404?"
    q, ev = evidence(services, question, sources=["code"])
    part = next(r for r in ev.results
                if r.continues_symbol and r.text.lstrip().startswith("const response"))
    only = Evidence(results=[part], outlines={}, records=ev.records, relevance=ev.relevance)
    composed = CodeStrategy().compose(q, only)
    assert composed is not None
    assert composed.blocks[0].text.startswith("Part of `function fetchPage` in "
                                              "`partner/fetch.js`")
    assert composed.blocks[1].text.startswith("const response = await http.get(")
    unmarked = part.model_copy(update={"continues_symbol": None})
    assert shows_signature(unmarked) and not shows_signature(part)
