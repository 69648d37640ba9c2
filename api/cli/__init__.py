"""The ``citewise`` command: ingest, search, ask, serve, worker, sources, eval, keys, usage,
audit, feedback, rank, verify, backup, restore, reindex, tune, migrate-catalog, vocabulary, the
MCP server and the Slack bot.

Every command reads settings from ``CITEWISE_*`` environment variables and the config file
(``./citewise.toml`` or ``--config``). When ``citewise serve`` holds the embedded index, the
other commands send their work to it over HTTP instead of failing on the lock.

One module per command (or family); importing them registers them on the group.
"""

from __future__ import annotations

from citewise.api.cli import (  # noqa: F401  (registers)
    admin,
    evaluate,
    ingest,
    maintenance,
    mcp,
    migrate,
    query,
    rank,
    reindex,
    serve,
    slack,
    sources,
    tune,
    vocabulary,
    worker,
)
from citewise.api.cli.base import cli


def main() -> None:
    cli(prog_name="citewise")


__all__ = ["cli", "main"]
