"""Benchmark of the git connector: first full index of a repository of a few thousand files,
then the re-sync after a commit that touches one file.

Usage (from the repository root)::

    python bench/bench_git.py [--code-files 4879] [--out bench/results]   # 5,000 files

The repository is built in a temporary folder: the Markdown runbooks of
``../shared/corpora/prometheus-operator-runbooks`` under ``docs/``, plus generated Python, Go
and YAML files under ``services/`` (one small class or service config each, so the repository
has the shape of a real monorepo: thousands of files, most of them short). It is committed once
and ingested through ``GitConnector`` and the real pipeline (packaged model, embedded Qdrant,
SQLite, blob folder) into a fresh data folder. Measured, in order:

1. **First full index**: every file read from git, redacted, chunked, embedded, written.
2. **Re-sync after a one-file commit**: one method of one Python file is edited and committed;
   the run asks git for the diff, reads that file, and embeds the one chunk that changed.
3. **Re-sync with no new commit**: the cost of asking git "anything new?".
4. **Full comparison**: the source's stored state is dropped (as after a force-push that lost
   the old commit): every file is read and hashed again, nothing is embedded.

The model is loaded before the clock starts. Figures go to ``<out>/git.json`` and ``git.md``.
Skips with a message when ``../shared/corpora`` is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpora" / "prometheus-operator-runbooks"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.connectors.git import GitConnector  # noqa: E402

_GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
            "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
WORDS = ("payment ledger invoice refund checkout cart search catalog inventory shipping "
         "billing account session token quota region replica cache queue worker").split()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          env={**os.environ, **_GIT_ENV}).stdout.decode().strip()


def python_file(rng: random.Random, i: int) -> str:
    a, b = rng.sample(WORDS, 2)
    name = f"{a.capitalize()}{b.capitalize()}Service{i}"
    return f'''"""{a.capitalize()} {b} service number {i}: keeps {a} records in step with {b}."""

import logging

log = logging.getLogger(__name__)
RETRY_BUDGET = {rng.randint(1, 9)}


class {name}:
    """Owns the {a} {b} workflow for region {rng.choice(["eu", "us", "ap"])}-{i % 7}."""

    def __init__(self, client, timeout_s: float = {rng.randint(2, 30)}.0) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def sync_{a}(self, ids: list[str]) -> int:
        """Pushes each {a} to the {b} store; returns how many were written."""
        written = 0
        for item in ids:
            if self.client.put("{b}", item, timeout=self.timeout_s):
                written += 1
        log.info("synced %d {a} records", written)
        return written

    def reconcile_{b}(self) -> None:
        for attempt in range(RETRY_BUDGET):
            if self.client.check("{b}"):
                return
            log.warning("{b} not reconciled, attempt %d", attempt)
'''


def go_file(rng: random.Random, i: int) -> str:
    a, b = rng.sample(WORDS, 2)
    return f'''package {a}{i}

import "time"

// {a.capitalize()}Client talks to the {b} backend.
type {a.capitalize()}Client struct {{
	Endpoint string
	Timeout  time.Duration
}}

// Fetch returns the {b} record for an id, retrying {rng.randint(1, 5)} times.
func (c *{a.capitalize()}Client) Fetch(id string) (string, error) {{
	for i := 0; i < {rng.randint(1, 5)}; i++ {{
		time.Sleep(c.Timeout)
	}}
	return id, nil
}}
'''


def yaml_file(rng: random.Random, i: int) -> str:
    a, b = rng.sample(WORDS, 2)
    return f"""service: {a}-{b}-{i}
owner: team-{b}
replicas: {rng.randint(1, 12)}
resources:
  cpu: {rng.randint(100, 2000)}m
  memory: {rng.randint(128, 4096)}Mi
alerts:
  - name: {a.capitalize()}{b.capitalize()}HighLatency
    threshold_ms: {rng.randint(100, 900)}
"""


def build_repo(repo: Path, code_files: int) -> dict:
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    docs = 0
    for src in sorted(CORPUS.rglob("*.md")):
        dst = repo / "docs" / src.relative_to(CORPUS)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        docs += 1
    rng = random.Random(7)
    makers = (("py", python_file), ("go", go_file), ("yaml", yaml_file))
    for i in range(code_files):
        ext, make = makers[i % 3]
        path = repo / "services" / f"svc{i // 50:03d}" / f"component_{i}.{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make(rng, i))
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "Initial import")
    return {"markdown_files": docs, "code_files": code_files, "files": docs + code_files}


def timed_run(services, repo: Path) -> dict:
    connector = GitConnector.from_options(
        {"path": str(repo),
         "url_template": "https://github.com/acme/mono/blob/{commit}/{path}#L{start}-L{end}"},
        ["public"], data_dir=services.pipeline.work_dir)
    cpu0, t0 = time.process_time(), time.perf_counter()
    report = services.pipeline.run("mono", "git", connector, trigger="bench", batch_size=64)
    seconds = time.perf_counter() - t0
    c = report.counts
    return {"seconds": round(seconds, 2), "cpu_seconds": round(time.process_time() - cpu0, 2),
            "status": report.status, "added": c.added, "updated": c.updated,
            "unchanged": c.unchanged, "deleted": c.deleted, "failed": c.failed,
            "chunks_written": c.chunks_written, "chunks_embedded": c.chunks_embedded,
            "load_1min": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code-files", type=int, default=4879)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    if not CORPUS.is_dir():
        print(f"skipping the git benchmark: {CORPUS} is absent (it needs ../shared/corpora)")
        return
    results: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                   f"Python {platform.python_version()}",
        "git": subprocess.run(["git", "--version"], capture_output=True).stdout.decode().strip(),
    }
    with tempfile.TemporaryDirectory(prefix="citewise-bench-git-") as tmp:
        repo = Path(tmp) / "mono"
        t0 = time.perf_counter()
        results["repository"] = build_repo(repo, args.code_files)
        results["repository"]["build_seconds"] = round(time.perf_counter() - t0, 2)
        services = build_services(Settings(data_dir=Path(tmp) / "data"))
        try:
            services.dense.warm_up()
            print(f"repository: {results['repository']}", file=sys.stderr)
            results["first_full_index"] = timed_run(services, repo)
            print(f"first index: {results['first_full_index']}", file=sys.stderr)

            target = repo / "services" / "svc000" / "component_0.py"
            text = target.read_text()
            target.write_text(text.replace("written += 1", "written += 1  # counted once"))
            git(repo, "commit", "--quiet", "-am", "Count each write once")
            results["resync_after_one_file_commit"] = timed_run(services, repo)
            print(f"one-file commit: {results['resync_after_one_file_commit']}",
                  file=sys.stderr)

            results["resync_no_new_commit"] = timed_run(services, repo)
            services.sources.set_source_state("mono", {})
            results["full_comparison_no_changes"] = timed_run(services, repo)
        finally:
            services.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "git.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = [("first full index", "first_full_index"),
            ("re-sync after a one-file commit", "resync_after_one_file_commit"),
            ("re-sync, no new commit", "resync_no_new_commit"),
            ("full comparison (state lost), no changes", "full_comparison_no_changes")]
    r = results["repository"]
    lines = [
        "# Git connector: first index vs incremental re-sync", "",
        f"{results['date']}; {results['machine']}; {results['git']}. Repository: "
        f"{r['files']} files ({r['markdown_files']} Markdown runbooks, {r['code_files']} "
        "generated Python/Go/YAML files), one commit; then one commit editing one line of "
        "one Python file.", "",
        "| run | seconds | docs added / updated / unchanged | chunks written / embedded | "
        "load (1 min) |",
        "| --- | ---: | --- | --- | ---: |",
    ]
    for label, key in rows:
        x = results[key]
        lines.append(f"| {label} | {x['seconds']} | {x['added']} / {x['updated']} / "
                     f"{x['unchanged']} | {x['chunks_written']} / {x['chunks_embedded']} | "
                     f"{x['load_1min']} |")
    (args.out / "git.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
