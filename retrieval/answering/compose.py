"""Extractive answers built from the units the sources offer, in the shape the question wants.

The composer only chooses: which answer strategies (``strategies/``) a question gets, in which
order. The first that finds its shape of answer in the evidence answers; the best whole
sentences are every question's last resort. Each strategy quotes the sources' own units, never a
fragment out of context: no "Related"/"See also" link lists, no table row without its headers,
no sentence that only points at a document the caller may not read, nothing that merely
restates the question (as a README's example of asking it does).

Whatever strategy answers (but the code one), a question that names a specific thing (a flag, a
file, a number...) then gets the unit of the cited documents that holds it, if the answer lacks
it (``pinpoint.py``).
"""

from __future__ import annotations

from citewise.retrieval.answering.evidence import Composed, Evidence
from citewise.retrieval.answering.model import render_markdown
from citewise.retrieval.answering.named_things import asked_unit, states_value, value_subject
from citewise.retrieval.answering.pinpoint import add_named_unit
from citewise.retrieval.answering.question import Question
from citewise.retrieval.answering.strategies.alert import AlertStrategy
from citewise.retrieval.answering.strategies.cause import CauseStrategy
from citewise.retrieval.answering.strategies.code import CodeStrategy, closest_definition
from citewise.retrieval.answering.strategies.definition import DefinitionStrategy
from citewise.retrieval.answering.strategies.expansion import ExpansionStrategy
from citewise.retrieval.answering.strategies.fact import FactStrategy
from citewise.retrieval.answering.strategies.listing import ListingStrategy
from citewise.retrieval.answering.strategies.protocol import Scorer, Strategy
from citewise.retrieval.answering.strategies.sentences import SentencesStrategy
from citewise.retrieval.answering.strategies.steps import StepsStrategy
from citewise.retrieval.synonyms import Synonyms


class Composer:
    def __init__(self, scorer: Scorer, synonyms: Synonyms | None = None) -> None:
        # ``scorer``: the model's similarity of texts to this question (see ``Scorer``).
        # ``synonyms``: search's, so that "how do I bounce it" finds the section that says
        # restart (see ``steps.py``).
        synonyms = synonyms if synonyms is not None else Synonyms()
        self.scorer = scorer
        self.code = CodeStrategy()
        self.sentences = SentencesStrategy(scorer)
        # What each kind of question (``question.py``) tries before the best sentences.
        self.by_kind: dict[str, list[Strategy]] = {
            "action": [StepsStrategy(scorer, synonyms)],
            "alert": [AlertStrategy(scorer, synonyms)],
            "fact": [FactStrategy(scorer, ListingStrategy(), self.sentences)],
            "cause": [CauseStrategy(scorer)],
            "definition": [ExpansionStrategy(scorer), DefinitionStrategy(scorer)],
        }

    def compose(self, q: Question, ev: Evidence) -> Composed | None:
        if not ev.results:
            return None
        strategies = self.strategies_for(q, ev)
        for strategy in strategies:
            composed = strategy.compose(q, ev)
            if composed is not None:
                # The line the question names, wherever it sits in the cited documents (a
                # function's signature is its own answer: code is left as found).
                if strategy is self.code:
                    return composed
                return self._with_value(q, ev, add_named_unit(q, ev, composed, self.scorer))
        return None

    def _with_value(self, q: Question, ev: Evidence, composed: Composed) -> Composed:
        """``composed``, or, when the question asks for a value in a unit ("what % of the time")
        and it states none, the best sentences that state one: the sentence that says it
        ("We aim to meet this 95% of the time") can score under one that only talks about
        the subject. The service abstains when neither states it."""
        unit = asked_unit(q)
        if unit is None or states_value(unit[0], render_markdown(composed.blocks)):
            return composed
        # A value of another subject is not the answer: "meals are reimbursed up to £25 a day"
        # for what a bank holiday worked pays. The sentence, its section or its document must
        # share a word of the question besides those that ask for the value; a question of
        # nothing but such words ("how many seconds?") leaves every sentence in.
        valued = self.sentences.compose(q, ev, require=lambda t: states_value(unit[0], t),
                                        subject=value_subject(q) or None)
        return valued if valued is not None and valued.blocks else composed

    def strategies_for(self, q: Question, ev: Evidence) -> list[Strategy]:
        """The strategies to try for ``q``, in order; the first that composes an answer wins."""
        if answers_with_code(q, ev):
            return [self.code]
        return [*self.by_kind.get(q.kind, []), self.sentences]


def answers_with_code(q: Question, ev: Evidence) -> bool:
    """Whether a function or class found is the answer: asked for ("which function..."), or
    what the closest passage is.

    "How does the git connector hand the token to git?" reads as prose, but when the closest
    passages are functions, the function is the answer. The closest can be a source file's
    opening lines (imports, module docstring: no symbol); it is code too.
    """
    hit = closest_definition(ev)
    if hit is None:
        return False
    top = ev.results[0]
    top_is_code = top.document_id not in ev.outlines and bool(
        top.symbol or (top.metadata or {}).get("language"))
    return (q.kind == "code" or (top_is_code and not q.wants_steps)
            or q.kind == "general" and hit in ev.results[:3])
