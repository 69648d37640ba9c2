"""The llama-index and LangChain retrievers (``citewise_client``), sync and async,
calling a real citewise server over HTTP with the demo knowledge base and real API keys.

Each framework is an optional extra: without it, its tests skip and say which extra to install.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from citewise.api.app import create_app
from citewise_client import CitewiseClient, CitewiseClientError
from tests.kb import make_key
from tests.live import LiveServer, free_port

REDIS = "how do I fail over the redis cache?"
FAILOVER = "redis-cache-failover.md"
RESTRICTED = "payments-provider-api-key-rotation.md"  # readers: [group:security]
ROTATION = "rotate the payment provider API keys"


@pytest.fixture(scope="module")
def server(demo_kb) -> Iterator[tuple[str, dict[str, str]]]:
    """The demo behind a real uvicorn; the secrets of keys that differ in who and what."""
    services, _ = demo_kb

    def secret(name: str, scopes: str, **options) -> str:
        return make_key(services, name, scopes=scopes, **options)["Authorization"].split()[1]

    keys = {
        "bob": secret("retr-bob", "search", principal="user:bob"),
        "security": secret("retr-sec", "search", principal="group:security"),
        "answer-only": secret("retr-answer", "answer", principal="user:bob"),
        "one-a-minute": secret("retr-slow", "search", principal="user:slow",
                               limits=["search_per_minute=1"]),
    }
    with LiveServer(create_app(services=services), services.settings) as url:
        yield url, keys


@pytest.fixture(scope="module")
def llama():
    pytest.importorskip("llama_index.core", reason="llama-index-core is not installed: "
                        "pip install 'citewise-client[llamaindex]'")
    from citewise_client import llamaindex

    return llamaindex


@pytest.fixture(scope="module")
def lc():
    pytest.importorskip("langchain_core", reason="langchain-core is not installed: "
                        "pip install 'citewise-client[langchain]'")
    from citewise_client import langchain

    return langchain


def paths(metadatas) -> list[str]:
    return [m["path"] for m in metadatas]


# llama-index -----------------------------------------------------------------------------------


def test_llamaindex_finds_the_failover_runbook_first_with_its_citation(llama, server):
    from llama_index.core.schema import MetadataMode

    url, keys = server
    nodes = llama.CitewiseRetriever(url, keys["bob"], top_k=3).retrieve(REDIS)
    assert len(nodes) == 3
    best = nodes[0]
    meta = best.node.metadata
    assert meta["path"] == FAILOVER and meta["source"] == "runbooks"
    assert meta["service"] == "redis-cache" and "failover" in meta["tags"]
    assert 1 <= meta["start_line"] <= meta["end_line"]
    assert meta["citation"].startswith(f"runbooks/{FAILOVER}:{meta['start_line']}")
    assert meta["heading"] in meta["citation"]
    assert best.node.node_id == meta["chunk_id"] and best.node.text
    assert best.score == max(n.score for n in nodes) > 0
    # A model reads the title, heading and citation above the passage; ids and links are for
    # the application, and the embedding text carries no line numbers.
    for_llm = best.node.get_content(metadata_mode=MetadataMode.LLM)
    assert meta["citation"] in for_llm and best.node.text in for_llm
    assert meta["document_id"] not in for_llm and meta["chunk_id"] not in for_llm
    assert meta["symbol"] is None and "symbol" not in for_llm  # empty fields are left out
    for_embedding = best.node.get_content(metadata_mode=MetadataMode.EMBED)
    assert meta["heading"] in for_embedding and meta["citation"] not in for_embedding


def test_llamaindex_async_gives_what_sync_gives(llama, server):
    url, keys = server
    retriever = llama.CitewiseRetriever(url, keys["bob"], top_k=4)
    sync = retriever.retrieve(REDIS)
    async_ = asyncio.run(retriever.aretrieve(REDIS))
    assert [(n.node.node_id, n.score) for n in async_] == [(n.node.node_id, n.score)
                                                           for n in sync]
    assert async_[0].node.metadata == sync[0].node.metadata
    retriever.close()  # ends the kept connections; a later call opens new ones
    assert [n.node.node_id for n in retriever.retrieve(REDIS)] == [n.node.node_id for n in sync]


def test_llamaindex_query_engine_puts_the_citations_in_the_prompt(llama, server):
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    url, keys = server
    # MockLLM without max_tokens answers with the prompt it was given: the context as the
    # synthesizer laid it out for a model.
    engine = RetrieverQueryEngine.from_args(
        llama.CitewiseRetriever(url, keys["bob"], top_k=2, sources=["runbooks"]),
        llm=MockLLM())
    response = engine.query(REDIS)
    assert paths(n.node.metadata for n in response.source_nodes)[0] == FAILOVER
    prompt = str(response)
    assert response.source_nodes[0].node.metadata["citation"] in prompt
    assert response.source_nodes[0].node.metadata["document_id"] not in prompt


# LangChain -------------------------------------------------------------------------------------


def test_langchain_finds_the_failover_runbook_first_with_its_citation(lc, server):
    url, keys = server
    docs = lc.CitewiseRetriever(base_url=url, api_key=keys["bob"], top_k=3).invoke(REDIS)
    assert len(docs) == 3
    meta = docs[0].metadata
    assert meta["path"] == FAILOVER and meta["title"] and meta["heading"]
    assert 1 <= meta["start_line"] <= meta["end_line"]
    assert meta["citation"].startswith(f"runbooks/{FAILOVER}:{meta['start_line']}")
    assert docs[0].id == meta["chunk_id"] and docs[0].page_content
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0


def test_langchain_async_and_batch_give_what_invoke_gives(lc, server):
    url, keys = server
    retriever = lc.CitewiseRetriever(base_url=url, api_key=keys["bob"], top_k=4)
    sync = retriever.invoke(REDIS)
    async_ = asyncio.run(retriever.ainvoke(REDIS))
    assert [(d.id, d.metadata) for d in async_] == [(d.id, d.metadata) for d in sync]
    redis, postgres = retriever.batch([REDIS, "postgres replica is lagging"])
    assert [d.id for d in redis] == [d.id for d in sync]
    assert postgres[0].metadata["service"] == "postgres-main"


def test_langchain_in_a_chain_formats_sources(lc, server):
    from langchain_core.runnables import RunnableLambda

    url, keys = server
    chain = lc.CitewiseRetriever(base_url=url, api_key=keys["bob"], top_k=2) | RunnableLambda(
        lambda docs: "\n".join(f"[{n}] {d.metadata['citation']}" for n, d in enumerate(docs, 1)))
    assert chain.invoke(REDIS).startswith(f"[1] runbooks/{FAILOVER}:")


def test_langchain_misspelt_fields_are_refused(lc):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="source"):
        lc.CitewiseRetriever(base_url="http://127.0.0.1:1", source=["runbooks"])


# Both: filters, top_k, permissions, configuration --------------------------------------------


def both(server, llama, lc, **options):
    """The same search through both retrievers, sync and async: four lists of metadata."""
    url, keys = server
    options = {"api_key": keys["bob"], **options}
    li = llama.CitewiseRetriever(url, **options)
    # LangChain's retriever calls the tag filter document_tags (its own `tags` are run tags).
    chain = lc.CitewiseRetriever(base_url=url, **{
        ("document_tags" if k == "tags" else k): v for k, v in options.items()})

    def query(q: str) -> list[list[dict]]:
        return [[n.node.metadata for n in li.retrieve(q)],
                [n.node.metadata for n in asyncio.run(li.aretrieve(q))],
                [d.metadata for d in chain.invoke(q)],
                [d.metadata for d in asyncio.run(chain.ainvoke(q))]]

    return query


@pytest.mark.parametrize("top_k", [1, 2, 7])
def test_top_k_is_honoured(llama, lc, server, top_k):
    for found in both(server, llama, lc, top_k=top_k)(REDIS):
        assert len(found) == top_k


def test_sources_filter(llama, lc, server):
    for found in both(server, llama, lc, top_k=5, sources=["wiki"])(REDIS):
        assert found and {m["source"] for m in found} == {"wiki"}
        assert FAILOVER not in paths(found)


def test_tags_filter(llama, lc, server):
    # Both redis runbooks are tagged redis; only the evictions one is tagged memory.
    for found in both(server, llama, lc, top_k=5, tags=["memory"])(REDIS):
        assert found and all("memory" in m["tags"] for m in found)
        assert set(paths(found)) == {"redis-cache-memory-evictions.md"}


def test_services_filter(llama, lc, server):
    for found in both(server, llama, lc, top_k=5, services=["postgres-main"])(REDIS):
        assert found and {m["service"] for m in found} == {"postgres-main"}


def test_path_prefix_filter_on_the_git_source(llama, lc, server):
    search = both(server, llama, lc, top_k=5, sources=["citewise"], path_prefix="retrieval")
    for found in search("how are dense and sparse results fused"):
        assert found and all(p.startswith("retrieval/") for p in paths(found))
        assert all(m["citation"].startswith("citewise/retrieval/") for m in found)


def test_bm25_only_mode(llama, lc, server):
    for found in both(server, llama, lc, top_k=3, mode="sparse")("elasticache test-failover"):
        assert paths(found)[0] == FAILOVER


def test_a_restricted_runbook_is_visible_to_its_group_only(llama, lc, server):
    url, keys = server
    for key, visible in (("bob", False), ("security", True)):
        li = llama.CitewiseRetriever(url, keys[key], top_k=10)
        chain = lc.CitewiseRetriever(base_url=url, api_key=keys[key], top_k=10)
        for found in ([n.node.metadata["path"] for n in li.retrieve(ROTATION)],
                      [d.metadata["path"] for d in asyncio.run(chain.ainvoke(ROTATION))]):
            assert (RESTRICTED in found) is visible, (key, found)
            if visible:
                assert found[0] == RESTRICTED


def test_url_and_key_come_from_the_environment(llama, lc, server, monkeypatch):
    url, keys = server
    monkeypatch.setenv("CITEWISE_URL", url)
    monkeypatch.setenv("CITEWISE_API_KEY", keys["security"])
    assert llama.CitewiseRetriever(top_k=1).retrieve(ROTATION)[0].node.metadata[
        "path"] == RESTRICTED
    assert lc.CitewiseRetriever(top_k=1).invoke(ROTATION)[0].metadata["path"] == RESTRICTED
    monkeypatch.delenv("CITEWISE_URL")
    with pytest.raises(CitewiseClientError, match="CITEWISE_URL"):
        llama.CitewiseRetriever()


# Errors ----------------------------------------------------------------------------------------


def test_a_bad_key_is_a_401_that_says_to_check_the_key(llama, lc, server):
    url, _ = server
    bad = "cw_nobody_nothing"
    calls = [lambda: llama.CitewiseRetriever(url, bad).retrieve(REDIS),
             lambda: asyncio.run(llama.CitewiseRetriever(url, bad).aretrieve(REDIS)),
             lambda: lc.CitewiseRetriever(base_url=url, api_key=bad).invoke(REDIS),
             lambda: asyncio.run(lc.CitewiseRetriever(base_url=url, api_key=bad).ainvoke(REDIS))]
    for call in calls:
        with pytest.raises(CitewiseClientError) as caught:
            call()
        e = caught.value
        assert e.status == 401 and e.detail and e.request_id
        assert "check the API key" in str(e) and e.request_id in str(e)
        assert e.url == f"{url}/v1/search"


def test_a_key_without_the_search_scope_is_a_403_that_names_the_scope(server):
    url, keys = server
    with pytest.raises(CitewiseClientError) as caught:
        CitewiseClient(url, keys["answer-only"]).search(REDIS, top_k=1, mode="hybrid")
    assert caught.value.status == 403
    assert "'search' scope" in str(caught.value) and "search" in caught.value.detail


def test_over_the_rate_limit_is_a_429_that_says_when_to_retry(lc, server):
    url, keys = server
    retriever = lc.CitewiseRetriever(base_url=url, api_key=keys["one-a-minute"], top_k=1)
    assert retriever.invoke(REDIS)
    with pytest.raises(CitewiseClientError) as caught:
        asyncio.run(retriever.ainvoke(REDIS))
    e = caught.value
    assert e.status == 429 and 1 <= e.retry_after <= 60
    assert f"retry after {e.retry_after:g} s" in str(e)


def test_no_server_names_the_url_and_citewise_serve(llama, lc):
    url = f"http://127.0.0.1:{free_port()}"
    for call in (lambda: llama.CitewiseRetriever(url, "k", timeout=5).retrieve(REDIS),
                 lambda: asyncio.run(lc.CitewiseRetriever(base_url=url, timeout=5).ainvoke(
                     REDIS))):
        with pytest.raises(CitewiseClientError) as caught:
            call()
        assert caught.value.status is None and isinstance(caught.value.__cause__,
                                                          httpx.ConnectError)
        assert url in str(caught.value) and "`citewise serve` is running" in str(caught.value)


def test_a_page_that_is_not_a_search_response_is_said_plainly():
    # What a login proxy in front of the server answers instead of passing the request on.
    login = httpx.MockTransport(lambda request: httpx.Response(200, html="<form>Sign in"))
    client = CitewiseClient("https://citewise.example.com", "k", transport=login)
    with pytest.raises(CitewiseClientError, match="not a citewise search response") as caught:
        client.search(REDIS, top_k=1, mode="hybrid")
    assert caught.value.status == 200
