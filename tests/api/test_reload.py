"""Reloading a running server's config file (``api/reload.py``), against a real ``citewise serve``
process: a source added to the file is ingested by name after ``SIGHUP`` or ``POST
/v1/admin/reload``; before that, the server says its config is older than the file; a broken
file changes nothing; and the start-up log says which identity methods are active."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.kb import clean_env, write, write_kb
from tests.live import free_port, wait_healthy

CITEWISE = Path(sys.executable).with_name("citewise")

RUNBOOKS = """
[[sources]]
name = "runbooks"
type = "folder"
path = "kb"
readers = ["public"]
"""

TEAM_NOTES = """
[[sources]]
name = "team-notes"
type = "folder"
path = "notes"
readers = ["public"]
"""

NOTE = """# Kettle descaling

Descale the office kettle every Friday with citric acid: two spoons, boil, rinse twice.
"""


class Served:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "citewise.toml"
        self.data = root / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(CITEWISE), "--config", str(self.config), "serve", "--port", str(self.port)],
                cwd=self.root, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
        wait_healthy(self.url, self.proc, self.log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(CITEWISE), "--config", str(self.config), *args],
                              cwd=self.root, env=clean_env(), capture_output=True, text=True,
                              timeout=300)

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log.read_text():
                return
            time.sleep(0.1)
        pytest.fail(f"{text!r} not in the server's log:\n{self.log.read_text()}")

    def shown(self, run: subprocess.CompletedProcess) -> str:
        return (f"exit {run.returncode}\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}\n"
                f"--- server\n{self.log.read_text()}")


@pytest.fixture
def served(tmp_path) -> Served:
    write_kb(tmp_path / "kb")
    write(tmp_path / "notes", "kettle.md", NOTE)
    served = Served(tmp_path)
    served.config.write_text(RUNBOOKS)
    yield served
    served.stop()


def _create_key(served: Served, name: str, scopes: str) -> str:
    made = served.cli("keys", "create", name, "--scopes", scopes)
    assert made.returncode == 0, served.shown(made)
    return next(w for w in made.stdout.split() if w.startswith("cw_"))


def test_sighup_reloads_a_source_added_to_the_file(served):
    served.start()
    pid = served.proc.pid
    with served.config.open("a") as f:
        f.write(TEAM_NOTES)

    # The CLI reads the file (team-notes is there) and hands the run to the server, which
    # read the file before: it says its config is older than the file, and how to reload.
    before = served.cli("ingest", "--source", "team-notes")
    assert before.returncode == 1, served.shown(before)
    said = " ".join(before.stderr.split())
    assert "no source named 'team-notes'" in said, served.shown(before)
    assert "the server's config is older than the file" in said, served.shown(before)
    assert f"the server read {served.config} at " in said, served.shown(before)
    assert f"kill -HUP {pid}" in said and "POST /v1/admin/reload" in said, served.shown(before)

    served.proc.send_signal(signal.SIGHUP)
    served.wait_for_log("config reload (SIGHUP): reloaded")
    assert served.proc.poll() is None, "SIGHUP stopped the server"

    after = served.cli("ingest", "--source", "team-notes")
    assert after.returncode == 0, served.shown(after)
    assert "team-notes: 1 added" in after.stdout, served.shown(after)
    sources = httpx.get(f"{served.url}/v1/sources", timeout=30).json()["sources"]
    assert {s["name"]: s["declared"] for s in sources}["team-notes"] is True
    hits = httpx.post(f"{served.url}/v1/search", json={"query": "descale the kettle"},
                      timeout=30).json()["results"]
    assert hits[0]["source"] == "team-notes"
    assert "sources added: team-notes" in served.log.read_text()


def test_post_reload_applies_sources_schedule_and_guardrails_and_refuses_a_broken_file(served):
    admin = _create_key(served, "ops-admin", "admin")
    reader = _create_key(served, "reader", "search")
    served.start()
    original = served.config.read_text()
    served.config.write_text(original + TEAM_NOTES + """
[schedule]
ingest = "0 3 * * *"
catch_up = false

[[guardrails]]
name = "no-kettles"
kind = "deny"
action = "block"
terms = ["kettle"]
""")
    url = f"{served.url}/v1/admin/reload"

    refused = httpx.post(url, headers={"Authorization": f"Bearer {reader}"}, timeout=30)
    assert refused.status_code == 403, refused.text
    assert "admin" in refused.json()["detail"]

    done = httpx.post(url, headers={"Authorization": f"Bearer {admin}"}, timeout=30)
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["reloaded"] == ["sources", "schedule", "guardrails"], body
    assert body["sources"] == {"added": ["team-notes"], "removed": [], "changed": []}, body
    assert body["needs_restart"] == [], body
    assert body["config_file"] == str(served.config)
    served.wait_for_log("schedule: team-notes next at")

    ingested = served.cli("ingest", "--source", "team-notes")
    assert ingested.returncode == 0, served.shown(ingested)
    assert "team-notes: 1 added" in ingested.stdout, served.shown(ingested)
    # The new guardrail is the one answers meet now.
    blocked = httpx.post(f"{served.url}/v1/answer",
                         json={"question": "how do I descale the kettle?"}, timeout=60)
    assert blocked.status_code == 403, blocked.text
    assert blocked.json()["type"] == "urn:citewise:error:guardrail_blocked"

    # A broken file: 422 with what is wrong, and the server keeps the config it has.
    good = served.config.read_text()
    for broken, reason in ((good + "\n[[sources]\nname = \n", "not valid TOML"),
                           (good + '\n[[sources]]\nname = "wiki"\ntype = "sharepoint"\n',
                            "source 'wiki' has unknown type 'sharepoint'"),
                           (good.replace('"0 3 * * *"', '"0 25 * * *"'), "schedule '0 25 * * *'")):
        served.config.write_text(broken)
        answer = httpx.post(url, headers={"Authorization": f"Bearer {admin}"}, timeout=30)
        assert answer.status_code == 422, answer.text
        problem = answer.json()
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert problem["type"] == "urn:citewise:error:invalid_config", problem
        assert reason in problem["detail"], problem
        assert "source 'wiki': source 'wiki'" not in problem["detail"], problem
        assert "the server keeps the config it read at" in problem["detail"], problem
    served.wait_for_log("config reload (POST /v1/admin/reload) refused: the config file was "
                        "not reloaded")
    assert served.proc.poll() is None
    still = httpx.get(f"{served.url}/v1/sources", timeout=30).json()["sources"]
    assert {"runbooks", "team-notes"} <= {s["name"] for s in still}
    again = httpx.post(f"{served.url}/v1/answer",
                       json={"question": "how do I descale the kettle?"}, timeout=60)
    assert again.status_code == 403, "the old guardrails were dropped by a refused reload"

    # A setting that only a restart applies is named, not silently ignored; the rest reloads.
    served.config.write_text("[settings]\nchunk_max_tokens = 150\n" + good.replace(TEAM_NOTES, ""))
    restart = httpx.post(url, headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()
    assert restart["needs_restart"] == ["chunk_max_tokens"], restart
    assert restart["sources"]["removed"] == ["team-notes"], restart
    assert "changed but needs a restart: chunk_max_tokens" in restart["summary"]

    audit = httpx.get(f"{served.url}/v1/audit", params={"action": "config.reload"},
                      headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()
    outcomes = [(e["actor"], e["key"], e["outcome"]) for e in reversed(audit["entries"])]
    assert [o for _, _, o in outcomes] == ["ok", "refused", "refused", "refused", "ok"], audit
    assert {k for _, k, _ in outcomes} == {"ops-admin"}


def test_the_start_up_log_names_the_identity_methods(served):
    _create_key(served, "one", "search")
    _create_key(served, "two", "search")
    served.start()
    log = served.log.read_text()
    line = next((x for x in log.splitlines() if "identity: " in x), None)
    assert line is not None, log
    assert "API keys (2 active)" in line, line
    assert "local mode (callers on this machine are the operator" in line, line
    assert "cw_" not in line  # never a secret
    info = json.loads((served.data / "server.json").read_text())
    assert info["operator_token"] not in log
