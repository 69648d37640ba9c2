"""Every command the docs and ``--help`` show is run, so the docs cannot drift from the code.

Examples come from the fenced ``bash`` blocks of README.md, connectors/README.md and docs/*.md,
and from the "Examples:" part of each command's ``--help``. They run against the bundled demo,
served by a real uvicorn server (the CLI finds it through ``server.json`` and hands its work to
it, as on a developer's machine); ``curl`` examples go to the same server. Examples that ingest a
folder of your own run in-process on a scratch data folder, with the folders they name created.

A comment line right under a command (``#   [1] ...``) is its expected output: it must appear in
what the command prints, so a README that quotes a line range quotes the right one.

Examples that cannot run here are skipped one by one with the reason printed.
"""

from __future__ import annotations

import glob
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from citewise.api.app import create_app
from citewise.api.cli import cli
from citewise.api.remote import remove_server_file, write_server_file
from tests.conftest import free_port
from tests.kb import clean_env, write_kb

ROOT = Path(__file__).resolve().parents[2]
CITEWISE = Path(sys.executable).with_name("citewise")
DOCS = ["README.md", "connectors/README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT))]

# Examples that cannot run in a test, and why (matched against the start of the command).
SKIPPED = {
    "citewise serve": "starts a server that runs until stopped (tests/api/test_cli.py runs it)",
    "citewise mcp": "serves MCP over stdio until the agent closes it (tests/api/test_mcp.py "
                    "runs it)",
    "citewise worker": "runs jobs from a PostgreSQL database until stopped "
                       "(tests/api/test_cli_worker.py runs it)",
    "citewise slack": "runs the Slack bot until stopped, against Slack (tests/slack/ runs it "
                      "against a Slack Web API fake)",
    "citewise eval ../shared": "a benchmark of several minutes (make eval runs it)",
    "citewise eval --qa": "needs the index in-process while this test's server holds it "
                          "(tests/eval/test_golden_set.py runs the golden set)",
    "citewise backup /srv/": "writes outside the test's folder (tests/ingest/test_backup.py "
                             "backs up and restores)",
    "citewise --data-dir restored restore": "needs the backup the example before it wrote "
                                            "(tests/ingest/test_backup.py restores one)",
    "citewise verify --rebuild-catalog": "rebuilds a lost catalog with the server stopped; "
                                         "the demo's server holds this one "
                                         "(tests/ingest/test_verify_repair.py rebuilds one)",
    "citewise --config bench/corpora.toml": "ingests the five shared corpora, about 7 minutes "
                                            "(make eval runs it)",
    "citewise rank train": "trains in-process on an index the demo's server holds, from a "
                           "golden set of the reader's (tests/api/test_rank_training.py runs "
                           "it)",
    "citewise tune --minutes": "trains for minutes (tests/api/test_cli_tune.py runs a short "
                               "training and adopts the model)",
    "citewise migrate-catalog --to postgresql://": "copies into a PostgreSQL server "
                                                   "(tests/api/test_migrate_catalog.py copies "
                                                   "into one)",
    'citewise migrate-catalog --to "$': "copies into the PostgreSQL database of a variable "
                                        "(tests/api/test_migrate_catalog.py copies into one)",
}


@dataclass
class Example:
    where: str  # file:line, or "citewise <command> --help"
    command: str
    expected: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.where}: {self.command}"


def _normalise(command: str) -> str:
    command = re.sub(r"^(\./)?\.venv/bin/citewise\b", "citewise", command.strip())
    return command


def doc_examples() -> list[Example]:
    examples = []
    for rel in DOCS:
        text = (ROOT / rel).read_text()
        for block in re.finditer(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.S):
            first_line = text[: block.start()].count("\n") + 2
            lines = block.group(1).split("\n")
            i = 0
            while i < len(lines):
                line, number = lines[i], first_line + i
                i += 1
                while line.rstrip().endswith("\\") and i < len(lines):
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                    i += 1
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                command = _normalise(re.sub(r"\s+#\s.*$", "", stripped))
                expected = []
                while i < len(lines) and re.match(r"^#\s{2,}\S", lines[i]):
                    expected.append(lines[i].lstrip("#").strip())
                    i += 1
                if command.startswith(("citewise", "curl")):
                    examples.append(Example(f"{rel}:{number}", command, expected))
    return examples


def help_examples() -> list[Example]:
    runner = CliRunner()
    examples = []
    for name in sorted(cli.commands):
        text = runner.invoke(cli, [name, "--help"], env=clean_env()).output
        part = text.split("Examples:", 1)[1] if "Examples:" in text else ""
        for line in part.split("\n\n", 1)[0].splitlines():
            # "citewise search "x" --source a   what it does": the command ends at a wide gap.
            command = re.split(r"\s{2,}", line.strip())[0]
            if command.startswith("citewise "):
                examples.append(Example(f"citewise {name} --help", command))
    return examples


ALL = doc_examples() + help_examples()


def test_the_docs_have_examples_to_run():
    assert len([e for e in ALL if e.where.endswith("--help")]) >= 10
    assert len([e for e in ALL if "--help" not in e.where]) >= 10


# The server and the scratch folders ----------------------------------------------------------


@pytest.fixture(scope="module")
def demo_server(demo_kb):
    """The demo served over HTTP with server.json written, as `citewise serve` does."""
    services, _ = demo_kb
    port = free_port()
    app = create_app(services.settings, services)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    write_server_file(services.settings, "127.0.0.1", port, app.state.operator_token)
    # The admin key examples call "$ADMIN_KEY" (the demo serves in local mode; a key still works).
    from citewise.api.identity.keys import ApiKeys

    keys = ApiKeys(services.stores.keys)
    try:
        _, admin_key = keys.create("docs-examples-admin", "admin")
    except Exception:  # a second module in the same session: make another
        _, admin_key = keys.create(f"docs-admin-{port}", "admin")
    yield services.settings, port, admin_key
    remove_server_file(services.settings)
    server.should_exit = True
    thread.join(timeout=30)


def _scratch(tmp_path: Path) -> Path:
    """A working folder holding the folders examples ingest (./runbooks, ./docs, ~/notes)."""
    for name in ("runbooks", "docs", "notes"):
        write_kb(tmp_path / name)
    return tmp_path


def _runs_in_process(command: str) -> bool:
    """``citewise ingest <folder>`` and the key, usage, audit and feedback commands: run on a
    scratch data folder, not on the demo's (examples create keys by the same names)."""
    words = shlex.split(command)
    if words[:2] in (["citewise", "keys"], ["citewise", "usage"], ["citewise", "audit"],
                     ["citewise", "feedback"]):
        return True
    return words[:2] == ["citewise", "ingest"] and len(words) > 2 and not words[2].startswith("-")


def _given(command: str, data_dir: Path) -> None:
    """What an example assumes exists: the key ``citewise keys revoke NAME`` revokes."""
    words = shlex.split(command)
    if words[:3] == ["citewise", "keys", "revoke"]:
        from citewise.api.composition import build_stores
        from citewise.api.identity.keys import ApiKeys
        from citewise.api.settings import Settings

        stores = build_stores(Settings(data_dir=data_dir))
        ApiKeys(stores.keys).create(words[3], "search")
        stores.close()


def _prepare(command: str, port: int, home: Path, admin_key: str = "") -> list[str]:
    command = command.replace("$ADMIN_KEY", admin_key)
    command = command.replace("localhost:8000", f"127.0.0.1:{port}")
    command = command.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    words = [str(home / w[2:]) if w.startswith("~/") else w for w in shlex.split(command)]
    if words[0] == "citewise":
        return [str(CITEWISE), *words[1:]]
    if words[0] == "curl":
        return ["curl", "--silent", "--show-error", "--fail-with-body", "--max-time", "60",
                *words[1:]]
    return words


@pytest.mark.parametrize("example", ALL, ids=str)
def test_example_runs(example: Example, demo_server, tmp_path):
    for prefix, reason in SKIPPED.items():
        if example.command.startswith(prefix):
            pytest.skip(f"{example}: {reason}")
    settings, port, admin_key = demo_server
    if example.command.startswith("curl") and shutil.which("curl") is None:
        pytest.skip(f"{example}: curl is not installed on this machine")
    cwd = _scratch(tmp_path)
    env = clean_env(HOME=str(cwd), CITEWISE_LOG_LEVEL="WARNING")
    if _runs_in_process(example.command):
        env["CITEWISE_DATA_DIR"] = str(tmp_path / "scratch-data")
        _given(example.command, tmp_path / "scratch-data")
    else:
        # The demo's config and data: the CLI finds the server through server.json.
        env.update(CITEWISE_CONFIG_FILE=str(ROOT / "citewise.toml"),
                   CITEWISE_DATA_DIR=str(settings.data_dir))
    argv = _prepare(example.command, port, cwd, admin_key)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    shown = f"{example}\n$ {shlex.join(argv)}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 0, shown
    assert "Usage:" not in proc.stderr, shown
    printed = " ".join(proc.stdout.split())
    for line in example.expected:
        assert " ".join(line.split()) in printed, f"expected output missing: {line}\n{shown}"
