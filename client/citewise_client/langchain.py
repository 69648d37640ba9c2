"""citewise as a LangChain retriever: cited, permission-checked passages from a server.

    from citewise_client.langchain import CitewiseRetriever

    retriever = CitewiseRetriever(top_k=3, sources=["runbooks"])  # $CITEWISE_URL, _API_KEY
    for doc in retriever.invoke("how do I fail over the redis cache?"):
        print(doc.metadata["score"], doc.metadata["citation"])

Each passage is a ``Document`` whose id is the chunk id and whose metadata carries the
citation (``passages.METADATA_KEYS``) and the score. The server decides what the key may read.
Needs the ``langchain`` extra: ``pip install 'citewise-client[langchain]'``.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from citewise_client.client import CitewiseClient
from citewise_client.environment import KEY_VARIABLE, URL_VARIABLE
from citewise_client.models import Filters, Mode, SearchHit
from citewise_client.passages import metadata_of

__all__ = ["CitewiseRetriever"]


def _key_from_env() -> SecretStr | None:
    key = os.environ.get(KEY_VARIABLE)
    return SecretStr(key) if key else None


class CitewiseRetriever(BaseRetriever):
    """Searches a citewise server (``POST /v1/search``) as one API key.

    ``base_url`` and ``api_key`` default to ``$CITEWISE_URL`` and ``$CITEWISE_API_KEY``; the
    connection settings (``base_url``, ``api_key``, ``timeout``, ``headers``) are read when the
    retriever is made, the search settings on every call. The document tag filter is
    ``document_tags``: ``tags`` stays LangChain's own (run tags for callbacks).
    Failures raise ``citewise_client.CitewiseClientError`` (of its kind: ``errors.py``).
    """

    # A misspelt filter (``source=``) must not be ignored quietly: it would widen the search.
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default_factory=lambda: os.environ.get(URL_VARIABLE))
    api_key: SecretStr | None = Field(default_factory=_key_from_env)
    top_k: int = 5
    sources: list[str] = Field(default_factory=list)
    document_tags: list[str] = Field(default_factory=list,
                                     description="Document tags (any of).")
    services: list[str] = Field(default_factory=list)
    path_prefix: str | None = None
    mode: Mode = "hybrid"
    timeout: float = 30.0
    headers: dict[str, str] | None = None

    _client: CitewiseClient = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._client = CitewiseClient.from_environment(
            self.base_url, self.api_key.get_secret_value() if self.api_key else None,
            timeout=self.timeout, headers=self.headers)

    def _filters(self) -> Filters:
        return Filters(sources=self.sources, tags=self.document_tags, services=self.services,
                       path_prefix=self.path_prefix)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        found = self._client.search(query, top_k=self.top_k, mode=self.mode,
                                    filters=self._filters())
        return [document_of(hit) for hit in found.results]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        found = await self._client.asearch(query, top_k=self.top_k, mode=self.mode,
                                           filters=self._filters())
        return [document_of(hit) for hit in found.results]

    def close(self) -> None:
        """Ends the kept connections of sync calls (async calls keep none)."""
        self._client.close()


def document_of(hit: SearchHit) -> Document:
    return Document(page_content=hit.text, metadata={**metadata_of(hit), "score": hit.score},
                    id=hit.chunk_id)
