"""The composition root: the one place that turns settings into working services.

Everything swappable (embedded Qdrant or a server, a local folder or S3, extractive answers or
an LLM) is chosen here, from ``Settings``, and nowhere else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from citewise.errors import ConfigError
from citewise.index.blobs import BlobStore, LocalBlobStore, S3BlobStore
from citewise.index.catalog import Catalog
from citewise.index.dense import DenseEncoder, EmbeddingCache
from citewise.index.sparse import Bm25Encoder
from citewise.index.vector_index import VectorIndex
from citewise.ingest.jobs import JobQueue
from citewise.ingest.pipeline import IngestPipeline
from citewise.retrieval.answering import AnswerService
from citewise.retrieval.fusion import FusionConfig
from citewise.retrieval.library import DeclaredSource, LibraryService
from citewise.retrieval.llm import LLMClient
from citewise.retrieval.rerank import CrossEncoderReranker, HttpReranker, Reranker
from citewise.retrieval.search import SearchService
from citewise.settings import Settings

log = logging.getLogger("citewise")

@dataclass
class Services:
    settings: Settings
    catalog: Catalog
    index: VectorIndex
    blobs: BlobStore
    dense: DenseEncoder
    sparse: Bm25Encoder
    pipeline: IngestPipeline
    search: SearchService
    answers: AnswerService
    library: LibraryService
    jobs: JobQueue

    @property
    def index_kind(self) -> str:
        return "server" if self.settings.qdrant_url else "embedded"

    def close(self) -> None:
        self.index.close()
        self.catalog.close()


def build_dense(settings: Settings) -> DenseEncoder:
    # The loaded model is shared per process (see index.dense); the cache is per data folder.
    return DenseEncoder(
        settings.embedding_model_path,
        batch_size=settings.embedding_batch_size,
        cache=EmbeddingCache(settings.embedding_cache_path),
    )


def build_index(settings: Settings, dim: int) -> VectorIndex:
    if settings.qdrant_url:
        from citewise.index.qdrant_server_index import ServerVectorIndex

        return ServerVectorIndex.from_url(
            settings.qdrant_url,
            api_key=settings.qdrant_api_key,
            collection=settings.qdrant_collection,
            dim=dim,
            timeout=settings.qdrant_timeout,
        )
    from citewise.index.qdrant_edge_index import EdgeVectorIndex

    return EdgeVectorIndex(settings.qdrant_path, dim)


def build_reranker(settings: Settings) -> Reranker | None:
    """A rerank API or a local cross-encoder when configured; none by default."""
    if settings.rerank_url and settings.rerank_model_path:
        raise ConfigError(
            "both CITEWISE_RERANK_URL and CITEWISE_RERANK_MODEL_PATH are set",
            hint="choose one reranker",
        )
    if settings.rerank_url:
        return HttpReranker(settings.rerank_url, settings.rerank_model,
                            api_key=settings.rerank_api_key, timeout=settings.rerank_timeout)
    if settings.rerank_model_path:
        return CrossEncoderReranker(settings.rerank_model_path)
    return None


def build_blobs(settings: Settings) -> BlobStore:
    if settings.blob_store == "s3":
        if not settings.s3_bucket:
            raise ConfigError(
                "CITEWISE_BLOB_STORE=s3 needs a bucket", hint="set CITEWISE_S3_BUCKET"
            )
        return S3BlobStore(
            settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
        )
    return LocalBlobStore(settings.blob_dir)


def build_services(settings: Settings) -> Services:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(settings.catalog_path)
    dense = build_dense(settings)
    sparse = Bm25Encoder()
    index = build_index(settings, dense.dim)
    blobs = build_blobs(settings)
    pipeline = IngestPipeline(
        catalog=catalog,
        index=index,
        blobs=blobs,
        dense=dense,
        sparse=sparse,
        chunk_max_tokens=settings.chunk_max_tokens,
        work_dir=settings.data_dir,
    )
    search = SearchService(
        catalog=catalog, index=index, dense=dense, sparse=sparse, prefetch=settings.search_prefetch,
        fusion=FusionConfig(settings.search_fusion, settings.search_dense_weight),
        reranker=build_reranker(settings), rerank_candidates=settings.rerank_candidates,
    )
    llm = None
    if settings.llm_base_url:
        if not settings.llm_model:
            raise ConfigError(
                "CITEWISE_LLM_BASE_URL is set but CITEWISE_LLM_MODEL is not",
                hint="name the model the endpoint serves, e.g. llama3.1:8b",
            )
        llm = LLMClient(
            settings.llm_base_url,
            settings.llm_model,
            api_key=settings.llm_api_key,
            timeout=settings.llm_timeout,
        )
    answers = AnswerService(
        search=search, dense=dense, catalog=catalog, min_score=settings.answer_min_score, llm=llm,
    )
    return Services(
        settings=settings,
        catalog=catalog,
        index=index,
        blobs=blobs,
        dense=dense,
        sparse=sparse,
        pipeline=pipeline,
        search=search,
        answers=answers,
        library=LibraryService(
            catalog, blobs, [DeclaredSource(s.name, s.type) for s in settings.sources]
        ),
        jobs=JobQueue(pipeline),
    )
