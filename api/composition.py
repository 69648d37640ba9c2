"""The composition root: the one place that turns settings into working services.

Everything swappable (the stores' database, embedded Qdrant or a server, a local folder or S3,
extractive answers or an LLM) is chosen here, from ``Settings``, and nowhere else.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from citewise.api.conversation_store import ConversationStore
from citewise.api.conversations import Conversations
from citewise.api.feedback_counts import StoredFeedbackCounts
from citewise.api.guardrails import Guardrails
from citewise.api.identity.authenticate import Authenticator, GroupBounds
from citewise.api.identity.groups import GroupMap
from citewise.api.identity.key_store import KeyStore
from citewise.api.identity.keys import ApiKeys
from citewise.api.identity.settings import IdentitySettings
from citewise.api.identity.sqlite_key_store import SqliteKeyStore
from citewise.api.identity.tokens import KeySet, TokenPolicy, TokenVerifier
from citewise.api.metering.audit import AuditLog
from citewise.api.metering.buckets import (
    BucketLevels,
    LocalLevels,
    SharedLevels,
    TokenBuckets,
)
from citewise.api.metering.limits import RateLimiter
from citewise.api.metering.sqlite_store import SqliteMeteringStore
from citewise.api.metering.store import MeteringStore
from citewise.api.metering.usage import UsageLog
from citewise.api.settings import Settings
from citewise.api.sqlite_conversation_store import SqliteConversationStore
from citewise.errors import ConfigError
from citewise.gateway import Gateway
from citewise.gateway.provider import ProviderSpec
from citewise.gateway.settings import GatewaySettings
from citewise.index.blobs import BlobStore, LocalBlobStore, S3BlobStore
from citewise.index.catalog import DocumentCatalog
from citewise.index.dense import DenseEncoder, EmbeddingCache, RemoteEmbeddings
from citewise.index.generations import IndexStore, LiveIndex, ModelChange
from citewise.index.settings import EmbeddingSettings
from citewise.index.source_store import SourceStore
from citewise.index.sparse import Bm25Encoder
from citewise.index.sqlite_catalog import SqliteDocumentCatalog
from citewise.index.sqlite_source_store import SqliteSourceStore
from citewise.index.sqlite_staging import SqliteCatalogStaging
from citewise.index.staging import CatalogStaging
from citewise.index.vector_index import VectorIndex
from citewise.ingest.jobs import InProcessJobQueue, JobQueue
from citewise.ingest.pacing import Pacer
from citewise.ingest.pipeline import IngestPipeline
from citewise.ingest.reindex import Reindexer
from citewise.ingest.runlock import FileRunLock, RunLock
from citewise.ingest.schedule import Scheduler, last_run_started, plan, zone_of
from citewise.private_files import describe, private_folder, too_open
from citewise.retrieval.answering import AnswerService
from citewise.retrieval.answering.cache import SemanticCache
from citewise.retrieval.answering.cache_store import AnswerCacheStore, InMemoryAnswerCache
from citewise.retrieval.fusion import FusionConfig
from citewise.retrieval.library import DeclaredSource, LibraryService
from citewise.retrieval.ranking.features import RankFeatures
from citewise.retrieval.ranking.model import DEFAULT_FILE as DEFAULT_RANK_MODEL_FILE
from citewise.retrieval.ranking.model import RankModel
from citewise.retrieval.ranking.stage import LearnedStage
from citewise.retrieval.rerank import CrossEncoderReranker, HttpReranker, Reranker
from citewise.retrieval.search import SearchService
from citewise.retrieval.settings import RetrievalSettings
from citewise.retrieval.synonyms import Synonyms
from citewise.retrieval.vocabulary import Vocabulary
from citewise.serving import REQUESTS
from citewise.settings import CoreSettings, comma_separated, find_source
from citewise.sqlite import SqliteDatabase

if TYPE_CHECKING:
    # The HTTP answering door imports FastAPI: the CLI's commands build services without it.
    from citewise.api.answering import Answering
    from citewise.postgres import PostgresDatabase

log = logging.getLogger("citewise")


@dataclass
class Stores:
    """Every store the service keeps its state in, each behind its contract, all in one
    database: by default the embedded SQLite file ``<data dir>/catalog.db`` (so that one file
    holds, backs up and restores the whole state; the answer cache is then this process's
    memory), or with ``CITEWISE_DATABASE_URL`` a PostgreSQL database that every replica shares,
    the answer cache and the rate limits included."""

    catalog: DocumentCatalog
    sources: SourceStore
    keys: KeyStore
    metering: MeteringStore
    conversations: ConversationStore
    answer_cache: AnswerCacheStore
    staging: CatalogStaging  # where `citewise reindex` builds a generation's catalog
    # Where a front door's rate-limit buckets keep their levels (``api/metering/buckets.py``):
    # one per door, in this process's memory saved to ``metering``, or ``metering``'s own rows
    # that every replica changes in place.
    bucket_levels: Callable[[], BucketLevels]
    versions: Callable[[], dict[str, int]]  # each store's schema version
    close: Callable[[], None]
    # The shared database of CITEWISE_DATABASE_URL (None: one machine's SQLite file), which
    # also keeps the run lock and the ingest jobs (``build_ingest_runs``); a pgvector index
    # shares its pool, so that a process keeps one pool.
    postgres: PostgresDatabase | None = None

    @property
    def backend(self) -> str:
        """Which database the state is in, as /healthz says it."""
        return "sqlite" if self.postgres is None else "postgresql"


def build_stores(settings: Settings) -> Stores:
    """Open (and migrate, each store its own tables) the stores of ``settings``: in PostgreSQL
    when ``CITEWISE_DATABASE_URL`` is set, else in the data folder's SQLite file."""
    if settings.database_url:
        return build_postgres_stores(settings, settings.database_url)
    database = SqliteDatabase(settings.data.catalog_path)
    sources = SqliteSourceStore(database)  # before the documents, which name their source
    metering = SqliteMeteringStore(database)
    return Stores(
        catalog=SqliteDocumentCatalog(database), sources=sources,
        keys=SqliteKeyStore(database), metering=metering,
        conversations=SqliteConversationStore(database),
        answer_cache=InMemoryAnswerCache(settings.retrieval.answer_cache_size),
        staging=SqliteCatalogStaging(settings.data_dir / "reindex"),
        bucket_levels=lambda: LocalLevels(metering),
        versions=database.store_versions, close=database.close)


def build_database(settings: CoreSettings) -> PostgresDatabase | None:
    """The pool of connections to CITEWISE_DATABASE_URL's database, one per process; None
    without one (the embedded SQLite file). Imported here: an embedded installation never
    loads the driver."""
    if not settings.database_url:
        return None
    from citewise.postgres import PostgresDatabase

    return PostgresDatabase(settings.database_url, pool_size=settings.database_pool_size,
                            connect_timeout=settings.database_timeout)


def build_ingest_runs(settings: Settings, stores: Stores,
                      pipeline: IngestPipeline) -> tuple[RunLock, JobQueue]:
    """The run lock (one ingest run at a time, whoever starts it) and the job queue: in the
    shared database when there is one, so that every replica and worker shares them; else the
    data folder's lock file and this process's memory."""
    if stores.postgres is not None:
        from citewise.ingest.pg_jobs import PostgresJobQueue
        from citewise.ingest.pg_runlock import PostgresRunLock

        lock = PostgresRunLock(stores.postgres)
        pipeline.fence = lock.check
        return lock, PostgresJobQueue(stores.postgres, pipeline, lock)
    file_lock = FileRunLock(settings.data.run_lock_path)
    return file_lock, InProcessJobQueue(pipeline, file_lock)


@contextmanager
def run_lock_of(settings: Settings) -> Iterator[RunLock]:
    """The run lock alone, for a command that builds no services (backup, reindex)."""
    postgres = build_database(settings)
    if postgres is None:
        yield FileRunLock(settings.data.run_lock_path)
        return
    from citewise.ingest.pg_runlock import PostgresRunLock

    try:
        yield PostgresRunLock(postgres)
    finally:
        if postgres is not None:
            postgres.close()


def build_postgres_stores(settings: Settings, url: str) -> Stores:
    """The stores in the PostgreSQL database at ``url``, on one pool that ``Stores.close``
    closes. Imported here: an embedded installation never loads the driver."""
    from citewise.api.identity.postgres_key_store import PostgresKeyStore
    from citewise.api.metering.postgres_store import PostgresMeteringStore
    from citewise.api.postgres_conversation_store import PostgresConversationStore
    from citewise.index.postgres_catalog import PostgresDocumentCatalog
    from citewise.index.postgres_source_store import PostgresSourceStore
    from citewise.index.postgres_staging import PostgresCatalogStaging
    from citewise.postgres import PostgresDatabase
    from citewise.retrieval.answering.postgres_cache_store import PostgresAnswerCache

    database = PostgresDatabase(url, pool_size=settings.database_pool_size,
                                connect_timeout=settings.database_timeout)
    try:
        sources = PostgresSourceStore(database)  # before the documents, which name their source
        metering = PostgresMeteringStore(database)
        return Stores(
            catalog=PostgresDocumentCatalog(database), sources=sources,
            keys=PostgresKeyStore(database), metering=metering,
            conversations=PostgresConversationStore(database),
            answer_cache=PostgresAnswerCache(database, settings.retrieval.answer_cache_size),
            staging=PostgresCatalogStaging(database),
            bucket_levels=lambda: SharedLevels(metering),
            versions=database.store_versions, close=database.close, postgres=database)
    except BaseException:
        database.close()
        raise


@dataclass
class Services:
    settings: Settings
    stores: Stores
    catalog: DocumentCatalog  # the stores' own, at hand for the many that read it
    sources: SourceStore
    index: LiveIndex
    blobs: BlobStore
    dense: DenseEncoder
    sparse: Bm25Encoder
    pipeline: IngestPipeline
    search: SearchService
    answers: AnswerService
    library: LibraryService
    run_lock: RunLock  # one ingest run at a time: jobs, the CLI's runs, repairs, backups
    jobs: JobQueue
    gateway: Gateway | None = None
    conversations: Conversations | None = None
    guardrails: Guardrails | None = None

    @property
    def index_kind(self) -> str:
        return index_kind(self.settings)

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
        self.index.close()
        self.stores.close()


def build_remote_embeddings(embedding: EmbeddingSettings,
                            calls: GatewaySettings) -> RemoteEmbeddings | None:
    """An embeddings API through the model gateway (retries, breaker, metrics; ``calls``'
    attempts and breaker), when set."""
    if not embedding.embedding_url:
        return None
    if not embedding.embedding_model:
        raise ConfigError("CITEWISE_EMBEDDING_URL is set but CITEWISE_EMBEDDING_MODEL is not",
                          hint="name the model the endpoint serves, e.g. BAAI/bge-small-en-v1.5")
    if embedding.embedding_model_path:
        raise ConfigError("both CITEWISE_EMBEDDING_URL and CITEWISE_EMBEDDING_MODEL_PATH are set",
                          hint="choose the remote model or the local one")
    url = embedding.embedding_url

    def gateway(name: str, model: str) -> Gateway:
        return Gateway.from_specs(
            [ProviderSpec(name=name, base_url=url, model=model,
                          api_key=embedding.embedding_api_key,
                          timeout=embedding.embedding_timeout,
                          max_concurrency=embedding.embedding_concurrency)],
            deadline=embedding.embedding_timeout * 3, max_attempts=calls.llm_max_attempts,
            breaker_threshold=calls.llm_breaker_failures,
            breaker_reset=calls.llm_breaker_reset)

    query_model = embedding.embedding_query_model
    documents = gateway("embeddings", embedding.embedding_model)
    return RemoteEmbeddings(
        model=embedding.embedding_model, embed=documents.embed, dim=embedding.embedding_dim,
        concurrency=embedding.embedding_concurrency, query_model=query_model,
        embed_query=gateway("embeddings-query", query_model).embed if query_model else None)


def build_dense(settings: Settings) -> DenseEncoder:
    # The loaded model is shared per process (see index.dense); the cache is per data folder.
    return DenseEncoder(
        settings.embedding.embedding_model_path,
        batch_size=settings.embedding.embedding_batch_size,
        cache=EmbeddingCache(settings.data.embedding_cache_path),
        remote=build_remote_embeddings(settings.embedding, settings.gateway),
        units=settings.embedding.embedding_unit_precision,
    )


def embedding_source(embedding: EmbeddingSettings) -> dict:
    """Where the configured model comes from, without secrets: what a reindex records so that
    a server started with another model can load this one at the switch."""
    if embedding.embedding_url:
        return {"url": embedding.embedding_url, "model": embedding.embedding_model}
    return {"path": str(embedding.embedding_model_path)} if embedding.embedding_model_path \
        else {}


def model_loader(settings: Settings, dense: DenseEncoder):
    """``LiveIndex``'s ``load_model``: an encoder for a recorded source, with this process's
    other settings (its endpoint key, batch size), made current by adopting it into ``dense``,
    the one encoder every part of the process holds."""
    def load(source: dict) -> ModelChange:
        configured = settings.embedding
        changed = configured.model_copy(update={
            "embedding_url": source.get("url"), "embedding_model": source.get("model"),
            "embedding_model_path": Path(source["path"]) if source.get("path") else None,
            "embedding_dim": None if source.get("url") != configured.embedding_url
            else configured.embedding_dim})
        fresh = DenseEncoder(changed.embedding_model_path, batch_size=changed.embedding_batch_size,
                             remote=build_remote_embeddings(changed, settings.gateway),
                             units=changed.embedding_unit_precision)
        fresh.warm_up()  # the weights (or the endpoint) answer before anything waits on them
        fresh.count_tokens("warm up")
        return ModelChange(fresh.model_id, fresh.dim, lambda: dense.adopt(fresh))
    return load


def check_embedding_model(catalog: DocumentCatalog, dense: DenseEncoder) -> None:
    """Queries and documents must be embedded by the same model: a similarity between vectors
    of two models means nothing, even when their sizes agree. The catalog records the model the
    index was built with; another one is refused until the index is rebuilt."""
    built_with = catalog.meta("embedding_model")
    if built_with == dense.model_id:
        return
    if built_with is not None and catalog.count_documents() > 0:
        raise ConfigError(
            f"the index was built with the embedding model '{built_with}', but "
            f"'{dense.model_id}' is configured: query and document vectors must come from the "
            "same model",
            hint="set the embedding settings back, or rebuild the index with the new model "
                 "with `citewise reindex` (with the new settings; the live index keeps "
                 "serving until the new one is complete), then start this with them")
    # A new (or emptied) index, or one from before the model was recorded: it is this model's.
    catalog.set_meta("embedding_model", dense.model_id)


def warn_if_open(data_dir: Path) -> None:
    """Say loudly, at start, what in the data folder other accounts may read: a folder copied
    or restored by hand, a chmod. Not changed behind the operator's back: ``citewise verify
    --repair`` does it, and says so."""
    loose = too_open(data_dir)
    if loose:
        log.warning("the data folder %s is readable by other accounts (it holds restricted "
                    "documents and API key hashes): %s; run `citewise verify --repair` to make "
                    "it 0700 and its files 0600", data_dir, describe(loose, data_dir))


def index_kind(settings: Settings) -> str:
    """Which vector index the settings choose: ``embedded`` (Qdrant in the data folder),
    ``server`` (a Qdrant server) or ``pgvector`` (tables in the PostgreSQL database)."""
    if settings.index.vector_store == "pgvector":
        return "pgvector"
    return "server" if settings.index.qdrant_url else "embedded"


def check_vector_store(settings: Settings) -> None:
    """Refuse a vector store the settings cannot build, before anything is opened."""
    if settings.index.vector_store != "pgvector":
        return
    if settings.index.qdrant_url:
        raise ConfigError("CITEWISE_VECTOR_STORE=pgvector and CITEWISE_QDRANT_URL are both set",
                          hint="choose one vector index: unset CITEWISE_QDRANT_URL to keep the "
                               "vectors in PostgreSQL, or set CITEWISE_VECTOR_STORE=qdrant")
    if not settings.database_url:
        raise ConfigError("CITEWISE_VECTOR_STORE=pgvector keeps the vectors in PostgreSQL, but "
                          "CITEWISE_DATABASE_URL is not set",
                          hint="set CITEWISE_DATABASE_URL=postgresql://user:password@host:5432/db "
                               "(a database with the pgvector extension), or "
                               "CITEWISE_VECTOR_STORE=qdrant for the embedded index")


def vector_database(settings: Settings) -> PostgresDatabase:
    """The PostgreSQL database that ``CITEWISE_VECTOR_STORE=pgvector`` keeps the vectors in:
    ``CITEWISE_DATABASE_URL``'s, with a pool of its own (for a command that opens the index
    without the stores)."""
    from citewise.postgres import PostgresDatabase

    check_vector_store(settings)
    assert settings.database_url is not None  # checked just above
    return PostgresDatabase(settings.database_url, pool_size=settings.database_pool_size,
                            connect_timeout=settings.database_timeout)


def build_index_store(settings: Settings, dim: int, stores: Stores | None = None) -> IndexStore:
    """Where the index generations live: folders beside ``<data dir>/qdrant``, collections
    named after ``CITEWISE_QDRANT_COLLECTION`` on a Qdrant server, or tables in PostgreSQL
    (``chunk_vectors``, ``chunk_vectors_g2``...) on the pool of ``stores`` when they are in
    that database (they close it), else on a pool of the index's own."""
    index = settings.index
    if index.vector_store == "pgvector":
        from citewise.index.pgvector_index import PgvectorIndexStore

        shared = stores.postgres if stores is not None else None
        if shared is not None:
            return PgvectorIndexStore(shared, dim)
        return PgvectorIndexStore(vector_database(settings), dim, owns_database=True)
    if index.qdrant_url:
        from citewise.index.qdrant_server_index import ServerIndexStore

        return ServerIndexStore.from_url(index.qdrant_url, index.qdrant_api_key,
                                         index.qdrant_collection, dim,
                                         timeout=index.qdrant_timeout)
    from citewise.index.edge_hnsw import EdgeHnswPolicy
    from citewise.index.qdrant_edge_index import EdgeIndexStore

    return EdgeIndexStore(settings.data.qdrant_path, dim, EdgeHnswPolicy.from_settings(index))


def build_reindexer(settings: Settings, services: Services | None = None) -> Reindexer:
    """``citewise reindex`` with ``settings``: its own catalog, blob store, model and index
    store (it never opens the live index, so it runs beside a server holding an embedded one),
    or those of ``services`` in this process (which must be on the same data folder)."""
    if services is not None:
        return Reindexer(catalog=services.catalog, sources=services.sources,
                         staging=services.stores.staging, blobs=services.blobs,
                         dense=services.dense, sparse=services.sparse,
                         store=services.index.store,
                         chunk_max_tokens=settings.ingest.chunk_max_tokens,
                         parse_processes=settings.ingest.parse_processes,
                         data_dir=settings.data_dir,
                         min_free_bytes=settings.ingest.min_free_bytes,
                         embedding_source=embedding_source(settings.embedding))
    private_folder(settings.data_dir)
    dense = build_dense(settings)
    stores = build_stores(settings)
    return Reindexer(catalog=stores.catalog, sources=stores.sources, staging=stores.staging,
                     blobs=build_blobs(settings), dense=dense, sparse=Bm25Encoder(),
                     store=build_index_store(settings, dense.dim, stores),
                     chunk_max_tokens=settings.ingest.chunk_max_tokens,
                     parse_processes=settings.ingest.parse_processes,
                     data_dir=settings.data_dir, min_free_bytes=settings.ingest.min_free_bytes,
                     embedding_source=embedding_source(settings.embedding),
                     release=stores.close)


def build_index(settings: Settings, dim: int) -> VectorIndex:
    """The first generation's index where the settings put it (restore checks it is empty)."""
    index = settings.index
    if index.vector_store == "pgvector":
        from citewise.index.pgvector_index import PgvectorIndex

        return PgvectorIndex(vector_database(settings), dim, owns_database=True)
    if index.qdrant_url:
        from citewise.index.qdrant_server_index import ServerVectorIndex

        return ServerVectorIndex.from_url(
            index.qdrant_url,
            api_key=index.qdrant_api_key,
            collection=index.qdrant_collection,
            dim=dim,
            timeout=index.qdrant_timeout,
        )
    from citewise.index.edge_hnsw import EdgeHnswPolicy
    from citewise.index.qdrant_edge_index import EdgeVectorIndex

    return EdgeVectorIndex(settings.data.qdrant_path, dim, EdgeHnswPolicy.from_settings(index))


def build_reranker(retrieval: RetrievalSettings) -> Reranker | None:
    """A rerank API or a local cross-encoder when configured; none by default."""
    if retrieval.rerank_url and retrieval.rerank_model_path:
        raise ConfigError(
            "both CITEWISE_RERANK_URL and CITEWISE_RERANK_MODEL_PATH are set",
            hint="choose one reranker",
        )
    if retrieval.rerank_url:
        return HttpReranker(retrieval.rerank_url, retrieval.rerank_model,
                            api_key=retrieval.rerank_api_key, timeout=retrieval.rerank_timeout)
    if retrieval.rerank_model_path:
        return CrossEncoderReranker(retrieval.rerank_model_path)
    return None


def build_blobs(settings: Settings) -> BlobStore:
    index = settings.index
    if index.blob_store == "s3":
        if not index.s3_bucket:
            raise ConfigError(
                "CITEWISE_BLOB_STORE=s3 needs a bucket", hint="set CITEWISE_S3_BUCKET"
            )
        return S3BlobStore(
            index.s3_bucket,
            prefix=index.s3_prefix,
            endpoint_url=index.s3_endpoint_url,
            region=index.s3_region,
            access_key_id=index.s3_access_key_id,
            secret_access_key=index.s3_secret_access_key,
        )
    return LocalBlobStore(settings.data.blob_dir)


def provider_specs(settings: GatewaySettings) -> list[ProviderSpec]:
    """The model providers, in the order requests try them: ``[[llm.providers]]``, or the
    one-provider shortcut ``CITEWISE_LLM_BASE_URL`` / ``CITEWISE_LLM_MODEL``."""
    if settings.llm_providers and settings.llm_base_url:
        raise ConfigError(
            "both [[llm.providers]] and CITEWISE_LLM_BASE_URL are set",
            hint="list every provider under [[llm.providers]] and unset CITEWISE_LLM_BASE_URL",
        )
    specs = []
    for p in settings.llm_providers:
        key = None
        if p.api_key_env:
            key = os.environ.get(p.api_key_env)
            if not key:
                raise ConfigError(
                    f"model provider '{p.name}' reads its key from ${p.api_key_env}, "
                    "which is not set",
                    hint=f"export {p.api_key_env}=..., or drop api_key_env for a provider "
                         "that needs no key (a local vLLM or Ollama)",
                )
        specs.append(ProviderSpec(
            name=p.name, base_url=p.base_url, model=p.model, api_key=key,
            input_price=p.input_price, output_price=p.output_price, timeout=p.timeout,
            max_concurrency=p.max_concurrency, stream_usage=p.stream_usage))
    if settings.llm_base_url:
        if not settings.llm_model:
            raise ConfigError(
                "CITEWISE_LLM_BASE_URL is set but CITEWISE_LLM_MODEL is not",
                hint="name the model the endpoint serves, e.g. llama3.1:8b",
            )
        specs.append(ProviderSpec(
            name="default", base_url=settings.llm_base_url, model=settings.llm_model,
            api_key=settings.llm_api_key, timeout=settings.llm_timeout,
            input_price=settings.llm_input_price, output_price=settings.llm_output_price))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"model provider names repeat: {names}",
                          hint="give each [[llm.providers]] entry its own name")
    return specs


def build_gateway(settings: GatewaySettings) -> Gateway | None:
    """The model gateway over the configured providers; None = extractive answers only."""
    specs = provider_specs(settings)
    if not specs:
        return None
    return Gateway.from_specs(
        specs, deadline=settings.llm_deadline, max_attempts=settings.llm_max_attempts,
        breaker_threshold=settings.llm_breaker_failures,
        breaker_reset=settings.llm_breaker_reset)


def build_services(settings: Settings) -> Services:
    check_vector_store(settings)
    # Before anything is opened: a model file that cannot be used stops the start cleanly.
    rank_model = load_rank_model(settings)
    private_folder(settings.data_dir)
    warn_if_open(settings.data_dir)
    stores = build_stores(settings)
    catalog = stores.catalog
    dense = build_dense(settings)
    check_embedding_model(catalog, dense)
    sparse = Bm25Encoder()
    # The live generation's index, following the catalog's pointer (`citewise reindex`).
    index = LiveIndex(catalog, build_index_store(settings, dense.dim, stores),
                      expected_model=dense.model_id, load_model=model_loader(settings, dense))
    blobs = build_blobs(settings)
    pipeline = IngestPipeline(
        catalog=catalog,
        sources=stores.sources,
        index=index,
        blobs=blobs,
        dense=dense,
        sparse=sparse,
        chunk_max_tokens=settings.ingest.chunk_max_tokens,
        parse_processes=settings.ingest.parse_processes,
        work_dir=settings.data_dir,
        min_free_bytes=settings.ingest.min_free_bytes,
        # Gives way to the requests of this process (none outside a server: never pauses).
        pacer=Pacer(REQUESTS.busy, settings.ingest.ingest_yield),
    )
    run_lock, jobs = build_ingest_runs(settings, stores, pipeline)
    retrieval = settings.retrieval
    learned = None if rank_model is None else LearnedStage(
        rank_model, RankFeatures(StoredFeedbackCounts(stores.conversations)))
    search = build_search(retrieval, catalog, index, dense, sparse,
                          vocabulary_file=vocabulary_path(settings), learned=learned)
    gateway = build_gateway(settings.gateway)
    cache = SemanticCache(catalog, stores.answer_cache,
                          threshold=retrieval.answer_cache_threshold,
                          ttl=retrieval.answer_cache_ttl) if retrieval.answer_cache else None
    answers = AnswerService(
        search=search, dense=dense, catalog=catalog, min_score=retrieval.answer_min_score,
        gateway=gateway, cache=cache,
    )
    return Services(
        settings=settings,
        stores=stores,
        catalog=catalog,
        sources=stores.sources,
        index=index,
        blobs=blobs,
        dense=dense,
        sparse=sparse,
        pipeline=pipeline,
        search=search,
        answers=answers,
        library=build_library(settings, stores, blobs),
        run_lock=run_lock,
        jobs=jobs,
        gateway=gateway,
        conversations=build_conversations(settings, stores),
        guardrails=Guardrails(settings.answering.guardrails),
    )


def vocabulary_path(settings: Settings) -> Path:
    """The mined vocabulary's file: ``CITEWISE_VOCABULARY_FILE``, else the data folder's."""
    return settings.retrieval.vocabulary_file or settings.data.vocabulary_path


def build_synonyms(retrieval: RetrievalSettings, vocabulary_file: Path | None) -> Synonyms:
    """The hand-written synonyms (built in, and the organisation's file) with the mined
    vocabulary's groups that no veto names, where the file exists (``retrieval/vocabulary.py``);
    the hand list wins where both know a word."""
    vocabulary = Vocabulary.load(vocabulary_file) if vocabulary_file else None
    synonyms = Synonyms.from_file(retrieval.synonyms_file,
                                  mined=vocabulary.groups() if vocabulary else ())
    if vocabulary is not None:
        log.info("mined vocabulary: %d groups applied from %s (%d vetoed)", synonyms.mined,
                 vocabulary_file, len(vocabulary.entries) - len(vocabulary.applied()))
    return synonyms


def build_search(retrieval: RetrievalSettings, catalog: DocumentCatalog, index: LiveIndex,
                 dense: DenseEncoder, sparse: Bm25Encoder,
                 vocabulary_file: Path | None = None,
                 learned: LearnedStage | None = None) -> SearchService:
    return SearchService(
        catalog=catalog, index=index, dense=dense, sparse=sparse,
        prefetch=retrieval.search_prefetch,
        fusion=FusionConfig(retrieval.search_fusion, retrieval.search_dense_weight),
        reranker=build_reranker(retrieval), rerank_candidates=retrieval.rerank_candidates,
        synonyms=build_synonyms(retrieval, vocabulary_file),
        learned=learned,
    )


def rank_model_path(settings: Settings) -> Path:
    """Where the learned ranking model is read from and `citewise rank train` writes it."""
    return settings.retrieval.rank_model_file or settings.data_dir / DEFAULT_RANK_MODEL_FILE


def load_rank_model(settings: Settings) -> RankModel | None:
    """The learned second stage's model when a model file is present (and not switched off);
    None otherwise, and search is the fused ranking alone. A file that is there but cannot be
    used (another format version, other features) stops the start with what to do."""
    if not settings.retrieval.rank_learned:
        return None
    path = rank_model_path(settings)
    if not path.is_file():
        if settings.retrieval.rank_model_file is not None:
            raise ConfigError(f"CITEWISE_RANK_MODEL_FILE names {path}, which does not exist",
                              hint="train one with `citewise rank train --qa GOLDEN.jsonl`, or "
                                   "unset the setting to search without a learned stage")
        return None
    model = RankModel.load(path)
    log.info("learned ranking stage on: %s (%s candidates)", path, model.candidates)
    return model


def build_evaluation_search(services: Services, max_top_k: int) -> SearchService:
    """The services' search with pages as deep as an evaluation ranks (Recall@100): retrieval
    alone (dense, BM25, fused), without a reranker or on-call synonyms, so that BEIR figures
    measure the configurations compared (``api/evaluation``)."""
    return SearchService(
        catalog=services.catalog, index=services.index, dense=services.dense,
        sparse=services.sparse, prefetch=services.search.prefetch,
        fusion=services.search.fusion, max_top_k=max_top_k)


def build_library(settings: Settings, stores: Stores,
                  blobs: BlobStore | None = None) -> LibraryService:
    """What is indexed, as callers may see it (``blobs`` None: sources only, as the CLI lists
    them beside a running server)."""
    return LibraryService(stores.catalog, stores.sources, blobs,
                          [DeclaredSource(s.name, s.type) for s in settings.sources])


def build_conversations(settings: Settings, stores: Stores) -> Conversations:
    return Conversations(stores.conversations, stores.catalog,
                         idle=settings.answering.conversation_idle_hours * 3600,
                         max_turns=settings.answering.conversation_max_turns)


def build_scheduler(settings: Settings, services: Services) -> Scheduler:
    """The [schedule] of the config, which ``citewise serve`` and ``citewise worker`` run: due
    sources go to the job queue (and its run lock); each due time runs once however many
    processes run a scheduler (``ingest/schedule.py``). Each due source is looked up in the
    services' settings when it is due, so a reloaded source's new settings apply without a new
    scheduler; the plan (which source when) is ``settings``'. Building checks every cron
    expression and the time zone."""
    def submit(names: list[str], trigger: str) -> None:
        current = services.settings  # read once: a reload may swap it meanwhile
        services.jobs.submit([find_source(current.sources, n) for n in names], trigger=trigger)

    schedule = settings.ingest
    return Scheduler(
        plan(schedule.schedule_ingest, settings.sources), zone_of(schedule.schedule_timezone),
        submit=submit, last_run=lambda name: last_run_started(services.sources, name),
        catch_up=schedule.schedule_catch_up)


# The front door ----------------------------------------------------------------------------------
@dataclass
class Door:
    """Identity and metering: what every request meets before a route (``api/frontdoor.py``)."""

    authenticator: Authenticator
    keys: ApiKeys
    limiter: RateLimiter
    buckets: TokenBuckets
    usage: UsageLog
    audit: AuditLog

    def flush(self) -> None:
        self.usage.flush()
        self.buckets.flush()


def build_answering(services: Services, door: Door) -> Answering:
    """The one service every door answers through (``api/answering.py``): the services'
    answers, conversations and guardrails, and the front door's audit log for its decisions."""
    from citewise.api.answering import Answering

    return Answering(services, door.audit)


def is_loopback(host: str | None) -> bool:
    """Whether a bind address admits only this machine (``None``: embedded in a process)."""
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_door(settings: Settings, stores: Stores, *, operator_token: str | None = None,
               bind_host: str | None = None) -> Door:
    """The front door for a server bound to ``bind_host``. Fails closed: a server reachable
    from other machines must have a way to tell who is calling."""
    identity = settings.identity
    keys = ApiKeys(stores.keys)
    required = identity.require_auth if identity.require_auth is not None \
        else not is_loopback(bind_host)
    authenticator = Authenticator(
        keys=keys,
        groups=GroupMap(identity.groups),
        access=build_access_verifier(identity),
        access_groups_claim=identity.access_groups_claim,
        oidc=build_oidc_verifier(identity),
        oidc_user_claim=identity.oidc_user_claim,
        oidc_groups_claim=identity.oidc_groups_claim,
        sso_scopes=identity.sso_scopes,
        admin_groups=comma_separated(identity.admin_groups),
        operator_token=operator_token,
        required=required,
        trust_headers=identity.insecure_trust_identity_headers,
        group_bounds=GroupBounds(identity.max_asserted_groups, identity.max_group_name),
    )
    if not is_loopback(bind_host) and not identity.insecure_trust_identity_headers:
        if identity.require_auth is False:
            raise ConfigError(
                f"CITEWISE_REQUIRE_AUTH=false on {bind_host}, reachable from other machines",
                hint="configure an identity method, or say that a proxy sets the identity "
                     "headers with --insecure-trust-identity-headers")
        if not authenticator.methods:
            raise ConfigError(
                f"refusing to serve on {bind_host} without a way to tell who is calling",
                hint="create an API key (citewise keys create NAME --scopes search,answer), "
                     "or configure Cloudflare Access (CITEWISE_ACCESS_TEAM_DOMAIN, "
                     "CITEWISE_ACCESS_AUD) or OIDC (CITEWISE_OIDC_ISSUER...); behind a proxy "
                     "that sets X-Citewise-User/Groups itself, pass "
                     "--insecure-trust-identity-headers")
    local_mode = not required and not identity.insecure_trust_identity_headers
    if local_mode and "*" in comma_separated(settings.server.trusted_proxies):
        # Local mode gives callers on this machine every scope, and with * any caller could
        # reach the server through something that connects from this machine and say so.
        raise ConfigError(
            "CITEWISE_TRUSTED_PROXIES=* cannot be combined with local mode, where a caller "
            "whose address is this machine's gets the ingest and admin scopes",
            hint="name the proxies (CITEWISE_TRUSTED_PROXIES=127.0.0.1), or require "
                 "authentication (CITEWISE_REQUIRE_AUTH=true)")
    if identity.insecure_trust_identity_headers:
        log.warning("INSECURE: X-Citewise-User/Groups are believed from every caller "
                    "(--insecure-trust-identity-headers); only safe behind a proxy that sets "
                    "them and that nothing can bypass")
    buckets = TokenBuckets(stores.bucket_levels())
    buckets.load()
    return Door(
        authenticator=authenticator, keys=keys, limiter=RateLimiter(settings.metering, buckets),
        buckets=buckets,
        usage=UsageLog(stores.metering, stores.keys, raw_days=settings.metering.usage_raw_days,
                       retention_days=settings.metering.usage_retention_days),
        audit=AuditLog(stores.metering),
    )


def build_access_verifier(settings: IdentitySettings) -> TokenVerifier | None:
    domain, aud = settings.access_team_domain, comma_separated(settings.access_aud)
    if not domain and not aud:
        return None
    if not domain or not aud:
        raise ConfigError("Cloudflare Access needs both CITEWISE_ACCESS_TEAM_DOMAIN and "
                          "CITEWISE_ACCESS_AUD",
                          hint="the team domain is https://<team>.cloudflareaccess.com; the AUD "
                               "tag is on the Access application's overview page")
    domain = domain.rstrip("/")
    if not domain.startswith("https://"):
        domain = f"https://{domain}"
    keys = KeySet(url=settings.access_jwks_url or f"{domain}/cdn-cgi/access/certs",
                  timeout=settings.jwks_timeout)
    return TokenVerifier(TokenPolicy("Cloudflare Access", domain, tuple(aud),
                                     settings.jwt_leeway), keys)


def build_oidc_verifier(settings: IdentitySettings) -> TokenVerifier | None:
    if not settings.oidc_issuer:
        if settings.oidc_audience or settings.oidc_jwks_url or settings.oidc_jwks_file:
            raise ConfigError("OIDC settings are given but CITEWISE_OIDC_ISSUER is not",
                              hint="set the issuer (the iss of the provider's tokens)")
        return None
    audience = comma_separated(settings.oidc_audience)
    if not audience:
        raise ConfigError("OIDC needs CITEWISE_OIDC_AUDIENCE (the aud of the tokens)",
                          hint="usually the client id of the application registered for citewise")
    if not settings.oidc_jwks_url and not settings.oidc_jwks_file:
        raise ConfigError("OIDC needs CITEWISE_OIDC_JWKS_URL or CITEWISE_OIDC_JWKS_FILE",
                          hint="the jwks_uri of <issuer>/.well-known/openid-configuration")
    keys = KeySet(url=settings.oidc_jwks_url, path=settings.oidc_jwks_file,
                  timeout=settings.jwks_timeout)
    return TokenVerifier(TokenPolicy("OIDC", settings.oidc_issuer, tuple(audience),
                                     settings.jwt_leeway), keys)
