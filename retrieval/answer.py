"""Cited answers. Extractive by default (no LLM needed); an OpenAI-compatible LLM when configured.

The extractive answer quotes the passages' own sentences, list items and command lines that are
closest to the question, each followed by ``[n]`` pointing at its citation. It abstains when
the best passage is not close enough to the question: saying "I found nothing" beats a
confident quote from the wrong runbook.

Evidence is measured with the dense model's cosine similarity between the question and each
retrieved chunk (the chunk vectors come from the embedding cache, so this costs one lookup).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, Field, field_serializer

from citewise import metrics
from citewise.index.dense import DenseEncoder, embedding_text
from citewise.index.sparse import Bm25Encoder
from citewise.retrieval.llm import LLMClient, LLMError
from citewise.retrieval.search import Passage, SearchResult, SearchService
from citewise.types import Identity, SearchFilters

log = logging.getLogger("citewise.answer")

NO_ANSWER = "I could not find an answer to that in the knowledge base you can read."
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])")
_COMMAND_HINT = re.compile(r"^(\$ |kubectl |psql |redis-cli |curl |aws |terraform |helm |git |"
                           r"systemctl |sudo |shipit |ffctl |SELECT |select |docker |make )")
# "What do I do when...", "how do I fix...": the asker wants steps, which runbooks keep under
# headings like these.
_ACTION_QUESTION = re.compile(
    r"\b(what (do|should) (i|we) do|how (do|can|should) (i|we)|how to|fix|mitigat|resolv|"
    r"recover|restore|steps?)\b", re.I
)
_ACTION_HEADING = re.compile(
    r"(mitigat|remediat|resolut|fix|steps|procedure|recover|restor|rollback|roll back|how to|"
    r"what to do|runbook)", re.I
)
MAX_UNIT_CHARS = 400
_DOCSTRING_QUOTES = re.compile(r'^[rRbBuU]?(?:"""|\'\'\')|(?:"""|\'\'\')$')


class Citation(Passage):
    """A passage an answer rests on; ``[n]`` in the answer text points at it."""

    n: int = Field(description="The number used as [n] in the answer.")
    quote: str = Field(description="The passage text the answer quotes.")


class Answer(BaseModel):
    answer: str = Field(description="Markdown with [n] markers resolving to `citations`.")
    citations: list[Citation] = Field(default_factory=list)
    abstained: bool = Field(
        default=False, description="True when the evidence was too weak to answer."
    )
    mode: str = Field(default="extractive", description="extractive or llm")
    evidence: float = Field(
        default=0.0, description="Similarity of the best passage to the question."
    )

    @field_serializer("evidence")
    def _round(self, value: float) -> float:
        return round(value, 4)


@dataclass
class _Unit:
    text: str
    result_rank: int
    position: int
    is_code: bool
    score: float = 0.0
    terms: set[str] = field(default_factory=set)  # stemmed BM25 terms


class AnswerService:
    def __init__(
        self,
        *,
        search: SearchService,
        dense: DenseEncoder,
        sparse: Bm25Encoder,
        min_score: float = 0.30,
        llm: LLMClient | None = None,
        passages: int = 5,
        max_units: int = 4,
    ) -> None:
        self.search = search
        self.dense = dense
        self.sparse = sparse
        self.min_score = min_score
        self.llm = llm
        self.passages = passages
        self.max_units = max_units

    def answer(
        self, question: str, identity: Identity, filters: SearchFilters | None = None
    ) -> Answer:
        results = self.search.search(question, identity, top_k=self.passages, filters=filters)
        query_vec = np.asarray(self.search.query_vector(question), dtype=np.float32)
        if not results:
            return self._abstain(0.0)
        chunk_vecs = self.dense.embed_documents(
            [embedding_text(r.title, r.heading, r.text) for r in results]
        )
        relevance = chunk_vecs @ query_vec
        evidence = float(relevance.max())
        if evidence < self.min_score:
            return self._abstain(evidence)
        # Keep passages reasonably close to the best one; far weaker ones only add noise.
        keep = [r for r, s in zip(results, relevance, strict=True) if s >= evidence - 0.2]
        if self.llm is not None:
            try:
                answer = self._llm_answer(question, keep)
                answer.evidence = evidence
                metrics.ANSWERS.labels("llm", str(answer.abstained).lower()).inc()
                return answer
            except LLMError as e:
                log.warning("LLM answer failed, falling back to extractive: %s", e)
        answer = self._extractive(question, query_vec, keep)
        answer.evidence = evidence
        metrics.ANSWERS.labels("extractive", str(answer.abstained).lower()).inc()
        return answer

    def _abstain(self, evidence: float) -> Answer:
        metrics.ANSWERS.labels("extractive", "true").inc()
        return Answer(answer=NO_ANSWER, abstained=True, evidence=evidence)

    # Extractive ----------------------------------------------------------------------------
    def _extractive(self, question: str, query_vec: np.ndarray, results: list[SearchResult]):
        q_terms = set(self.sparse.terms(question))
        title_terms = [set(self.sparse.terms(r.title)) for r in results]
        units = []
        for rank, r in enumerate(results):
            for u in _units(r.text, rank):
                # A unit that only restates the question or the title has nothing to quote;
                # dropping it before embedding keeps this hot path short.
                u.terms = set(self.sparse.terms(u.text))
                if u.is_code or len(u.terms - q_terms - title_terms[rank]) >= 3:
                    units.append(u)
        if not units:
            return Answer(answer=NO_ANSWER, abstained=True)
        # Each unit is embedded with its passage's title and heading, as chunks are: "Scale
        # out the pods" alone says little, under "Checkout API high latency > Mitigation" a lot.
        vecs = self.dense.embed_documents([
            embedding_text(results[u.result_rank].title, results[u.result_rank].heading, u.text)
            for u in units
        ], use_cache=False)
        wants_steps = bool(_ACTION_QUESTION.search(question))
        for u, v in zip(units, vecs, strict=True):
            overlap = len(q_terms & u.terms) / max(1, len(q_terms))
            # Similarity first, shared words second, and a nudge towards better-ranked passages.
            u.score = float(v @ query_vec) + 0.15 * overlap - 0.02 * u.result_rank
            if wants_steps and _ACTION_HEADING.search(results[u.result_rank].heading):
                u.score += 0.08
            if not u.is_code and len(u.text.split()) < 5:
                u.score -= 0.15  # fragments ("Steps:", a bare title) read badly on their own
        best = sorted(units, key=lambda u: u.score, reverse=True)
        chosen: list[_Unit] = []
        passages: set[int] = set()
        for u in best:
            if len(chosen) >= self.max_units or u.score < best[0].score - 0.12:
                break
            if u.result_rank not in passages and len(passages) >= 2:
                continue  # quotes from many passages read as a collage
            chosen.append(u)
            passages.add(u.result_rank)
            # A line that introduces a command ("Check the lag:") brings its command along.
            if u.text.rstrip().endswith(":"):
                nxt = next(
                    (x for x in units
                     if x.result_rank == u.result_rank and x.position == u.position + 1),
                    None,
                )
                if nxt is not None and nxt not in chosen:
                    chosen.append(nxt)
        if wants_steps:
            chosen.extend(self._steps_if_missing(units, chosen, results))
        if not chosen:
            return Answer(answer=NO_ANSWER, abstained=True)
        chosen.sort(key=lambda u: (u.result_rank, u.position))
        citations: dict[int, Citation] = {}
        sentences = []
        for u in chosen:
            r = results[u.result_rank]
            if u.result_rank not in citations:
                citations[u.result_rank] = _citation(len(citations) + 1, r, [])
            c = citations[u.result_rank]
            c.quote = f"{c.quote}\n{u.text}".strip()
            text = f"`{u.text}`" if u.is_code else u.text.lstrip("- ").strip()
            if not u.is_code and text[-1:] not in ".!?:":
                text += "."
            sentences.append(f"{text} [{c.n}]")
        return Answer(answer=" ".join(sentences), citations=list(citations.values()))

    def _steps_if_missing(
        self, units: list[_Unit], chosen: list[_Unit], results: list[SearchResult]
    ) -> list[_Unit]:
        """For "what do I do" questions, quote the top document's mitigation steps too.

        Sentences that restate the alert are closest to such a question, so without this the
        answer explains what fired but not what to do about it.
        """
        if any(_ACTION_HEADING.search(results[u.result_rank].heading) for u in chosen):
            return []
        top_doc = results[0].document_id
        candidates = [
            u for u in units
            if results[u.result_rank].document_id == top_doc
            and _ACTION_HEADING.search(results[u.result_rank].heading)
        ]
        if not candidates:
            return []
        rank = max(candidates, key=lambda u: u.score).result_rank
        in_passage = [u for u in candidates if u.result_rank == rank]
        return sorted(in_passage, key=lambda u: u.score, reverse=True)[:2]

    # LLM -----------------------------------------------------------------------------------
    def _llm_answer(self, question: str, results: list[SearchResult]) -> Answer:
        assert self.llm is not None
        text = self.llm.answer(question, [(r.title, r.heading, r.text) for r in results])
        if text.strip().upper().startswith("NO_ANSWER"):
            return Answer(answer=NO_ANSWER, abstained=True, mode="llm")
        used = sorted({int(n) for n in re.findall(r"\[(\d+)\]", text)})
        valid = [n for n in used if 1 <= n <= len(results)]
        if not valid:
            raise LLMError("the model's answer cites none of the passages")
        # Drop markers that point nowhere, and renumber the rest densely.
        renumber = {old: new for new, old in enumerate(valid, start=1)}
        text = re.sub(
            r"\[(\d+)\]",
            lambda m: f"[{renumber[int(m.group(1))]}]" if int(m.group(1)) in renumber else "",
            text,
        )
        citations = [
            _citation(renumber[n], results[n - 1], [results[n - 1].text]) for n in valid
        ]
        return Answer(answer=text.strip(), citations=citations, mode="llm")


def _citation(n: int, r: SearchResult, quote: list[str]) -> Citation:
    return Citation(n=n, quote="\n".join(quote), **r.model_dump(include=_PASSAGE_FIELDS))


_PASSAGE_FIELDS = set(Passage.model_fields)


def _is_command(line: str) -> bool:
    if line.startswith(("$ ", "#!")):
        return True
    # "shipit is our deploy tool. It..." starts like a command but is prose.
    return bool(_COMMAND_HINT.match(line)) and len(line) < 200 and not line.endswith(".")


def _units(text: str, rank: int) -> list[_Unit]:
    """Quotable pieces of a chunk: sentences of prose, whole list items and command lines."""
    units: list[_Unit] = []
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        is_code = _is_command(line)
        pieces = [line] if is_code else _SENTENCE.split(line)
        for piece in pieces:
            # A docstring's quotes are code syntax, not part of what it says.
            piece = _DOCSTRING_QUOTES.sub("", piece.strip()).strip()
            if len(piece) > MAX_UNIT_CHARS:
                piece = piece[:MAX_UNIT_CHARS].rsplit(" ", 1)[0] + " …"
            if len(piece) >= 3:
                units.append(_Unit(piece, rank, len(units), is_code))
    return units
