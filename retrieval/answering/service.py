"""Cited answers: extractive by default (no LLM needed), an OpenAI-compatible model when set.

1. Search finds the passages the caller may read.
2. The answer abstains when the knowledge base has nothing about the question: the best
   passage is not close enough to it, or the question names something (a database, a product,
   an alert) that no document the caller may read mentions. Similar wording about another
   database is not an answer.
3. The composer (``compose.py``) builds the answer from the sources' own units in the shape the
   question wants (``question.py``): it chooses the answer strategies (``strategies/``: steps,
   a fact, a function, a definition, sentences...) and the first that finds its shape answers.
4. With a model gateway configured, the model gets the same passages, numbered and fenced as
   data (``prompt.py``), and its Markdown becomes the answer's blocks; if every provider fails
   or the answer cites nothing, the extractive answer is returned (with the reason).
5. ``stream`` gives the same answer as events (``stream.py``) for server-sent events.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from citewise import metrics
from citewise.errors import GuardrailBlocked
from citewise.gateway import Completion, Gateway, GatewayError, StreamBroken
from citewise.index.catalog import DocumentCatalog
from citewise.index.dense import DenseEncoder, embedding_text
from citewise.index.injection import injection_score, is_injection
from citewise.language import is_english
from citewise.retrieval.alert_runbooks import alert_names, names_runbook
from citewise.retrieval.answering.cache import SemanticCache, scope_of
from citewise.retrieval.answering.compose import Composer
from citewise.retrieval.answering.evidence import Composed, Evidence, points_elsewhere
from citewise.retrieval.answering.hidden import HiddenTitles, titles_matcher
from citewise.retrieval.answering.lexical import restates
from citewise.retrieval.answering.markdown import blocks_from_markdown
from citewise.retrieval.answering.model import (
    Answer,
    AnswerBlock,
    AnswerUsage,
    Citation,
    render_markdown,
)
from citewise.retrieval.answering.named_things import asked_unit, states_value
from citewise.retrieval.answering.prompt import NO_ANSWER_TOKEN, PromptPassage, build_messages
from citewise.retrieval.answering.question import Question, analyse
from citewise.retrieval.answering.strategies.protocol import Scorer
from citewise.retrieval.answering.stream import (
    AnswerEvent,
    BlockTracker,
    MarkerFilter,
    citations_event,
    replay,
)
from citewise.retrieval.search import SearchResult, SearchService
from citewise.types import Identity, SearchFilters

log = logging.getLogger("citewise.answer")

NO_ANSWER = "I could not find an answer to that in the knowledge base you can read."
# Words of how people ask, not of what they ask about: never checked against the corpus.
_ASKING = frozenset("""what when where which who whom why how does do did doing done can could
should would will shall may might must fix fixing fixed steps step procedure happen happens
happened fires firing fired alert alerts page paged mean means meaning anyone someone something
there here please need want know tell show find get got make made work works working broken
again still just now wrong issue issues problem problems error errors
isnt arent wasnt werent dont doesnt didnt cant couldnt wont wouldnt shouldnt havent hasnt hadnt
im ive id youre weve theyre thats whats wheres whos theres lets""".split())  # typed unquoted
# Prepositions after which a word names a place or a tool ("in spinnaker", "via harbor").
_WHERE = frozenset("in on via using inside into through".split())
# Evidence under which such a word, unknown to the documents, names what the question is about.
PLACED_NAME_EVIDENCE = 0.5
_HIDDEN_TTL = 30.0
# A hidden document's title this close to the question means the question is about it.
HIDDEN_TOPIC_SCORE = 0.7


class AnswerService:
    def __init__(
        self,
        *,
        search: SearchService,
        dense: DenseEncoder,
        catalog: DocumentCatalog,
        min_score: float = 0.32,
        gateway: Gateway | None = None,
        passages: int = 8,
        cache: SemanticCache | None = None,
    ) -> None:
        self.search = search
        self.dense = dense
        self.catalog = catalog
        self.min_score = min_score
        self.gateway = gateway
        self.cache = cache
        # Part of the cache scope: an answer made one way is not served for another.
        self._config = f"{'llm' if gateway else 'extractive'}|{min_score}|{passages}"
        self.passages = passages
        self._hidden: dict[frozenset[str], tuple[float, HiddenTitles]] = {}
        self._hidden_lock = threading.Lock()

    def _prepare(self, question: str, identity: Identity, filters: SearchFilters | None,
                 injection: Injection | None = None) -> Answer | _Prepared:
        """Search, decide whether to abstain, and compose the extractive answer: everything an
        answer needs before a model is asked. An abstention comes back as the ``Answer``."""
        q = analyse(question)
        q.synonyms = self.search.synonyms.additions(question)
        results = self.search.search(question, identity, top_k=self.passages, filters=filters)
        results, decisions = _guard_passages(results, injection)
        if not results:
            answer = self._abstain(q, 0.0, "no passage you may read matches the question")
            answer.guardrails = decisions
            return answer
        query_vec = np.asarray(self.search.query_vector(question), dtype=np.float32)
        hidden = self._hidden_titles(identity)
        relevance = self._relevance(q, results, query_vec, hidden)
        evidence = max(relevance.values())
        if evidence < self.min_score:
            return self._abstain(q, evidence, f"the closest passage scores {evidence:.2f}, "
                                              f"under {self.min_score:.2f}")
        if self._asks_about_hidden(query_vec, results, hidden):
            return self._abstain(q, evidence, "the passages you may read only point at "
                                              "another document")
        unknown = self._unknown_names(q, identity, evidence)
        if unknown:
            return self._abstain(q, evidence, "nothing you may read mentions "
                                              + ", ".join(f"'{w}'" for w in unknown))
        # Passages far weaker than the best only add noise. The best is measured among the
        # passages that say something themselves: a "Related" line that names the subject
        # ("apps time out waiting for a PgBouncer slot: see ...") scores high and would push
        # out the runbook it points at.
        bar = max((relevance[r.chunk_id] for r in results if not points_elsewhere(r)),
                  default=evidence)
        # The runbook of an alert the question names (search put it first:
        # ``retrieval/alert_runbooks.py``) is the only one that answers, however little it says:
        # a sibling alert's procedure, however complete, is for another alert.
        alerts = alert_names(question)
        kept = [r for r in results if any(names_runbook(r, a) for a in alerts)] or \
            [r for r in results if relevance[r.chunk_id] >= bar - 0.2]
        ev = Evidence(
            results=kept,
            outlines=self.catalog.outlines(r.document_id for r in kept),
            records={d: rec for d in {r.document_id for r in kept}
                     if (rec := self.catalog.get_document(d)) is not None},
            relevance=relevance,
            hidden_titles=hidden,
        )
        ev.results = [r for r in ev.results if r.document_id in ev.records]
        ev.strip_injected = injection is not None and injection[1] == "redact"
        composed = Composer(self._scorer(query_vec), self.search.synonyms).compose(q, ev)
        if composed is None or not composed.blocks:
            return self._abstain(q, evidence, "no passage holds an answer to quote")
        # "How many seconds before it fires": passages about the alert that never give the
        # number are not its answer (a runbook that writes "XX seconds" has not decided it).
        unit = asked_unit(q)
        if unit is not None and not states_value(unit[0], render_markdown(composed.blocks)):
            return self._abstain(q, evidence, f"the passages you may read give no value for "
                                              f"'{unit[1]}'")
        return _Prepared(q, ev, composed, evidence, decisions)

    def _cached(self, question: str, identity: Identity, filters: SearchFilters | None,
                use_cache: bool, injection: Injection | None,
                ) -> tuple[Answer | None, Callable[[Answer], bool] | None]:
        """A cached answer for this caller's scope, or None; and how to store the new one."""
        if self.cache is None:
            return None, None
        model = self.search.dense.model_id  # read first: the vector is this model's or newer
        vector = np.asarray(self.search.query_vector(question), dtype=np.float32)
        # The model is part of the scope: after a reindex switched models, a vector of the new
        # one is never compared with entries of the old.
        scope = scope_of(identity, filters, f"{self._config}|{injection}|{model}")
        if use_cache:
            hit = self.cache.lookup(scope, vector)
            if hit is not None:
                hit.answer.cached = True
                return hit.answer, None
        return None, lambda answer: self.cache.store(scope, question, vector, answer)

    def answer(self, question: str, identity: Identity, filters: SearchFilters | None = None,
               *, history: list[dict[str, Any]] | None = None, use_cache: bool = True,
               injection: Injection | None = None) -> Answer:
        """The cited answer. ``history`` (earlier turns of a chat, OpenAI message dicts) is
        context for the model; retrieval uses ``question`` alone. A question close to one this
        caller's scope was answered before gets that answer (``cached``) unless ``use_cache``
        is false. ``injection`` is the guardrail policy for passages that carry instructions:
        (action, sources it covers)."""
        hit, keep = self._cached(question, identity, filters, use_cache, injection)
        if hit is not None:
            return hit
        answer = self._answer(question, identity, filters, history, injection)
        if keep is not None:
            keep(answer)
        return answer

    def _answer(self, question: str, identity: Identity, filters: SearchFilters | None,
                history: list[dict[str, Any]] | None, injection: Injection | None) -> Answer:
        prepared = self._prepare(question, identity, filters, injection)
        if isinstance(prepared, Answer):
            return prepared
        if self.gateway is None:
            return self._extractive(prepared)
        sources = _llm_passages(prepared.ev, prepared.composed)
        messages = self._messages(prepared, sources, history)
        try:
            completion = self.gateway.complete(messages)
        except GatewayError as e:
            return self._extractive(prepared, f"no model answered, so this answer is "
                                              f"extractive: {e.message}")
        answer = self._generated(prepared, sources, completion.text, completion)
        answer.guardrails = prepared.decisions
        return answer

    def stream(self, question: str, identity: Identity, filters: SearchFilters | None = None,
               *, history: list[dict[str, Any]] | None = None, use_cache: bool = True,
               injection: Injection | None = None) -> Iterator[AnswerEvent]:
        """The answer as events (see ``stream.py``). A model stream that fails before its
        first token falls back to the extractive answer; one that breaks after it ends with an
        ``error`` event holding what was received. Closing the iterator closes the upstream
        request. A cached answer is replayed as the same events."""
        hit, keep = self._cached(question, identity, filters, use_cache, injection)
        if hit is not None:
            yield from replay(hit)
            return
        for event in self._stream(question, identity, filters, history, injection):
            if event.event == "done" and keep is not None:
                keep(Answer.model_validate(event.data["answer"]))
            yield event

    def _stream(self, question: str, identity: Identity, filters: SearchFilters | None,
                history: list[dict[str, Any]] | None,
                injection: Injection | None) -> Iterator[AnswerEvent]:
        prepared = self._prepare(question, identity, filters, injection)
        if isinstance(prepared, Answer):
            yield from replay(prepared)
            return
        if self.gateway is None:
            yield from replay(self._extractive(prepared))
            return
        sources = _llm_passages(prepared.ev, prepared.composed)
        yield citations_event(sources)
        streamed = self.gateway.stream(self._messages(prepared, sources, history))
        marks = MarkerFilter(len(sources), NO_ANSWER_TOKEN)
        blocks = BlockTracker()
        text = ""
        try:
            for delta in streamed:
                out = marks.feed(delta)
                if out:
                    text += out
                    yield AnswerEvent("delta", {"text": out})
                    yield from blocks.update(text)
        except GatewayError as e:
            answer = self._extractive(prepared, f"no model answered, so this answer is "
                                                f"extractive: {e.message}")
            for event in replay(answer):
                if event.event != "citations":  # already sent; the numbers are the same
                    yield event
            return
        except StreamBroken as e:
            metrics.ANSWERS.labels("llm", "broken").inc()
            yield AnswerEvent("error", {**e.problem(), "received": text,
                                        "provider": e.provider})
            return
        finally:
            streamed.close()
        completion = streamed.completion
        if marks.is_no_answer:
            answer = self._generated(prepared, sources, NO_ANSWER_TOKEN, completion)
        else:
            out = marks.flush()
            if out:
                text += out
                yield AnswerEvent("delta", {"text": out})
            yield from blocks.update(text, final=True)
            answer = self._generated(prepared, sources, text, completion)
        answer.guardrails = prepared.decisions
        yield AnswerEvent("done", {"answer": answer.model_dump()})

    def _extractive(self, p: _Prepared, reason: str | None = None) -> Answer:
        metrics.ANSWERS.labels("extractive", "false").inc()
        return Answer(answer=render_markdown(p.composed.blocks), blocks=p.composed.blocks,
                      citations=p.composed.citations, kind=p.q.kind, evidence=p.evidence,
                      reason=reason, guardrails=p.decisions)

    def _abstain(self, q: Question, evidence: float, reason: str) -> Answer:
        metrics.ANSWERS.labels("extractive", "true").inc()
        return Answer(answer=NO_ANSWER, abstained=True, kind=q.kind, evidence=evidence,
                      reason=reason,
                      blocks=[AnswerBlock(type="paragraph", text=NO_ANSWER)])

    def _relevance(self, q: Question, results: list[SearchResult], query_vec: np.ndarray,
                   hidden: HiddenTitles) -> dict[str, float]:
        """Each passage's similarity to the question, counting only what the caller can use:
        a sentence that points at a document they may not read, or that restates the question
        (a README's example of asking it), is taken out before measuring. A runbook that is
        only found because it names the restricted one is then no evidence."""
        texts = []
        for r in results:
            kept = [line for line in r.text.split("\n")
                    if not hidden.named_in(line) and not restates(q, line)]
            texts.append(("\n".join(kept), len(kept) < len(r.text.split("\n"))))
        cached = self.dense.embed_documents(
            [embedding_text(r.title, r.heading, r.text) for r in results])
        cleaned_ix = [i for i, (_, changed) in enumerate(texts) if changed]
        cleaned: np.ndarray | list[np.ndarray] = self.dense.embed_documents(
            [embedding_text(results[i].title, results[i].heading, texts[i][0])
             for i in cleaned_ix], use_cache=False) if cleaned_ix else []
        vectors = list(cached)
        for i, vec in zip(cleaned_ix, cleaned, strict=True):
            vectors[i] = vec if texts[i][0].strip() else np.zeros_like(vec)
        return {r.chunk_id: float(v @ query_vec) for r, v in zip(results, vectors, strict=True)}

    def _scorer(self, query_vec: np.ndarray) -> Scorer:
        def score(texts: list[str], clause: str | None = None) -> np.ndarray:
            if not texts:
                return np.zeros(0, dtype=np.float32)
            vecs = self.dense.embed_documents(texts, use_cache=False)
            target = (np.asarray(self.search.query_vector(clause), dtype=np.float32) if clause
                      else query_vec)
            scores: np.ndarray = vecs @ target
            return scores

        return score

    # What the question is about ---------------------------------------------------------------
    def _unknown_names(self, q: Question, identity: Identity, evidence: float) -> list[str]:
        """Words of the question that nothing the caller may read contains, and that are not
        ordinary English: the names of what it asks about ("cockroachdb", an alert name). A
        paraphrase uses English words the documents do not ("shoppers", "lapse"): those are
        not held against it.
        """
        unknown = []
        text = re.sub(r"n['’]t\b|['’](s|re|ll|ve|d|m)\b", "", q.text.lower())  # wasn't, it's
        words = re.findall(r"[a-z0-9][a-z0-9_]*[a-z0-9]", text)
        # An English word can name a tool where a tool goes: "a canary in spinnaker", "deploy
        # via harbor". Held against the question only when the evidence is weak too, since
        # "stuck in limbo" puts an ordinary word there.
        placed = {w for before, w in zip(words, words[1:], strict=False)
                  if before in _WHERE} if evidence < PLACED_NAME_EVIDENCE else set()
        principals = sorted(identity.principals())
        for word in dict.fromkeys(words):
            if len(word) < 3 or word in _ASKING or word.isdigit() or (
                    is_english(word) and word not in placed):
                continue
            known = (self.search.corpus_has(word, identity)
                     or self.catalog.path_mentions(word, principals)
                     # "in prod": what the shorthand stands for is in the documents
                     or any(self.search.corpus_has(other, identity)
                            for other in self.search.synonyms.additions(word)))
            if not known:
                unknown.append(word)
        return unknown

    def _asks_about_hidden(self, query_vec: np.ndarray, results: list[SearchResult],
                           hidden: HiddenTitles) -> bool:
        """Whether the question is about a document the caller may not read, as the readable
        passages that name it show: "How do I rotate the provider keys?" when a public runbook
        says the procedure is in "Rotating payment provider API keys". Answering it from that
        runbook's other steps would be wrong; saying no more than the public text says is not.
        """
        named = {t for r in results[:3] for t in hidden.all_named_in(r.text)}
        if not named:
            return False
        titles = sorted(named)
        vectors = self.dense.embed_documents(titles, use_cache=False)
        return bool(np.max(vectors @ query_vec) >= HIDDEN_TOPIC_SCORE)

    def _hidden_titles(self, identity: Identity) -> HiddenTitles:
        """Titles of documents the caller may not read (of three words or more): a sentence
        that points at one of them is no answer for this caller."""
        key = frozenset(identity.principals())
        now = time.monotonic()
        with self._hidden_lock:
            cached = self._hidden.get(key)
            if cached and now - cached[0] < _HIDDEN_TTL:
                return cached[1]
        titles = titles_matcher(frozenset(t for t in self.catalog.titles_hidden_from(sorted(key))
                                         if len(t.split()) >= 3))
        with self._hidden_lock:
            self._hidden[key] = (now, titles)
            if len(self._hidden) > 1000:
                self._hidden.clear()
        return titles

    # Generated answers ------------------------------------------------------------------
    def _messages(self, p: _Prepared, sources: list[Citation],
                  history: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        passages = [PromptPassage(c.n, c.title, c.heading, _passage_text(p.ev, c))
                    for c in sources]
        return build_messages(p.q.text, passages, history=history)

    def _generated(self, p: _Prepared, sources: list[Citation], text: str,
                   completion: Completion | None) -> Answer:
        """The model's text as the answer, if it is one: NO_ANSWER abstains; markers outside
        the passages' numbers are dropped; an answer that cites nothing is replaced by the
        extractive one. Citation numbers stay those the model saw (and a stream showed)."""
        used = _usage(completion)
        provider = completion.provider if completion else None
        model = completion.model if completion else None
        if text.strip().upper().startswith(NO_ANSWER_TOKEN):
            metrics.ANSWERS.labels("llm", "true").inc()
            return Answer(answer=NO_ANSWER, abstained=True, mode="llm", kind=p.q.kind,
                          evidence=p.evidence, reason="the model found no answer in the "
                          "passages", blocks=[AnswerBlock(type="paragraph", text=NO_ANSWER)],
                          provider=provider, model=model, usage=used)
        text = re.sub(r"\[(\d+)\]", lambda m: m.group(0) if 1 <= int(m.group(1)) <= len(sources)
                      else "", text).strip()
        cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text)})
        if not cited:
            answer = self._extractive(p, "the model's answer cited none of the passages, so "
                                         "this answer is extractive")
            answer.usage = used
            return answer
        metrics.ANSWERS.labels("llm", "false").inc()
        by_n = {c.n: c for c in sources}
        return Answer(answer=text, blocks=blocks_from_markdown(text),
                      citations=[by_n[n] for n in cited], mode="llm", kind=p.q.kind,
                      evidence=p.evidence, provider=provider, model=model, usage=used)


@dataclass
class _Prepared:
    q: Question
    ev: Evidence
    composed: Composed
    evidence: float
    decisions: list[dict[str, Any]]


# The guardrail policy for passages carrying instructions: (its name, the action, the sources it
# covers; empty = all).
Injection = tuple[str, str, frozenset[str]]


def _guard_passages(results: list[SearchResult], injection: Injection | None
                    ) -> tuple[list[SearchResult], list[dict[str, Any]]]:
    """Passages aimed at the model rather than the reader: dropped (``redact``), kept and
    noted (``flag``), or the answer refused (``block``)."""
    if injection is None:
        return results, []
    policy, action, sources = injection
    flagged = [r for r in results if (not sources or r.source in sources)
               and is_injection(r.text)]
    if not flagged:
        return results, []
    decisions = [{"policy": policy, "kind": "injection", "action": action,
                  "where": "passage", "detail": f"{r.title} > {r.heading} carries instructions "
                  f"aimed at the model (score {injection_score(r.text)})"} for r in flagged]
    if action == "block":
        raise GuardrailBlocked(policy, decisions[0]["detail"], decisions)
    if action == "redact":
        results = [r for r in results if r not in flagged]
    return results, decisions


def _usage(completion: Completion | None) -> AnswerUsage | None:
    if completion is None:
        return None
    return AnswerUsage(**completion.usage.as_dict())


def _llm_passages(ev: Evidence, composed: Composed) -> list[Citation]:
    """What the model reads: the sections the extractive answer chose first (whole), then the
    other passages found, each as a citation it can point at."""
    out = list(composed.citations)
    seen = {(c.document_id, c.heading) for c in out}
    for r in ev.results:
        if (r.document_id, r.heading) in seen:
            continue
        seen.add((r.document_id, r.heading))
        out.append(_passage_citation(len(out) + 1, r))
        if len(out) >= 6:
            break
    return out


def _passage_text(ev: Evidence, c: Citation) -> str:
    """The whole section a citation points into, commands included, where the document has an
    outline; the quoted passage otherwise. A quote of step texts alone would hide from the
    model the very commands the engineer needs."""
    text = c.quote
    outline = ev.outlines.get(c.document_id)
    if outline is not None:
        for section in outline.sections:
            if section.path == c.heading and section.plain_text().strip():
                text = section.plain_text()
                break
    if ev.strip_injected:
        text = "\n".join(line for line in text.split("\n") if not is_injection(line))
    return text


def _passage_citation(n: int, r: SearchResult) -> Citation:
    fields = {k: getattr(r, k) for k in ("document_id", "source", "title", "heading", "path",
                                         "url", "start_line", "end_line", "symbol", "score")}
    return Citation(n=n, quote=r.text, **fields)
