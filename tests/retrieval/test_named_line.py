"""A question that names a specific thing gets the line that holds it, wherever it sits.

Long runbooks (``long_runbooks.py``), each with the fact asked for in one line of a long
section that the question's shape does not lead to: a flag among thirty options, a key's TTL in
a paragraph about storage, a file named in the background. Ingested by the real pipeline and
asked through the real search and answer service with the real model; each test checks that the
fact is in the answer and that the citation's lines, read from the file, hold it. And the cases
where nothing must be added: a general question, a thing no document names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citewise.retrieval.answering.compose import Composer
from citewise.retrieval.answering.model import render_markdown
from citewise.retrieval.answering.named_things import asked_kinds, looks_like, named_things
from citewise.retrieval.answering.pinpoint import ANSWER_BUDGET, add_named_unit
from citewise.retrieval.answering.question import analyse
from citewise.types import Identity
from tests.kb import services_over
from tests.retrieval.long_runbooks import (
    failed_pods_runbook,
    failover_runbook,
    haproxy_runbook,
    on_call_policy,
    rack_attack_runbook,
)
from tests.retrieval.test_answer_strategies import evidence, scorer

ANON = Identity.anonymous()
FILES = {
    "runbooks/patroni-failover.md": failover_runbook(),
    "runbooks/rack-attack.md": rack_attack_runbook(),
    "runbooks/haproxy-blocking.md": haproxy_runbook(),
    "handbook/on-call-policy.md": on_call_policy(),
    "runbooks/VirtPodsStuckFailed.md": failed_pods_runbook(),
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory, dense):
    with services_over(tmp_path_factory.mktemp("named-line"), FILES) as built:
        yield built


def cited_lines(docs: Path, citation) -> str:
    """The lines of the stored file that a citation points at."""
    lines = (docs / citation.path).read_text(encoding="utf-8").split("\n")
    assert citation.start_line and citation.end_line, citation
    return "\n".join(lines[citation.start_line - 1:citation.end_line])


def citation_holding(answer, fact: str):
    """The citation whose quote holds ``fact``."""
    return next((c for c in answer.citations if fact in c.quote), None)


def shape_alone(services, question: str):
    """The question, its evidence, and the answer of the strategy its shape chooses, before
    the line the question names is looked for."""
    q, ev = evidence(services, question)
    strategies = Composer(scorer(services, question)).strategies_for(q, ev)
    composed = next(c for s in strategies if (c := s.compose(q, ev)) is not None)
    return q, ev, composed


# (question, the runbook, the fact, whether the shape's own answer already holds it)
CASES = [
    # The examples of the issue: a flag among thirty options, a key's TTL in a paragraph about
    # storage, a file named in Background while another section lists seven other files. The
    # fact question's sentences find them already; they must still.
    ("what flag skips the confirmation in the failover script", "runbooks/patroni-failover.md",
     "--yes", True),
    ("what's the TTL of the ban key", "runbooks/rack-attack.md", "3600 seconds", True),
    ("which file lists the blocked IPs", "runbooks/haproxy-blocking.md", "deny-403-ips.lst",
     True),
    # Where the shape's section lacks the line. A value asked for ("how long") and no name:
    # the sentences the search hit speak of bans lifting, not of how long they last.
    ("ban keys in redis: how long until a ban lifts on its own?", "runbooks/rack-attack.md",
     "3600 seconds", False),
    # Procedures that name a thing the steps do not hold: the line comes after the steps.
    ("how do I ban an address hammering the API, and what's the TTL of the ban key?",
     "runbooks/rack-attack.md", "3600 seconds", False),
    ("how do I use --check-only with the patroni failover script?",
     "runbooks/patroni-failover.md", "--check-only", False),
    ("how do I run the patroni failover with --no-rejoin?", "runbooks/patroni-failover.md",
     "--no-rejoin", False),
    ("how do I fail over patroni from chatops without the confirmation prompt? which flag?",
     "runbooks/patroni-failover.md", "--yes", False),
]


@pytest.mark.parametrize(("question", "path", "fact", "shape_has_it"), CASES)
def test_the_line_that_holds_what_the_question_names_is_in_the_answer(kb, question, path, fact,
                                                                      shape_has_it):
    services, docs = kb
    answer = services.answers.answer(question, ANON, use_cache=False)
    assert not answer.abstained, answer.reason
    assert fact in answer.answer, answer.answer
    cited = citation_holding(answer, fact)
    assert cited is not None, [c.quote for c in answer.citations]
    assert cited.path == path
    held = cited_lines(docs, cited)
    assert fact in held, (cited.start_line, cited.end_line, held)
    if not shape_has_it:
        # The line added is cited by its own lines, not by its whole section.
        assert cited.end_line - cited.start_line < 6, (cited.start_line, cited.end_line)
    assert len(answer.answer) <= ANSWER_BUDGET + 200  # the budget counts the blocks' text


@pytest.mark.parametrize(("question", "path", "fact", "shape_has_it"), CASES)
def test_the_line_is_added_only_where_the_shape_missed_it(kb, question, path, fact,
                                                          shape_has_it):
    services, _ = kb
    q, ev, plain = shape_alone(services, question)
    assert (fact in render_markdown(plain.blocks)) == shape_has_it
    added = add_named_unit(q, ev, plain)
    assert fact in render_markdown(added.blocks)
    if shape_has_it:
        assert added is plain


def test_a_procedure_keeps_its_steps_and_gets_the_line_after_them(kb):
    """The Mitigation's steps whole and in order, as the shape chose them, then the ban key's
    sentence under a citation of its own that points at its line."""
    services, docs = kb
    question = "how do I ban an address hammering the API, and what's the TTL of the ban key?"
    _, _, plain = shape_alone(services, question)
    answer = services.answers.answer(question, ANON, use_cache=False)
    assert answer.kind == "action"
    assert [b.model_dump() for b in answer.blocks[:len(plain.blocks)]] == \
        [b.model_dump() for b in plain.blocks]
    steps = next(b for b in answer.blocks if b.type == "steps")
    assert len(steps.steps) == 6 and steps.steps[0].text.startswith("Find the offending")
    last = answer.blocks[-1]
    assert "TTL of 3600 seconds" in last.text
    cited = next(c for c in answer.citations if c.n in last.citations)
    assert cited.n == len(answer.citations) and cited.heading.endswith("How the state is stored")
    assert "TTL of 3600 seconds" in cited_lines(docs, cited)


def test_a_fact_gets_the_line_first(kb):
    """A fact's answer is one unit: the line that holds the value comes first, cited [1]."""
    services, _ = kb
    answer = services.answers.answer("ban keys in redis: how long until a ban lifts on its own?",
                                     ANON, use_cache=False)
    assert "3600 seconds" in answer.blocks[0].text and answer.blocks[0].citations == [1]
    assert [c.n for c in answer.citations] == list(range(1, len(answer.citations) + 1))


def test_a_general_question_gets_no_extra_unit(kb):
    services, _ = kb
    question = "how do I fail over the patroni primary?"
    q, ev, plain = shape_alone(services, question)
    assert not named_things(q) and not asked_kinds(q)
    assert add_named_unit(q, ev, plain) is plain
    answer = services.answers.answer(question, ANON, use_cache=False)
    assert [(c.heading, c.start_line, c.end_line) for c in answer.citations] == \
        [(c.heading, c.start_line, c.end_line) for c in plain.citations]


def test_a_thing_no_document_names_adds_nothing(kb):
    services, _ = kb
    question = "how do I run the patroni failover with --skip-fencing-entirely?"
    q, ev, plain = shape_alone(services, question)
    assert [t.text for t in named_things(q)] == ["--skip-fencing-entirely"]
    assert add_named_unit(q, ev, plain) is plain


def test_a_thing_the_answer_already_shows_is_not_added_again(kb):
    """"--no-fence" is among the options the procedure's answer lists."""
    services, _ = kb
    q, ev, plain = shape_alone(services, "what does the --no-fence option of the failover "
                                         "script do?")
    assert "--no-fence" in render_markdown(plain.blocks)
    assert add_named_unit(q, ev, plain) is plain


@pytest.mark.parametrize(("question", "things", "kinds"), [
    ("what does `sv restart` do", [("sv restart", "quoted")], []),
    ("which command lists the pools", [], ["command"]),
    ("is --force safe on port 5432?", [("--force", "flag"), ("5432", "number")], ["number"]),
    ("where is /etc/haproxy/deny.lst rendered", [("/etc/haproxy/deny.lst", "path")], []),
    ("what sets MAX_CONNECTIONS and hostPrefix", [("MAX_CONNECTIONS", "key"),
                                                  ("hostPrefix", "key")], []),
    ("what's the TTL of the ban key", [("TTL", "acronym")], ["duration"]),
    ("which file lists the blocked IPs", [("IP", "acronym")], ["file"]),
    ("how do I fail over the cache?", [], []),
    ("KubePodCrashLooping on my app, where do i start", [("KubePodCrashLooping", "alert")], []),
])
def test_what_a_question_names(question, things, kinds):
    q = analyse(question)
    assert [(t.text, t.kind) for t in named_things(q)] == things
    assert asked_kinds(q) == kinds


def test_the_answer_stays_within_its_budget(kb):
    """A procedure as long as the budget: its last steps make way for the line asked for, and
    a note says how many follow in the source."""
    services, _ = kb
    question = "how do I ban an address hammering the API, and what's the TTL of the ban key?"
    q, ev, plain = shape_alone(services, question)
    steps = next(b for b in plain.blocks if b.type == "steps")
    # The same procedure with wordier steps, as a long runbook's would be.
    for step in steps.steps:
        step.text += " " + "Say in the incident channel what you did and what you saw. " * 12
    assert len(render_markdown(plain.blocks)) > ANSWER_BUDGET - 200
    added = add_named_unit(q, ev, plain)
    text = render_markdown(added.blocks)
    assert len(text) <= ANSWER_BUDGET
    assert "TTL of 3600 seconds" in text
    kept = next(b for b in added.blocks if b.type == "steps").steps
    assert 0 < len(kept) < len(steps.steps)
    assert f"{len(steps.steps) - len(kept)} more steps follow in the source." in text
    assert kept[0].text == steps.steps[0].text  # cut from the end, never the start


def test_a_kind_the_answer_lacks_comes_from_the_closest_unit_of_that_kind(kb):
    """"How fast" asks for a duration. The sentences search hit speak of what pages you, and
    no unit shares enough of the question's words ("notified", not "paged"): the model picks,
    among the units that hold a duration, the one closest to the question."""
    services, docs = kb
    question = "how quickly must i be online once i'm paged?"
    q, ev, plain = shape_alone(services, question)
    assert asked_kinds(q) == ["duration"]
    assert "half an hour" not in render_markdown(plain.blocks)
    # Words alone choose nothing: the question's words are not the line's.
    assert add_named_unit(q, ev, plain) is plain
    added = add_named_unit(q, ev, plain, scorer(services, question))
    assert "within half an hour" in render_markdown(added.blocks)
    answer = services.answers.answer(question, ANON, use_cache=False)
    cited = citation_holding(answer, "within half an hour")
    assert cited is not None and cited.path == "handbook/on-call-policy.md"
    assert "within half an hour" in cited_lines(docs, cited)
    # Not the uptime checker's "after 5 mins", which holds a duration too.
    assert "5 mins" not in answer.answer


def test_a_kind_the_answer_shows_already_adds_nothing_by_the_model(kb):
    """The answer states a duration: the model is not asked for another one."""
    services, _ = kb
    question = "how quickly does the uptime checker alert?"
    q, ev, plain = shape_alone(services, question)
    assert asked_kinds(q) == ["duration"]
    assert "after 5 mins" in render_markdown(plain.blocks)
    assert add_named_unit(q, ev, plain, scorer(services, question)) is plain


def test_a_threshold_in_a_rule_beats_the_numbers_of_a_query(kb):
    """"What count triggers it", end to end: the alert's answer (its meaning and steps) lacks
    the rule, and the rule's "count >= 200" joins it, cited by its lines. The diagnosis item's
    "== 1" and "topk(5, ...)" are arguments (``test_what_looks_like_a_value``)."""
    services, docs = kb
    question = "VirtPodsStuckFailed what count triggers it"
    q, ev, plain = shape_alone(services, question)
    assert ">= 200" not in render_markdown(plain.blocks)
    answer = services.answers.answer(question, ANON, use_cache=False)
    assert ">= 200" in answer.answer, answer.answer
    cited = citation_holding(answer, ">= 200")
    assert cited is not None and ">= 200" in cited_lines(docs, cited)


@pytest.mark.parametrize(("kind", "prose", "code", "found"), [
    ("number", "Condition: `failed:count >= 200` holds for 10 minutes.", "", True),
    ("number", "Confirm the scope:", "count by (ns) (phase == 1)\ntopk(5, x)", False),
    ("number", "Run `topk(5, x)` to see them.", "", False),  # an argument in a code span
    ("number", "Page when more than 5 hosts are down.", "", True),
    ("number", "Confirm the scope:", "alert: x > 90", True),  # compared, even in code
    ("number", "There are 2 reasons.", "", True),
    ("number", "PgBouncer listens on `6432`.", "", True),  # a value in a code span
    ("number", "Check it:", "if [ \"$lag\" -gt 300 ]; then page; fi", True),
    ("number", "Map the port:", "docker run -p 8080->80/tcp app", False),  # not compared
    ("number", "Sort them:", "items.sort((a, b) => 0)", False),  # an arrow
    ("command", "Restart it.", "sv restart nginx", True),
    ("command", "Restart it.", "", False),
    ("duration", "within half an hour of being notified", "", True),
])
def test_what_looks_like_a_value(kind, prose, code, found):
    assert looks_like(kind, prose, code) is found
