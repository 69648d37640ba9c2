"""The ``citewise`` command on another machine: CITEWISE_URL names a real server that requires
keys, CITEWISE_API_KEY holds one, and the command runs in a folder with no data of its own
(what a cron on another machine does with `citewise keys create cron --scopes ingest`).

The server is a real uvicorn over real services; the CLI runs as a process of its own for the
cron's ingest, in-process with click's CliRunner for the rest. Every run checks that no data
folder appeared where the command ran.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from citewise.api.app import create_app
from citewise.api.cli import cli
from citewise.api.composition import Services, build_services
from citewise.api.settings import Settings
from citewise.ingest.runlock import FileRunLock
from tests.kb import ALL_PATHS, SECRET, clean_env, folder_source, make_key, write, write_kb
from tests.live import LiveServer

CITEWISE = Path(sys.executable).with_name("citewise")


@dataclass
class Remote:
    url: str
    services: Services
    keys: dict[str, str]  # name -> secret


@pytest.fixture(scope="module")
def remote(tmp_path_factory, dense) -> Iterator[Remote]:
    """A server that requires keys, declaring "kb" (the test knowledge base) and "mixed" (one
    good and one broken file); keys that differ in scopes."""
    base = tmp_path_factory.mktemp("server")
    mixed = base / "mixed"
    write(mixed, "good.md", "# Good\n\nThe good runbook says to restart the ledger service.\n")
    (mixed / "binary.md").write_bytes(b"# looks like markdown\n\x00\x01\x02\x00binary\n")
    settings = Settings(data_dir=base / "data", require_auth=True,
                        sources=[folder_source(write_kb(base / "kb")),
                                 folder_source(mixed, name="mixed")])
    services = build_services(settings)

    def secret(name: str, scopes: str) -> str:
        return make_key(services, name, scopes=scopes)["Authorization"].split()[1]

    keys = {"cron": secret("cron", "ingest"), "reader": secret("reader", "search"),
            "admin": secret("admin", "search,answer,ingest,admin")}
    try:
        with LiveServer(create_app(services=services), settings) as url:
            yield Remote(url, services, keys)
    finally:
        services.close()


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """An empty working folder on "another machine": no config, no data."""
    folder = tmp_path / "cron-host"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def invoke(remote: Remote, key: str | None, *args: object) -> Result:
    """The CLI in this process with CITEWISE_URL and CITEWISE_API_KEY (the key named, or none)
    and no other CITEWISE_ setting."""
    env = {k: None for k in os.environ if k.startswith("CITEWISE_")}
    env |= {"CITEWISE_URL": remote.url,
            "CITEWISE_API_KEY": remote.keys.get(key, key) if key else None}
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(cli, [str(a) for a in args], env=env)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def show(result: Result) -> str:
    return f"exit {result.exit_code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}" + (
        f"\n--- exception {result.exception!r}" if result.exception else "")


def assert_no_data_folder(folder: Path) -> None:
    assert list(folder.iterdir()) == [], sorted(p.name for p in folder.iterdir())


# Ingest: the cron's run happens on the server ------------------------------------------------


def test_the_cron_key_ingests_a_declared_source_on_the_server(remote, elsewhere):
    before = {r["id"] for r in remote.services.sources.list_runs("kb", 50)}
    run = subprocess.run(
        [str(CITEWISE), "ingest", "--source", "kb"], cwd=elsewhere, capture_output=True,
        text=True, timeout=300,
        env=clean_env(CITEWISE_URL=remote.url, CITEWISE_API_KEY=remote.keys["cron"]))
    out = f"exit {run.returncode}\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    assert run.returncode == 0, out
    assert f"running on the server at {remote.url} (CITEWISE_URL)" in run.stderr, out
    assert "job " in run.stderr and ": done" in run.stderr, out  # the job's progress
    assert f"kb: {len(ALL_PATHS)} added" in run.stdout and "(succeeded)" in run.stdout, out
    assert "Traceback" not in out
    # The server's catalog recorded the run; nothing was made where the cron ran.
    (new,) = [r for r in remote.services.sources.list_runs("kb", 50) if r["id"] not in before]
    assert new["status"] == "succeeded" and new["trigger"] == "api", new
    assert_no_data_folder(elsewhere)


def test_a_remote_run_with_failed_documents_exits_3(remote, elsewhere):
    result = invoke(remote, "cron", "ingest", "--source", "mixed")
    assert result.exit_code == 3, show(result)
    assert "mixed: 1 added" in result.stdout and "(partial)" in result.stdout, show(result)
    assert "failed: binary.md:" in result.stdout and "NUL bytes" in result.stdout
    assert_no_data_folder(elsewhere)


def test_a_folder_of_this_machine_is_refused(remote, elsewhere):
    write_kb(elsewhere / "notes")
    result = invoke(remote, "cron", "ingest", "notes")
    assert result.exit_code == 2, show(result)
    assert "is a folder on this machine" in result.stderr
    assert "--source NAME" in result.stderr and "citewise.toml" in result.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == ["notes"]  # no data folder


def test_a_run_already_going_is_skipped_with_exit_4(remote, elsewhere):
    # Another process holds the server's run lock (a cron on the server's machine, a backup).
    with FileRunLock(remote.services.settings.data.run_lock_path).held("citewise backup (test)"):
        result = invoke(remote, "cron", "ingest", "--source", "kb")
    assert result.exit_code == 4, show(result)
    assert "\nskipped: another run holds the ingest lock" in result.stderr, show(result)
    assert "citewise backup (test)" in result.stderr, show(result)
    assert "Traceback" not in result.output


# Refusals of the key: the CLI's error lines, never a traceback ---------------------------------


def test_a_bad_key_is_one_error_line_and_exit_1(remote, elsewhere):
    forged = remote.keys["cron"][:-4] + "AAAA"
    result = invoke(remote, forged, "ingest", "--source", "kb")
    assert result.exit_code == 1, show(result)
    assert (f"\nerror: the server at {remote.url} refused CITEWISE_API_KEY: the API key is not "
            "valid\n  hint: ") in result.stderr, show(result)
    assert "hint: " in result.stderr and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # an exit, not an exception
    assert_no_data_folder(elsewhere)


def test_no_key_says_which_variable_to_set(remote, elsewhere):
    result = invoke(remote, None, "sources")
    assert result.exit_code == 1, show(result)
    assert "requires an API key, and CITEWISE_API_KEY is not set" in result.stderr
    assert "citewise keys create" in result.stderr
    assert_no_data_folder(elsewhere)


def test_a_key_without_the_scope_is_told_which_scope(remote, elsewhere):
    result = invoke(remote, "cron", "usage")
    assert result.exit_code == 1, show(result)
    assert "refused CITEWISE_API_KEY: this needs the 'admin' scope, which the key 'cron' " \
           "lacks" in result.stderr, show(result)
    assert_no_data_folder(elsewhere)


# Sources, verify and usage ----------------------------------------------------------------------


def test_sources_are_the_servers_as_the_key_sees_them(remote, elsewhere):
    assert invoke(remote, "cron", "ingest", "--source", "kb").exit_code == 0
    result = invoke(remote, "reader", "sources", "--json")
    assert result.exit_code == 0, show(result)
    (kb,) = [s for s in json.loads(result.stdout) if s["name"] == "kb"]
    # A key without a principal reads public documents only: not the security runbook.
    assert kb["documents"] == len(ALL_PATHS) - 1 and kb["declared"], kb
    assert SECRET not in result.stdout
    plain = invoke(remote, "reader", "sources")
    assert plain.exit_code == 0 and plain.stdout.startswith("kb "), show(plain)
    assert_no_data_folder(elsewhere)


def test_verify_runs_on_the_server(remote, elsewhere):
    result = invoke(remote, "cron", "verify", "--json")
    assert result.exit_code == 0, show(result)
    assert json.loads(result.stdout)["ok"] is True
    assert f"asking the server at {remote.url} (CITEWISE_URL)" in result.stderr
    rebuild = invoke(remote, "cron", "verify", "--rebuild-catalog")
    assert rebuild.exit_code == 1 and "on the server's machine" in rebuild.stderr, show(rebuild)
    assert_no_data_folder(elsewhere)


def test_usage_is_the_servers(remote, elsewhere):
    invoke(remote, "reader", "sources")
    result = invoke(remote, "admin", "usage", "--by", "key", "--json")
    assert result.exit_code == 0, show(result)
    assert "reader" in {row["key"] for row in json.loads(result.stdout)}
    assert_no_data_folder(elsewhere)


# Commands with no remote form ---------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("keys", "list"), ("audit",), ("backup", "backup-dir"), ("reindex", "--status"),
    ("feedback", "export"),
])
def test_a_command_without_a_remote_form_refuses_to_make_a_data_folder(remote, elsewhere,
                                                                      args):
    result = invoke(remote, "admin", *args)
    assert result.exit_code == 1, show(result)
    assert result.stderr.startswith(f"error: CITEWISE_URL is set ({remote.url})"), show(result)
    assert "holds no catalog: refusing to create a new one" in result.stderr
    assert "unset CITEWISE_URL" in result.stderr
    assert_no_data_folder(elsewhere)


def test_on_the_servers_machine_those_commands_still_work(remote, tmp_path):
    # CITEWISE_URL exported for the Slack bot, say: the catalog is here, so keys work on it.
    result = invoke(remote, "admin", "--data-dir", remote.services.settings.data_dir,
                    "keys", "list", "--json")
    assert result.exit_code == 0, show(result)
    assert {"cron", "reader", "admin"} <= {k["name"] for k in json.loads(result.stdout)}
