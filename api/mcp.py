"""citewise for agents: an MCP server with tools to search, answer, read documents and list
sources.

Two ways to reach it, one set of tools:

* streamable HTTP at ``/mcp`` on the server: the front door has already established who is
  calling (API key, Access or OIDC token), and the tools run in-process as that caller;
* stdio (``citewise mcp``), for an agent that starts a command: the tools call a running
  citewise server over HTTP with ``CITEWISE_API_KEY`` (through ``citewise_client``), so
  permissions are the key's.

Results carry their citations (source, path, lines, link), so an agent can quote and link.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from citewise.api.answering import Answering, Asker, Question
from citewise.errors import CitewiseError, ForbiddenError
from citewise.types import SearchFilters
from citewise_client import CitewiseClient, CitewiseClientError, Filters, Unreachable

INSTRUCTIONS = """citewise answers questions about this organisation's runbooks, wiki and code,
with citations, from the documents the caller may read. Use `answer` for a question a person
would ask (what to do when an alert fires, who owns a service, how a procedure goes); `search`
to find passages to read yourself; `get_document` to read a cited document or a range of its
lines; `list_sources` to see what is indexed. Quote the citations you use."""


ROUTE = "/mcp"  # the in-process tools' route, as guardrail policies and the audit log name it


class Backend(Protocol):
    def search(self, query: str, top_k: int, filters: dict) -> list[dict]: ...
    def answer(self, question: str, conversation_id: str | None) -> dict: ...
    def document(self, document_id: str, content: bool) -> dict: ...
    def sources(self) -> list[dict]: ...


class InProcess:
    """The tools as the caller the front door established, on the server's own services."""

    def __init__(self, request, services, answering: Answering) -> None:
        # The tool call runs inside its /mcp/ HTTP request: the caller is the one the front
        # door decided for it, and what the answer meters lands on that request's usage row.
        self.asker = Asker.of(request)
        self.caller = self.asker.caller
        self.services = services
        self.answering = answering

    def _need(self, scope: str) -> None:
        if not self.caller.may(scope):
            raise ForbiddenError(f"this tool needs the '{scope}' scope",
                                 hint="ask an administrator for a key with it")

    def search(self, query: str, top_k: int, filters: dict) -> list[dict]:
        self._need("search")
        results = self.services.search.search(query, self.caller.identity, top_k=top_k,
                                              filters=SearchFilters(**filters))
        return [r.model_dump() for r in results]

    def answer(self, question: str, conversation_id: str | None) -> dict:
        self._need("answer")
        # The same path as /v1/answer, so the same rules: guardrails, the conversation's turn,
        # usage and the audit log. The result has the shape /v1/answer gives citewise mcp.
        answered = self.answering.answer(self.asker, Question(
            question, ROUTE, conversation_id=conversation_id))
        return {**answered.answer.model_dump(), **answered.ids()}

    def document(self, document_id: str, content: bool) -> dict:
        self._need("search")
        # Unset fields left out, as GET /v1/documents/{id} (what ``OverHTTP`` reads) does.
        return self.services.library.document(document_id, self.caller.identity,
                                              include_content=content).model_dump(
            exclude_unset=True)

    def sources(self) -> list[dict]:
        self._need("search")
        admin = self.caller.may("admin")  # run figures count every document, readable or not
        views = self.services.library.sources(self.caller.identity, every_name=admin)
        return [{**v.model_dump(), **({} if admin else {"last_run": None})} for v in views]


class OverHTTP:
    """The tools through a citewise server's HTTP API, with a key (``citewise mcp``): the
    replies are the server's JSON, as the in-process tools give them."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float = 120.0) -> None:
        self._client = CitewiseClient(base_url, api_key, timeout=timeout)

    @contextmanager
    def _said(self) -> Iterator[None]:
        """The client's errors as the agent reads them (a tool error with the message)."""
        try:
            yield
        except Unreachable as e:
            raise CitewiseError(f"citewise at {self._client.base_url} cannot be reached: "
                                f"{e.reason}",
                                hint="start it (citewise serve) or set CITEWISE_URL") from e
        except CitewiseClientError as e:
            raise CitewiseError(f"citewise answered {e.status}: {e.detail or e}") from e

    def search(self, query: str, top_k: int, filters: dict) -> list[dict]:
        with self._said():
            found = self._client.search(query, top_k=top_k, filters=Filters(**filters))
        return [hit.model_dump() for hit in found.results]

    def answer(self, question: str, conversation_id: str | None) -> dict:
        with self._said():
            return self._client.answer(question, conversation_id=conversation_id).model_dump()

    def document(self, document_id: str, content: bool) -> dict:
        with self._said():
            return self._client.document(document_id, include_content=content).model_dump()

    def sources(self) -> list[dict]:
        with self._said():
            return [source.model_dump() for source in self._client.sources()]


def _lines(text: str, start: int | None, end: int | None) -> str:
    if start is None and end is None:
        return text
    lines = text.split("\n")
    lo = max(1, start or 1)
    hi = min(len(lines), end or len(lines))
    return "\n".join(f"{n}: {lines[n - 1]}" for n in range(lo, hi + 1))


def build_mcp(make_backend) -> MCPServer:
    """The MCP server; ``make_backend(ctx)`` gives the tools their backend for one call. A
    citewise error (a missing scope, a document the caller may not read) reaches the agent as
    the tool's error message, with its hint."""
    server = MCPServer("citewise", instructions=INSTRUCTIONS)

    class _Guarded:
        def __init__(self, backend) -> None:
            self._backend = backend

        def __getattr__(self, name):
            method = getattr(self._backend, name)

            def call(*args, **kwargs):
                try:
                    return method(*args, **kwargs)
                except CitewiseError as e:
                    raise ToolError(str(e)) from e
            return call

    def guarded(ctx: Context):
        try:
            return _Guarded(make_backend(ctx))
        except CitewiseError as e:
            raise ToolError(str(e)) from e

    @server.tool()
    def search(query: str, ctx: Context, top_k: int = 8, sources: list[str] | None = None,
               tags: list[str] | None = None, services: list[str] | None = None) -> dict:
        """Hybrid (semantic + keyword) search over the runbooks, wiki pages and code the caller
        may read. Returns passages, best first, each with its document id, source, title,
        heading, path or URL, start and end lines, and text. Narrow with sources (source
        names), tags or services. Use it to find passages to read; use `answer` for a cited
        answer to a question."""
        filters = {"sources": sources or [], "tags": tags or [], "services": services or []}
        results = guarded(ctx).search(query, max(1, min(top_k, 50)), filters)
        return {"results": results}

    @server.tool()
    def answer(question: str, ctx: Context, conversation_id: str | None = None) -> dict:
        """A cited answer to a question, from what the caller may read: the steps of a runbook
        in order with their commands, a fact with its source, a function with its lines. Every
        [n] in `answer` points at `citations[n]` (path, lines, link). `abstained` is true when
        nothing the caller may read answers it: say so rather than guess. Pass the
        `conversation_id` of a previous answer to ask a follow-up."""
        return guarded(ctx).answer(question, conversation_id)

    @server.tool()
    def get_document(document_id: str, ctx: Context, start_line: int | None = None,
                     end_line: int | None = None, section: str | None = None) -> dict:
        """A document the caller may read, by the id a search result or citation gave: its
        metadata and text, or only lines start_line..end_line (numbered), or only the chunks
        of one section (a heading path such as "Mitigation")."""
        doc = guarded(ctx).document(document_id, True)
        text = doc.pop("content", None) or ""
        if section:
            chunks = [c for c in doc.get("chunks", []) if section.lower() in
                      (c.get("heading") or "").lower()]
            doc["text"] = "\n\n".join(c.get("text", "") for c in chunks)
        else:
            doc["text"] = _lines(text, start_line, end_line)
        doc.pop("chunks", None)
        return doc

    @server.tool()
    def list_sources(ctx: Context) -> dict:
        """The sources indexed (runbook folders, git repositories, Confluence spaces) with how
        many documents of each the caller may read."""
        return {"sources": guarded(ctx).sources()}

    @server.resource("citewise://documents/{document_id}", mime_type="application/json")
    def document_resource(document_id: str, ctx: Context) -> dict:
        """A document the caller may read, with its text."""
        return guarded(ctx).document(document_id, True)

    return server


def http_server(services, answering) -> MCPServer:
    """The server mounted at /mcp: every call as the caller the front door established, on
    the services ``services()`` and the answering ``answering()`` return (built when the app
    starts)."""
    return build_mcp(lambda ctx: InProcess(ctx.request_context.request, services(),
                                           answering()))


def stdio_server(base_url: str, api_key: str | None) -> MCPServer:
    backend = OverHTTP(base_url, api_key)
    return build_mcp(lambda ctx: backend)
