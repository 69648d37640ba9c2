"""citewise as an MCP server, used through the official SDK's client over streamable HTTP (the
server's /mcp, behind the front door) and over stdio (`citewise mcp`, calling the server with a
key), against a real server with the demo knowledge base."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from citewise.api.app import create_app
from tests.kb import make_key
from tests.live import LiveServer

RESTRICTED = "payments-provider-api-key-rotation.md"
ROTATION = "rotate the payment provider API keys"
TOOLS = {"search", "answer", "get_document", "list_sources"}


@pytest.fixture(scope="module")
def server(demo_kb) -> Iterator[tuple[str, dict]]:
    services, _ = demo_kb
    keys = {
        "bob": make_key(services, "mcp-bob", scopes="search,answer", principal="user:bob"),
        "security": make_key(services, "mcp-sec", scopes="search,answer",
                             principal="group:security"),
        "search-only": make_key(services, "mcp-reader", scopes="search",
                                principal="user:bob"),
    }
    with LiveServer(create_app(services=services), services.settings) as url:
        yield url, keys


def payload(result) -> dict:
    """A tool result's structured content (or its JSON text)."""
    if getattr(result, "structured_content", None):
        return result.structured_content
    return json.loads(result.content[0].text)


async def _over_http(url: str, headers: dict, calls) -> list:
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with streamable_http_client(f"{url}/mcp/", http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                return [await call(session) for call in calls]


def over_http(url: str, headers: dict, *calls) -> list:
    return anyio.run(_over_http, url, headers, calls)


def test_the_tools_are_listed_with_descriptions_for_a_model(server):
    url, keys = server
    (tools,) = over_http(url, keys["bob"], lambda s: s.list_tools())
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == TOOLS
    assert "cited answer" in by_name["answer"].description
    assert "query" in by_name["search"].input_schema["properties"]


def test_search_and_answer_carry_citations(server):
    url, keys = server
    started = time.monotonic()
    found, answered = over_http(
        url, keys["bob"],
        lambda s: s.call_tool("search", {"query": "fail over the redis cache", "top_k": 3}),
        lambda s: s.call_tool("answer", {"question": "How do I fail over the redis cache?"}))
    print(f"MCP over HTTP: search + answer in {time.monotonic() - started:.2f} s")
    results = payload(found)["results"]
    assert results[0]["path"] == "redis-cache-failover.md" and results[0]["start_line"]
    answer = payload(answered)
    assert not answer["abstained"] and "aws elasticache test-failover" in answer["answer"]
    assert answer["citations"][0]["path"] == "redis-cache-failover.md"


def test_a_restricted_document_is_invisible_without_the_group(server):
    url, keys = server
    (outsider,) = over_http(url, keys["bob"], lambda s: s.call_tool(
        "search", {"query": ROTATION, "top_k": 10}))
    assert RESTRICTED not in json.dumps(payload(outsider))
    (insider,) = over_http(url, keys["security"], lambda s: s.call_tool(
        "search", {"query": ROTATION, "top_k": 10}))
    hits = payload(insider)["results"]
    assert hits[0]["path"] == RESTRICTED
    (denied,) = over_http(url, keys["bob"], lambda s: s.call_tool(
        "get_document", {"document_id": hits[0]["document_id"]}))
    assert denied.is_error and "Rotating payment provider" not in json.dumps(
        [c.model_dump() for c in denied.content])


def test_the_answer_tool_needs_the_answer_scope_and_mcp_needs_a_caller(server):
    url, keys = server
    (refused,) = over_http(url, keys["search-only"], lambda s: s.call_tool(
        "answer", {"question": "How do I fail over the redis cache?"}))
    assert refused.is_error and "'answer' scope" in refused.content[0].text
    resp = httpx2.post(f"{url}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       headers={"Authorization": "Bearer cw_nobody_nothing"})
    assert resp.status_code == 401


def test_stdio_calls_the_server_with_a_key(server):
    url, keys = server
    citewise = os.path.join(os.path.dirname(os.sys.executable), "citewise")
    params = StdioServerParameters(command=citewise, args=["mcp"], env={
        **os.environ, "CITEWISE_URL": url,
        "CITEWISE_API_KEY": keys["bob"]["Authorization"].split()[1]})

    async def run() -> tuple:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                found = await session.call_tool("search", {"query": ROTATION, "top_k": 10})
                doc_id = payload(await session.call_tool(
                    "search", {"query": "fail over the redis cache", "top_k": 1}))["results"][0][
                    "document_id"]
                lines = await session.call_tool("get_document", {
                    "document_id": doc_id, "start_line": 1, "end_line": 5})
                return tools, found, lines

    tools, found, lines = anyio.run(run)
    assert {t.name for t in tools.tools} == TOOLS
    assert RESTRICTED not in json.dumps(payload(found))
    text = payload(lines)["text"]
    assert text.startswith("1: ") and len(text.splitlines()) == 5
