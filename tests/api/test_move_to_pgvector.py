"""A single-machine installation moved onto PostgreSQL with its vectors in pgvector, with the
commands an operator runs: `citewise migrate-catalog --to postgresql://...`, then `citewise
verify --repair` with ``CITEWISE_DATABASE_URL`` and ``CITEWISE_VECTOR_STORE=pgvector`` builds
the vectors in the database's tables from the copied catalog; search then finds what it found
before, a restricted document stays restricted, and `citewise restore` says what to use instead.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from click.testing import CliRunner, Result

from citewise.api.cli import cli
from tests.kb import REDIS, SECRET, SECRET_TITLE, write_kb

NO_CITEWISE_ENV = {k: None for k in os.environ if k.startswith("CITEWISE_")}


def invoke(*args: object, **settings: str) -> Result:
    """The CLI in this process, with no CITEWISE_* settings but ``settings``."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        result = CliRunner().invoke(cli, [str(a) for a in args],
                                    env={**NO_CITEWISE_ENV, **settings})
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{result.exception!r}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(autouse=True)
def _config_free_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./citewise.toml applies


def _paths(result: Result) -> list[str]:
    assert result.exit_code == 0, result.stderr
    return [r["path"] for r in json.loads(result.stdout)["results"]]


def test_an_installation_moves_onto_postgresql_and_pgvector(tmp_path, dense, postgres_url):
    data = tmp_path / "data"
    assert invoke("--data-dir", data, "ingest", write_kb(tmp_path / "kb")).exit_code == 0
    before = _paths(invoke("--data-dir", data, "search", "redis failover", "--json"))
    moved = invoke("--data-dir", data, "migrate-catalog", "--to", postgres_url)
    assert moved.exit_code == 0, moved.stderr

    shared = {"CITEWISE_DATABASE_URL": postgres_url, "CITEWISE_VECTOR_STORE": "pgvector"}
    empty = invoke("--data-dir", data, "verify", **shared)
    assert empty.exit_code == 3 and "no point in the vector index" in empty.stdout
    repaired = invoke("--data-dir", data, "verify", "--repair", **shared)
    assert repaired.exit_code == 0, repaired.stderr
    assert "consistent" in repaired.stdout

    after = _paths(invoke("--data-dir", data, "search", "redis failover", "--json", **shared))
    assert after[0] == REDIS and after == before
    hidden = _paths(invoke("--data-dir", data, "search", SECRET_TITLE, "-k", "20", "--json",
                           **shared))
    assert SECRET not in hidden
    shown = _paths(invoke("--data-dir", data, "search", SECRET_TITLE, "--group", "security",
                          "--json", **shared))
    assert shown[0] == SECRET

    refused = invoke("--data-dir", tmp_path / "other", "restore", tmp_path, **shared)
    assert refused.exit_code == 1
    assert "pg_restore" in refused.stderr and "verify --repair" in refused.stderr
