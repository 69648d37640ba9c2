"""Hybrid search with permissions and filters applied inside the index query.

Dense (all-MiniLM-L6-v2) and BM25 candidates come from one index query each and are fused in
Python (``citewise.retrieval.fusion``), so both Qdrant backends rank identically. The caller's
principals (public, user:<id>, group:<name>...) go into each query's filter, so a chunk the
caller may not read is never a candidate at all.

The points of a document swap in progress are excluded inside the queries, and hits whose
document version is not the catalog's live version are dropped after them (the page is then
filled up again): that is what makes re-ingesting a document atomic for readers (see
``ingest/swap.py``). It is a consistency check, not a permission check: permissions never
depend on it. The same check keeps every search on one index generation while `citewise
reindex` switches to a new one (``index/generations.py``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from threading import Lock
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, Field

from citewise import metrics
from citewise.errors import BackendError, InvalidRequestError
from citewise.index.catalog import SWAPS_COMMITTED, DocumentCatalog
from citewise.index.dense import DenseEncoder, embedding_text
from citewise.index.generations import LIVE, pinned
from citewise.index.payload import ChunkPayload
from citewise.index.sparse import Bm25Encoder
from citewise.index.vector_index import IndexFilter, SparseVector, VectorHit, VectorIndex
from citewise.retrieval.alert_runbooks import LOOKUP_DEPTH, runbooks_first
from citewise.retrieval.fusion import FusionConfig, fuse
from citewise.retrieval.live_versions import LiveVersions
from citewise.retrieval.ranking.signals import Signals
from citewise.retrieval.rerank import Reranker, RerankError
from citewise.retrieval.synonyms import Synonyms
from citewise.types import Identity, SearchFilters

log = logging.getLogger("citewise.search")

MAX_TOP_K = 100

SearchMode = Literal["hybrid", "dense", "sparse"]
MAX_QUERY_CHARS = 2000
# The weight of a spelled-out synonym in the BM25 query (the question's own terms weigh 1).
SYNONYM_WEIGHT = 0.5
# How many times a page short of live hits is asked for again, each time four times deeper.
_REFILLS = 3
# How many index generations one search may try when the live one changes under it.
_SWITCHES = 3
# How many times one search is asked again when a document swap commits while it runs (an
# ingest writing a burst of documents commits one every few milliseconds); the last answer is
# kept, as likely right as any.
_COMMITS = 4


class Passage(BaseModel):
    """Where a piece of a document sits: what every search result and every citation shows."""

    document_id: str
    source: str = Field(description="The source's name.")
    title: str
    heading: str = Field(description="Heading path inside the document.")
    path: str | None = Field(default=None, description="Path inside the source (file sources).")
    url: str | None = Field(
        default=None, description="The most precise link: its lines or heading, else the page."
    )
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = Field(default=None, description="Code: the function or class it holds.")
    score: float = 0.0


class SearchResult(Passage):
    """One chunk that matched, best first."""

    chunk_id: str
    text: str
    anchor: str | None = None
    service: str | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="What the source knows: repository, language, last commit, breadcrumb...",
    )
    # For the answer composer (``ChunkPayload.continues_symbol``); not part of the API's
    # search results, which keep their shape.
    continues_symbol: bool | None = Field(default=None, exclude=True)

    @classmethod
    def from_hit(cls, hit: VectorHit) -> SearchResult:
        p = hit.payload
        return cls(
            chunk_id=hit.id, document_id=p.document_id, source=p.source, title=p.title,
            heading=p.heading, text=p.text, score=round(float(hit.score), 6), path=p.path,
            url=chunk_link(p), anchor=p.anchor, start_line=p.start_line, end_line=p.end_line,
            service=p.service, tags=list(p.tags), symbol=p.symbol, metadata=dict(p.meta),
            continues_symbol=p.continues_symbol,
        )


class _Mark(NamedTuple):
    """What a search reads of the catalog before its index queries and again after them: if
    neither moved, its hits are of one generation and of the live versions."""

    committed: str  # the swap count (``DocumentCatalog.swaps_committed``)
    generation: str  # the live generation's name (``index/generations.py``)


class SecondStage(Protocol):
    """Re-scores the best fused candidates of a hybrid search (``ranking/stage.py``)."""

    @property
    def candidates(self) -> int:
        """How many fused chunks it re-scores."""
        ...

    def reorder(self, query: str, results: list[SearchResult],
                signals: Signals) -> list[SearchResult]:
        """``results`` (fused order) best first, each with its new score."""
        ...


class SearchService:
    def __init__(
        self,
        *,
        catalog: DocumentCatalog,
        index: VectorIndex,
        dense: DenseEncoder,
        sparse: Bm25Encoder,
        prefetch: int = 50,
        fusion: FusionConfig | None = None,
        max_top_k: int = MAX_TOP_K,
        reranker: Reranker | None = None,
        rerank_candidates: int = 20,
        synonyms: Synonyms | None = None,
        learned: SecondStage | None = None,
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.dense = dense
        self.sparse = sparse
        self.prefetch = prefetch
        self.fusion = fusion or FusionConfig()
        # The API's bound; `citewise eval` raises it to rank enough documents for Recall@100.
        self.max_top_k = max_top_k
        # Optional (off by default): reorders the best ``rerank_candidates`` fused chunks.
        self.reranker = reranker
        self.rerank_candidates = rerank_candidates
        # On-call shorthand spelled out ("pg" -> postgres): added to the query, never replacing it.
        self.synonyms = synonyms if synonyms is not None else Synonyms()
        # Optional (on when a ranking model file is present): re-scores the best fused
        # candidates of a hybrid search before the page is cut (``ranking/``).
        self.learned = learned
        self._query_vectors: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._cache_lock = Lock()
        self.live_versions = LiveVersions(catalog)

    def query_vector(self, query: str) -> list[float]:
        """Query embeddings, with a small LRU: dashboards and bots repeat their questions.
        Keyed by the model too: a reindex can switch this process to another one."""
        key = (self.dense.model_id, query)
        with self._cache_lock:
            if key in self._query_vectors:
                self._query_vectors.move_to_end(key)
                return self._query_vectors[key]
        vec = self.dense.embed_query(query)
        with self._cache_lock:
            self._query_vectors[key] = vec
            while len(self._query_vectors) > 1024:
                self._query_vectors.popitem(last=False)
        return vec

    def sparse_query(self, query: str) -> SparseVector:
        """The BM25 query: the question's own terms at full weight, what its shorthand stands
        for ("pg" -> postgres) at half, so that a spelled-out word helps a passage without
        outweighing the words the engineer actually typed."""
        vector = self.sparse.embed_query(query)
        more = self.synonyms.additions(query)
        if not more:
            return vector
        weights = dict(zip(vector.indices, vector.values, strict=True))
        extra = self.sparse.embed_query(" ".join(more))
        for i in extra.indices:
            weights.setdefault(i, SYNONYM_WEIGHT)
        ids = sorted(weights)
        return SparseVector(ids, [weights[i] for i in ids])

    def corpus_has(self, word: str, identity: Identity) -> bool:
        """Whether any passage ``identity`` may read contains ``word`` (as BM25 reads it)."""
        sparse = self.sparse.embed_query(word)
        if not sparse.indices:
            return True  # a stop word
        hits = self.index.search(sparse, filter=IndexFilter(readers=identity.principals()),
                                 limit=1)
        return bool(hits)

    def search(
        self,
        query: str,
        identity: Identity,
        *,
        top_k: int = 10,
        filters: SearchFilters | None = None,
        mode: SearchMode = "hybrid",
        fusion: FusionConfig | None = None,
        learned: bool = True,
    ) -> list[SearchResult]:
        """Best chunks first. ``fusion`` overrides the service's fusion for this one call;
        ``learned=False`` leaves the learned stage out of it (the fused ranking alone)."""
        started = time.perf_counter()
        stage = self.learned if learned and mode == "hybrid" else None
        wanted = top_k
        if stage is not None:
            wanted = max(wanted, stage.candidates)
        if self.reranker is not None:
            wanted = max(wanted, self.rerank_candidates)
        results, signals = self._fused(query, identity, top_k, wanted, filters, mode, fusion,
                                       stage is not None)
        if stage is not None:
            ranking = time.perf_counter()
            results = stage.reorder(query.strip(), results, signals)
            metrics.SEARCH_RANK_LATENCY.observe(time.perf_counter() - ranking)
        if self.reranker is not None:
            results = self._rerank(self.reranker, query.strip(),
                                   results[:max(top_k, self.rerank_candidates)])
        # Last, so that no later stage puts a sibling alert's runbook back above it.
        results = runbooks_first(query, results, lambda name: self._fused(
            name, identity, LOOKUP_DEPTH, LOOKUP_DEPTH, filters, "sparse", None, False)[0])
        metrics.SEARCH_LATENCY.observe(time.perf_counter() - started)
        return results[:top_k]

    def candidates(self, query: str, identity: Identity, *, depth: int,
                   filters: SearchFilters | None = None) -> tuple[list[SearchResult], Signals]:
        """The best ``depth`` fused chunks of a hybrid search, as the learned stage receives
        them, and what fusion saw of each: what `citewise rank train` learns from."""
        return self._fused(query, identity, depth, depth, filters, "hybrid", None, True)

    def _fused(self, query: str, identity: Identity, top_k: int, wanted: int,
               filters: SearchFilters | None, mode: SearchMode, fusion: FusionConfig | None,
               want_signals: bool) -> tuple[list[SearchResult], Signals]:
        query = (query or "").strip()
        if not query:
            raise InvalidRequestError("the query is empty", hint="ask something, e.g. q=disk full")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidRequestError(
                f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}"
            )
        if not 1 <= top_k <= self.max_top_k:
            raise InvalidRequestError(
                f"top_k must be between 1 and {self.max_top_k}, not {top_k}"
            )
        if mode not in ("hybrid", "dense", "sparse"):
            raise InvalidRequestError(f"mode must be hybrid, dense or sparse, not {mode!r}")
        filters = filters or SearchFilters()
        index_filter = IndexFilter(
            readers=identity.principals(),
            sources=list(filters.sources),
            path_prefix=(filters.path_prefix or "").strip("/") or None,
            tags=[t.lower() for t in filters.tags],
            services=list(filters.services),
            document_ids=list(filters.document_ids),
        )
        signals = Signals() if want_signals else None
        mark = self._mark()
        for attempt in range(1, _COMMITS + 1):
            # Points of a document swap in progress are excluded inside the query; a hit whose
            # version the catalog has just replaced is dropped after it, and the page is filled
            # up again, so such points never cost the caller a result. A swap that commits
            # while the search runs can still hide its document: excluded new points and old
            # ones deleted by the time the engine looks, or only old points found and the new
            # version read from the catalog after. The search is then asked again.
            index_filter.exclude_ids = self.catalog.stale_point_ids()
            current, mark, after = self._live_hits(query, index_filter, wanted, mode,
                                                   fusion or self.fusion, mark, signals)
            if after.committed == mark.committed or attempt == _COMMITS:
                break
            metrics.SEARCH_RETRIES.labels("swap").inc()
            mark = after
        return [SearchResult.from_hit(h) for h in current[:wanted]], signals or Signals()

    def _mark(self) -> _Mark:
        """The swap count and the live generation, in one catalog read."""
        facts = self.catalog.meta_many(SWAPS_COMMITTED, LIVE)
        return _Mark(facts.get(SWAPS_COMMITTED, "0"), facts.get(LIVE, ""))

    def _live_hits(self, query: str, index_filter: IndexFilter, wanted: int, mode: SearchMode,
                   fusion: FusionConfig, mark: _Mark, signals: Signals | None = None,
                   ) -> tuple[list[VectorHit], _Mark, _Mark]:
        """Hits of one index generation (``index/generations.py``), all of the catalog's live
        versions as of ``mark``; with the mark they were checked against and the one read after
        them. A search that straddles a switch to a new generation (``citewise reindex``) is
        asked again of the new one: its hits would all be dropped as replaced versions, or its
        generation dropped under it."""
        for attempt in range(1, _SWITCHES + 1):
            with pinned(self.index, mark.generation) as (generation, index):
                try:
                    hits = self._versioned_hits(index, query, index_filter, wanted, mode, fusion,
                                                (mark.committed, generation), signals)
                except BackendError:
                    after = self._mark()
                    if attempt == _SWITCHES or generation in (None, after.generation):
                        raise
                    metrics.SEARCH_RETRIES.labels("generation").inc()
                    mark = after
                    continue
            # The catalog's versions were read before this: if the pointer has not moved
            # since, they are the versions of ``generation``, and so are the hits.
            after = self._mark()
            if generation in (None, after.generation):
                return hits, mark, after
            if attempt < _SWITCHES:
                metrics.SEARCH_RETRIES.labels("generation").inc()
            mark = after
        # Switched under every try: these hits were checked against another generation's
        # versions, so they may be missing documents. Better a retry than a short page.
        raise BackendError(
            f"the index switched to a new generation {_SWITCHES} times during one search",
            hint="retry the search; a `citewise reindex` is switching generations right now",
        )

    def _versioned_hits(self, index: VectorIndex, query: str, index_filter: IndexFilter,
                        wanted: int, mode: SearchMode, fusion: FusionConfig,
                        mark: tuple[str, str | None], signals: Signals | None = None,
                        ) -> list[VectorHit]:
        """Hits of ``index`` whose versions are live as of ``mark`` (the swap count read before
        the queries, and the generation)."""
        committed, generation = mark
        limit = wanted + 10
        for attempt in range(1, _REFILLS + 1):
            if mode == "hybrid":
                hits = self._hybrid(index, query, index_filter, limit, fusion, signals)
            else:
                vector = (self.query_vector(query) if mode == "dense"
                          else self.sparse_query(query))
                hits = index.search(vector, filter=index_filter, limit=limit)
            # Break score ties by id so that the same query always returns the same results.
            hits.sort(key=lambda h: (-h.score, h.id))
            live = self.live_versions.of((h.payload.document_id for h in hits),
                                         committed=committed, generation=generation)
            current = [h for h in hits if live.get(h.payload.document_id) == h.payload.version]
            if len(current) >= wanted or len(hits) < limit or attempt == _REFILLS:
                break
            metrics.SEARCH_RETRIES.labels("refill").inc()
            limit *= 4
        return current

    def _rerank(self, reranker: Reranker, query: str,
                results: list[SearchResult]) -> list[SearchResult]:
        # ``reranker`` is ``self.reranker``, handed over once the caller has seen it is set.
        passages = [embedding_text(r.title, r.heading, r.text) for r in results]
        try:
            scores = reranker.scores(query, passages)
        except RerankError as e:
            # The fused ranking is still a good answer; a broken reranker must not fail search.
            log.warning("reranking failed, returning the fused ranking: %s", e)
            return results
        for r, score in zip(results, scores, strict=True):
            r.score = round(float(score), 6)
        return sorted(results, key=lambda r: -r.score)

    def _hybrid(self, index: VectorIndex, query: str, index_filter: IndexFilter, limit: int,
                fusion: FusionConfig, signals: Signals | None = None) -> list[VectorHit]:
        # Each list goes deeper than the page: a chunk ranked 30th by both methods can belong
        # in the fused top 10. The permission filter is inside both queries.
        # Ids and scores only: the payloads (chunk texts) of the fused page alone are read.
        depth = max(self.prefetch, limit)
        dense_hits = index.rank(self.query_vector(query), filter=index_filter, limit=depth)
        sparse_hits = index.rank(self.sparse_query(query), filter=index_filter, limit=depth)
        if signals is not None:
            signals.record([(h.id, h.score) for h in dense_hits],
                           [(h.id, h.score) for h in sparse_hits])
        page = fuse(dense_hits, sparse_hits, fusion)[:limit]
        payloads = index.payloads([h.id for h in page])
        # A point deleted since it was ranked belongs to a swap that committed meanwhile: the
        # search sees the count move and is asked again (``_fused``).
        return [VectorHit(h.id, h.score, payloads[h.id]) for h in page if h.id in payloads]


def chunk_link(p: ChunkPayload) -> str | None:
    """The most precise link to a chunk: its lines or its heading, else its document."""
    return line_link(p.url, p.link_template, p.anchor, p.start_line, p.end_line)


def line_link(url: str | None, template: str | None, anchor: str | None, start: int | None,
              end: int | None) -> str | None:
    """The most precise link to lines or a heading of a document, else the document.

    A connector's ``link_template`` (``.../blob/<sha>/app.py#L{start}-L{end}``) is pinned to the
    indexed commit, so the link shows exactly the lines that were indexed even after the branch
    moves on.
    """
    if template:
        needs_lines = "{start}" in template or "{end}" in template
        if not (needs_lines and start is None) and not ("{anchor}" in template and not anchor):
            return (
                template.replace("{start}", str(start))
                .replace("{end}", str(end or start))
                .replace("{anchor}", anchor or "")
            )
    if not url:
        return None
    return f"{url}#{anchor}" if anchor and "#" not in url else url
