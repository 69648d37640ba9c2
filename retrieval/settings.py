"""The retrieval layer's settings: hybrid search and its fusion, the on-call shorthand, the
optional reranker, when answers abstain, and the semantic answer cache (see
``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from citewise.settings import SettingsPart


class RetrievalSettings(SettingsPart):
    relative_paths = frozenset({"synonyms_file", "vocabulary_file", "rank_model_file"})

    answer_cache: bool = Field(
        default=True, description="Serve answers to questions close to one asked before, by a "
        "caller of the same readable scope, from the semantic cache.")
    answer_cache_threshold: float = Field(
        default=0.95, gt=0, le=1, description="Cosine similarity at which a question counts as "
        "one asked before.")
    answer_cache_ttl: float = Field(default=86400.0, gt=0, description="Seconds an answer stays "
                                    "in the cache.")
    answer_cache_size: int = Field(default=5000, ge=1, description="Answers the cache holds "
                                   "(least recently used out first).")
    search_prefetch: int = Field(default=50, description="Candidates per method before fusion.")
    search_fusion: Literal["convex", "rrf"] = Field(
        default="convex",
        description="How dense and BM25 candidates are fused: convex (weighted sum of scores "
        "divided by each list's best) or rrf (reciprocal rank fusion).",
    )
    search_dense_weight: float = Field(
        default=0.6, ge=0.0, le=1.0,
        description="Share of the dense score in the fused one (0..1); BM25 gets the rest.",
    )
    synonyms_file: Path | None = Field(
        default=None,
        description="Your organisation's shorthand, one group per line (`dotcom, "
        "sourcegraph.com`), added to the built-in on-call synonyms (pg, prom, bounce...).",
    )
    vocabulary_file: Path | None = Field(
        default=None,
        description="The vocabulary mined from your documents (`citewise vocabulary mine`: "
        "acronyms, aliases, glossary entries, each with the sentence it came from, minus your "
        "vetoes); unset = `vocabulary.toml` in the data folder. Read at start; no file, no "
        "mined vocabulary.",
    )
    rerank_url: str | None = Field(
        default=None,
        description="Rerank HTTP API (Cohere/Jina/vLLM shape); unset = no reranking.",
    )
    rerank_model: str | None = Field(default=None, description="Model name for the rerank API.")
    rerank_api_key: str | None = Field(default=None, description="Bearer token for the rerank API.")
    rerank_model_path: Path | None = Field(
        default=None,
        description="Folder of a local sentence-transformers cross-encoder; unset = none.",
    )
    rerank_candidates: int = Field(
        default=20, ge=1, le=200, description="Fused chunks the reranker reorders."
    )
    rerank_timeout: float = Field(default=10.0, description="Seconds per rerank request.")
    rank_model_file: Path | None = Field(
        default=None,
        description="The learned ranking model `citewise rank train` writes; unset = "
        "`rank-model.json` in the data folder when that file exists. No file: search is the "
        "fused ranking alone.")
    rank_learned: bool = Field(
        default=True,
        description="Re-score hybrid search's best fused candidates with the learned ranking "
        "model when one is present; false = the fused ranking alone, as without a model.")
    answer_min_score: float = Field(
        default=0.32, description="Below this evidence score /v1/answer abstains "
        "(calibrated on the golden sets' tune split, see docs/quality.md)."
    )
