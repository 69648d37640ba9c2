"""The ``citewise`` command, run for real: in-process with click's CliRunner, and as separate
processes where that matters (a server holding the embedded index, an ingest handed to it).

Every run uses a config-free working folder and an environment without ``CITEWISE_*``, so no
stray ``./citewise.toml`` or setting of the machine running the tests applies.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from citewise.api.cli import cli
from tests.kb import ALL_PATHS, REDIS, SECRET, SECRET_TITLE, clean_env, write, write_kb
from tests.live import free_port, wait_healthy

CITEWISE = Path(sys.executable).with_name("citewise")
NO_CITEWISE_ENV = {k: None for k in os.environ if k.startswith("CITEWISE_")}


def invoke(*args: object) -> Result:
    """Run the CLI in this process; the CLI's logging set-up is undone afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, [str(a) for a in args], env=NO_CITEWISE_ENV)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def show(result: Result) -> str:
    return f"exit {result.exit_code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}" + (
        f"\n--- exception {result.exception!r}" if result.exception else ""
    )


@pytest.fixture(autouse=True)
def _config_free_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in NO_CITEWISE_ENV:
        monkeypatch.delenv(key)


@dataclass
class Ingested:
    kb: Path
    data: Path
    first: Result


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, dense) -> Iterator[Ingested]:
    """The knowledge base ingested once by ``citewise ingest`` into a module data folder."""
    base = tmp_path_factory.mktemp("cli")
    kb = write_kb(base / "kb")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        first = invoke("--data-dir", base / "data", "ingest", kb)
    yield Ingested(kb=kb, data=base / "data", first=first)


# Help --------------------------------------------------------------------------------------


def test_top_level_help_has_a_quick_start():
    result = invoke("--help")
    assert result.exit_code == 0, show(result)
    assert "Quick start" in result.stdout
    assert "citewise ingest demo/runbooks" in result.stdout
    # Run where the README says to run it, the repository root, the quick start's folder is
    # there (it said ./runbooks, which is not).
    root = Path(__file__).resolve().parents[2]
    folder = re.search(r"citewise ingest (\S+)", result.stdout).group(1)
    assert (root / folder).is_dir(), folder
    assert 'citewise ask "' in result.stdout
    for command in ("ingest", "search", "ask", "serve", "sources"):
        assert command in result.stdout
    version = invoke("--version")
    assert version.exit_code == 0 and "citewise" in version.stdout


@pytest.mark.parametrize(
    "command",
    [
        "ingest",
        "search",
        "ask",
        "serve",
        "sources",
    ],
)
def test_subcommand_help_shows_examples(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0, show(result)
    assert "Examples:" in result.stdout
    assert f"citewise {command} " in result.stdout


def test_ingest_help_documents_exit_statuses():
    out = invoke("ingest", "--help").stdout
    assert "Exit status" in out
    assert "3 some documents failed" in out


# Ingest ------------------------------------------------------------------------------------


def test_ingest_prints_a_summary(ingested):
    result = ingested.first
    assert result.exit_code == 0, show(result)
    assert f"kb: {len(ALL_PATHS)} added, 0 updated, 0 unchanged, 0 deleted, 0 failed" in (
        result.stdout
    )
    assert "(succeeded)" in result.stdout
    assert "failed:" not in result.stdout
    # Once: the pipeline's log line said the same again on stderr.
    both = result.stdout + result.stderr
    assert both.count(f"{len(ALL_PATHS)} added, 0 updated") == 1, show(result)


def test_reindex_status_of_an_index_built_by_ingest_runs(ingested):
    result = invoke("--data-dir", ingested.data, "reindex", "--status")
    assert result.exit_code == 0, show(result)
    assert "built with not recorded" not in result.stdout
    assert "built by ingest runs" in result.stdout, show(result)


def test_second_ingest_is_unchanged_and_embeds_nothing(ingested):
    result = invoke("--data-dir", ingested.data, "ingest", ingested.kb)
    assert result.exit_code == 0, show(result)
    assert f"0 added, 0 updated, {len(ALL_PATHS)} unchanged" in result.stdout
    assert "0 chunks written, 0 embedded" in result.stdout

    as_json = invoke("--data-dir", ingested.data, "ingest", ingested.kb, "--json")
    assert as_json.exit_code == 0, show(as_json)
    (report,) = json.loads(as_json.stdout)
    assert report["source"] == "kb" and report["status"] == "succeeded"
    assert report["unchanged"] == len(ALL_PATHS)
    assert (report["added"], report["updated"], report["chunks_embedded"]) == (0, 0, 0)


def test_broken_files_exit_3_and_are_named(tmp_path):
    folder = tmp_path / "mixed"
    write(folder, "good.md", "# Good\n\nThe good runbook says to restart the ledger service.\n")
    write(folder, "bad-front.md", "---\ntitle: [unclosed\ntags: x\n---\n# Bad\n\nBody.\n")
    (folder / "binary.md").write_bytes(b"# looks like markdown\n\x00\x01\x02\x00binary\n")
    result = invoke("--data-dir", tmp_path / "data", "ingest", folder)
    assert result.exit_code == 3, show(result)
    assert "mixed: 1 added, 0 updated, 0 unchanged, 0 deleted, 2 failed" in result.stdout
    assert "(partial)" in result.stdout
    lines = result.stdout.splitlines()
    front = [ln for ln in lines if "failed: bad-front.md:" in ln]
    binary = [ln for ln in lines if "failed: binary.md:" in ln]
    assert len(front) == 1 and "front matter is not valid YAML" in front[0], result.stdout
    assert len(binary) == 1 and "NUL bytes" in binary[0], result.stdout
    assert "good.md" not in result.stdout

    # The good file was indexed all the same.
    found = invoke("--data-dir", tmp_path / "data", "search", "restart the ledger", "--json")
    assert found.exit_code == 0, show(found)
    assert json.loads(found.stdout)["results"][0]["path"] == "good.md"


def test_ingest_without_arguments_says_what_to_pass(tmp_path):
    result = invoke("--data-dir", tmp_path / "data", "ingest")
    assert result.exit_code == 2, show(result)
    message = result.stderr
    assert "PATH" in message and "--source" in message and "--all" in message, show(result)


def test_ingest_of_a_missing_folder_is_a_usage_error(tmp_path):
    result = invoke("--data-dir", tmp_path / "data", "ingest", tmp_path / "nowhere")
    assert result.exit_code == 2, show(result)
    assert "nowhere" in result.stderr and "does not exist" in result.stderr


# Search, ask, sources ----------------------------------------------------------------------


def test_search_json(ingested):
    result = invoke("--data-dir", ingested.data, "search", "redis failover", "--json")
    assert result.exit_code == 0, show(result)
    results = json.loads(result.stdout)["results"]
    assert 0 < len(results) <= 5  # the default --top-k
    assert results[0]["path"] == REDIS
    assert results[0]["source"] == "kb"
    assert results[0]["title"] == "Redis cache failover"
    assert {"document_id", "heading", "text", "score"} <= set(results[0])

    one = invoke("--data-dir", ingested.data, "search", "redis failover", "-k", "1", "--json")
    assert len(json.loads(one.stdout)["results"]) == 1
    filtered = invoke("--data-dir", ingested.data, "search", "redis failover", "--tag",
                      "postgres", "--json")
    assert {r["path"] for r in json.loads(filtered.stdout)["results"]} == {
        "runbooks/postgres-disk-full.md"
    }


def test_search_respects_groups(ingested):
    anon = invoke("--data-dir", ingested.data, "search", SECRET_TITLE, "-k", "20", "--json")
    assert anon.exit_code == 0, show(anon)
    assert SECRET not in {r["path"] for r in json.loads(anon.stdout)["results"]}
    member = invoke("--data-dir", ingested.data, "search", SECRET_TITLE, "--user", "dana",
                    "--group", "security", "--json")
    assert json.loads(member.stdout)["results"][0]["path"] == SECRET


def test_search_plain_output(ingested):
    result = invoke("--data-dir", ingested.data, "search", "redis failover", "-k", "2")
    assert result.exit_code == 0, show(result)
    assert result.stdout.startswith("1. Redis cache failover")
    assert f"kb/{REDIS}:" in result.stdout
    assert "2. " in result.stdout and "3. " not in result.stdout


def test_ask_prints_a_cited_answer(ingested):
    result = invoke("--data-dir", ingested.data, "ask", "How do I fail over the Redis cache?")
    assert result.exit_code == 0, show(result)
    assert "[1]" in result.stdout
    assert "  [1] Redis cache failover" in result.stdout
    assert f"kb/{REDIS}" in result.stdout

    as_json = invoke("--data-dir", ingested.data, "ask", "How do I fail over the Redis cache?",
                     "--json")
    body = json.loads(as_json.stdout)
    assert body["abstained"] is False and body["citations"][0]["path"] == REDIS

    bread = invoke("--data-dir", ingested.data, "ask", "How long should I knead bread dough?")
    assert bread.exit_code == 0, show(bread)
    assert "could not find" in bread.stdout
    assert "[1]" not in bread.stdout


def test_sources_lists_the_ingested_folder(ingested):
    result = invoke("--data-dir", ingested.data, "sources", "--json")
    assert result.exit_code == 0, show(result)
    (kb,) = [s for s in json.loads(result.stdout) if s["name"] == "kb"]
    assert kb["documents"] == len(ALL_PATHS) and kb["type"] == "folder"
    plain = invoke("--data-dir", ingested.data, "sources")
    assert plain.stdout.startswith("kb ") and "(not in config)" in plain.stdout


# A server holds the index: the CLI hands its work to it ------------------------------------


def _start_server(tmp_path: Path, data: Path) -> tuple[str, subprocess.Popen, Path]:
    port = free_port()
    log = tmp_path / f"server-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(CITEWISE), "--data-dir", str(data), "serve", "--port", str(port)],
            cwd=tmp_path, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
        )
    return f"http://127.0.0.1:{port}", proc, log


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_ingest_is_handed_to_the_running_server(tmp_path):
    data = tmp_path / "server-data"
    url, proc, log = _start_server(tmp_path, data)
    try:
        wait_healthy(url, proc, log)
        _handoff(tmp_path, data, url, log)
        # Ctrl-C stops the server cleanly: it forgets server.json and releases the index.
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert not (data / "server.json").exists(), log.read_text()
    finally:
        _stop(proc)
    local = invoke("--data-dir", data, "search", "redis failover", "--json")
    assert local.exit_code == 0, show(local)
    assert json.loads(local.stdout)["results"][0]["source"] == "handoff-kb"


def _handoff(tmp_path: Path, data: Path, url: str, log: Path) -> None:
    assert json.loads((data / "server.json").read_text())["url"] == url

    folder = write_kb(tmp_path / "handoff-kb")
    ingest = subprocess.run(
        [str(CITEWISE), "--data-dir", str(data), "ingest", str(folder)],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300,
    )
    out = f"exit {ingest.returncode}\n{ingest.stdout}\n{ingest.stderr}\n--- server\n"
    assert ingest.returncode == 0, out + log.read_text()
    assert f"the server at {url} holds the index; handing the run to it" in ingest.stderr, out
    assert f"handoff-kb: {len(ALL_PATHS)} added" in ingest.stdout, out
    assert "(succeeded)" in ingest.stdout, out

    hits = httpx.post(f"{url}/v1/search", json={"query": "redis failover"}, timeout=30).json()
    assert hits["results"][0]["source"] == "handoff-kb"
    assert hits["results"][0]["path"] == REDIS
    jobs = httpx.get(f"{url}/v1/ingest/jobs", timeout=10).json()["jobs"]
    assert [j["status"] for j in jobs] == ["done"]

    # Search and ask from another process while the server holds the index.
    found = invoke("--data-dir", data, "search", "postgres disk full", "--json")
    assert found.exit_code == 0, show(found)
    results = json.loads(found.stdout)["results"]
    assert results[0]["source"] == "handoff-kb"
    assert results[0]["path"] == "runbooks/postgres-disk-full.md"
    secret = invoke("--data-dir", data, "search", SECRET_TITLE, "--group", "security", "--json")
    assert json.loads(secret.stdout)["results"][0]["path"] == SECRET
    asked = invoke("--data-dir", data, "ask", "How do I fail over the Redis cache?")
    assert asked.exit_code == 0 and "[1]" in asked.stdout, show(asked)


def test_serve_cleans_up_on_sigterm(tmp_path):
    data = tmp_path / "server-data"
    url, proc, log = _start_server(tmp_path, data)
    try:
        wait_healthy(url, proc, log)
        assert (data / "server.json").exists()
        proc.terminate()  # what systemd, docker stop and Kubernetes send
        proc.wait(timeout=30)
        assert not (data / "server.json").exists(), log.read_text()
        assert proc.returncode >= 0, "killed by the signal instead of exiting"
    finally:
        _stop(proc)
