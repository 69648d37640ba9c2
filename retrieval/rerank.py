"""Optional second-stage reranking: a cross-encoder reads the query and each passage together.

Off by default, and nothing in citewise depends on it: no reranker weights ship in any package
citewise can install, so a deployment that has one points citewise at it:

* ``HttpReranker``: a rerank HTTP API in the shape Cohere, Jina, vLLM (``/v1/rerank``) and
  Infinity share: ``POST {"model", "query", "documents": [...], "top_n"}`` answered by
  ``{"results": [{"index", "relevance_score"}, ...]}``.
* ``CrossEncoderReranker``: a sentence-transformers cross-encoder in a local model folder.

The reranker only ever sees candidates that search already filtered by the caller's permissions.
If it fails, search logs a warning and returns the fused ranking: a slow or broken reranker
must not take search down with it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

import httpx

from citewise.errors import ConfigError

log = logging.getLogger("citewise.rerank")


class RerankError(Exception):
    pass


class Reranker(Protocol):
    def scores(self, query: str, passages: list[str]) -> list[float]:
        """One relevance score per passage, higher is better. Raises ``RerankError``."""


class HttpReranker:
    def __init__(
        self,
        url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        # A base URL gets the usual path; a full .../rerank URL is used as is.
        self.url = url if url.rstrip("/").endswith("rerank") else url.rstrip("/") + "/rerank"
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def scores(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        body: dict[str, Any] = {"query": query, "documents": passages, "top_n": len(passages)}
        if self.model:
            body["model"] = self.model
        try:
            resp = self._http.post(self.url, json=body)
        except httpx.HTTPError as e:
            raise RerankError(f"rerank endpoint {self.url} unreachable: {e}") from e
        if resp.status_code != 200:
            raise RerankError(f"rerank endpoint answered {resp.status_code}: {resp.text[:200]}")
        try:
            results = resp.json()["results"]
            scored = {int(r["index"]): float(r["relevance_score"]) for r in results}
            if not set(scored) <= set(range(len(passages))):
                raise ValueError(f"indexes {sorted(scored)} for {len(passages)} passages")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise RerankError(f"rerank endpoint sent an unexpected body: {resp.text[:200]}") from e
        # Passages the endpoint left out (a top_n cap) rank after those it scored.
        floor = min(scored.values(), default=0.0) - 1.0
        return [scored.get(i, floor) for i in range(len(passages))]

    def close(self) -> None:
        self._http.close()


class CrossEncoderReranker:
    """A cross-encoder from a local folder (sentence-transformers format), on the CPU."""

    def __init__(self, path: Path, *, batch_size: int = 16) -> None:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"{path} is not a model folder (no config.json)",
                hint="point CITEWISE_RERANK_MODEL_PATH at a sentence-transformers "
                "cross-encoder saved on this machine",
            )
        from sentence_transformers import CrossEncoder

        self._model = CrossEncoder(str(path), device="cpu")
        self.batch_size = batch_size

    def scores(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        try:
            raw = self._model.predict([(query, p) for p in passages], batch_size=self.batch_size,
                                      show_progress_bar=False)
        except Exception as e:  # the model raises anything from torch and the tokenizer
            raise RerankError(f"cross-encoder failed: {type(e).__name__}: {e}") from e
        return [float(x) for x in raw]
