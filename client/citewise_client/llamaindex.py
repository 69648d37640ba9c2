"""citewise as a llama-index retriever: cited, permission-checked passages from a server.

    from citewise_client.llamaindex import CitewiseRetriever

    retriever = CitewiseRetriever(top_k=3, sources=["runbooks"])  # $CITEWISE_URL, _API_KEY
    for hit in retriever.retrieve("how do I fail over the redis cache?"):
        print(hit.score, hit.node.metadata["citation"])

Each passage is a ``TextNode`` whose id is the chunk id and whose metadata carries the
citation (``passages.METADATA_KEYS``). The server decides what the key may read; nothing is
indexed on this side. Needs the ``llamaindex`` extra:
``pip install 'citewise-client[llamaindex]'``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from citewise_client.client import CitewiseClient
from citewise_client.models import Filters, Mode, SearchHit
from citewise_client.passages import (
    FOR_THE_EMBEDDING,
    FOR_THE_MODEL,
    METADATA_KEYS,
    metadata_of,
)

__all__ = ["CitewiseRetriever"]


class CitewiseRetriever(BaseRetriever):
    """Searches a citewise server (``POST /v1/search``) as one API key.

    ``base_url`` and ``api_key`` default to ``$CITEWISE_URL`` and ``$CITEWISE_API_KEY``. The
    filters match any of their values (``sources=["runbooks", "wiki"]``) and combine with each
    other. Failures raise ``citewise_client.CitewiseClientError`` (of its kind: ``errors.py``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        top_k: int = 5,
        sources: Sequence[str] = (),
        tags: Sequence[str] = (),
        services: Sequence[str] = (),
        path_prefix: str | None = None,
        mode: Mode = "hybrid",
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.client = CitewiseClient.from_environment(base_url, api_key, timeout=timeout,
                                                      headers=headers)
        self.top_k = top_k
        self.sources = list(sources)
        self.tags = list(tags)
        self.services = list(services)
        self.path_prefix = path_prefix
        self.mode: Mode = mode
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _filters(self) -> Filters:
        return Filters(sources=self.sources, tags=self.tags, services=self.services,
                       path_prefix=self.path_prefix)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = self.client.search(query_bundle.query_str, top_k=self.top_k, mode=self.mode,
                                   filters=self._filters())
        return [node_of(hit) for hit in found.results]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = await self.client.asearch(query_bundle.query_str, top_k=self.top_k,
                                          mode=self.mode, filters=self._filters())
        return [node_of(hit) for hit in found.results]

    def close(self) -> None:
        """Ends the kept connections of sync calls (async calls keep none)."""
        self.client.close()


def node_of(hit: SearchHit) -> NodeWithScore:
    """A search hit as a scored TextNode: the model sees title, heading and citation above the
    text; an embedding sees title and heading; ids, links and line numbers stay metadata.
    Empty fields (no symbol outside code) are left out of both texts: "symbol: None" is noise.
    """
    metadata = metadata_of(hit)
    empty = {k for k, v in metadata.items() if v is None or v == ""}
    node = TextNode(
        id_=hit.chunk_id,
        text=hit.text,
        metadata=metadata,
        excluded_llm_metadata_keys=[k for k in METADATA_KEYS
                                    if k not in FOR_THE_MODEL or k in empty],
        excluded_embed_metadata_keys=[k for k in METADATA_KEYS
                                      if k not in FOR_THE_EMBEDDING or k in empty],
    )
    return NodeWithScore(node=node, score=hit.score)
