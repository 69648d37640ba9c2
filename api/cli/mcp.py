"""`citewise mcp`: the MCP server over stdio, for agents that start a command."""

from __future__ import annotations

import os
import textwrap

import click

from citewise.api.cli.base import Context, cli


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise mcp                          stdio; CITEWISE_URL and CITEWISE_API_KEY set

        \b
        An agent's MCP configuration (Claude Desktop, Cursor, VS Code...):
          {"mcpServers": {"citewise": {"command": "citewise", "args": ["mcp"],
           "env": {"CITEWISE_URL": "https://citewise.example.com",
                   "CITEWISE_API_KEY": "cw_..."}}}}

        Agents that speak streamable HTTP can use the server's /mcp endpoint directly, with
        the same key as a Bearer token.
        """
    )
)
@click.pass_obj
def mcp(obj: Context) -> None:
    """Serve citewise's tools (search, answer, get_document, list_sources) to an agent over
    stdio, calling a running citewise server with your key."""
    from citewise.api.mcp import stdio_server

    url = os.environ.get("CITEWISE_URL")
    if not url:
        raise click.UsageError("$CITEWISE_URL is not set: the citewise server the tools call, "
                               "e.g. http://127.0.0.1:8000")
    stdio_server(url, os.environ.get("CITEWISE_API_KEY")).run("stdio")
