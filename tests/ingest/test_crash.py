"""A process killed at every step boundary of a document swap loses nothing and strands nothing.

The run that crashes is a real ``citewise ingest`` process, ended by the swap's test hook with
``os._exit`` at the chosen step (no cleanup, no ``finally``: what a kill -9 leaves). The next
run, in this process, must find and finish or undo what was left, and afterwards the catalog,
the vector index and the blob store must agree exactly (``consistency.verify``), and search must
find every live document, fully.

One run covers both kinds of swap: it updates ``a-updated.md``, adds ``c-added.md`` (written in
that order) and deletes ``b-deleted.md``. Embeddings are cached before the crashing runs, so
they start without loading the model.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from citewise.api.settings import Settings
from citewise.ingest.consistency import verify
from citewise.ingest.jobs import run_source
from citewise.ingest.swap import CRASH_ENV, DELETE_STEPS, WRITE_STEPS
from citewise.types import Identity
from tests.kb import clean_env, write

CITEWISE = Path(sys.executable).with_name("citewise")
ANYONE = Identity.anonymous()

BEFORE = {
    "a-updated.md": "# Replica lag\n\nWhen the replica lags, check the WAL sender on the primary "
                    "and the network between the zones.\n",
    "b-deleted.md": "# TargetDown\n\nTargetDown fires when Prometheus cannot scrape a target. "
                    "Check the scrape job and the target's health endpoint.\n",
    "d-kept.md": "# Disk almost full\n\nDelete old WAL archives, then grow the volume by "
                 "100 GiB.\n",
    "e-kept.md": "# Cache failover\n\nPromote the replica with the smallest offset lag.\n",
}
AFTER = {
    "a-updated.md": "# Replica lag\n\nWhen the replica lags, restart the WAL receiver on the "
                    "replica and open an incident if the lag passes ten minutes.\n",
    "c-added.md": "# Certificate expiry\n\nRenew the certificate with cert-manager and restart "
                  "the ingress controller pods.\n",
}
CONFIG = """
[settings]
data_dir = "data"

[[sources]]
name = "runbooks"
type = "folder"
path = "kb"
readers = ["public"]
"""


def _write_kb(folder: Path, files: dict[str, str]) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    for name, text in files.items():
        write(folder, name, text)


def _after_files() -> dict[str, str]:
    files = {k: v for k, v in BEFORE.items() if k != "b-deleted.md"}
    files.update(AFTER)
    return files


@pytest.fixture(scope="module")
def template(tmp_path_factory, dense) -> Path:
    """A data folder holding the first run, with every embedding the second run needs cached."""
    from citewise.api.composition import build_services

    base = tmp_path_factory.mktemp("crash-template")
    (base / "citewise.toml").write_text(CONFIG)
    settings = Settings.load(base / "citewise.toml")
    _write_kb(base / "kb", {**BEFORE, **AFTER})  # embeds the texts of both runs
    services = build_services(settings)
    try:
        run_source(services.pipeline, settings.sources[0], trigger="test")
        _write_kb(base / "kb", BEFORE)
        report = run_source(services.pipeline, settings.sources[0], trigger="test")
        assert report.counts.deleted == 1 and report.status == "succeeded", report.summary()
    finally:
        services.close()
    return base


def _copy(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "site"
    shutil.copytree(template, root)
    _write_kb(root / "kb", _after_files())
    return root


def _crashing_run(root: Path, step: str, nth: int) -> subprocess.CompletedProcess:
    env = clean_env(**{CRASH_ENV: f"{step}:{nth}",
                       "CITEWISE_CONFIG_FILE": str(root / "citewise.toml")})
    return subprocess.run([str(CITEWISE), "ingest", "--all"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def _recover_and_check(root: Path) -> None:
    from citewise.api.composition import build_services

    settings = Settings.load(root / "citewise.toml")
    services = build_services(settings)
    try:
        report = run_source(services.pipeline, settings.sources[0], trigger="test")
        assert report.status == "succeeded", report.summary()
        assert verify(services.catalog, services.index, services.blobs) == []
        docs = {r.external_id for r in services.catalog.documents_of_source("runbooks").values()}
        expected = set(_present(root))
        assert docs == expected
        # Every live document is found by its own words, and a page is always full.
        for name, words in [("a-updated.md", "restart the WAL receiver"),
                            ("c-added.md", "certificate cert-manager ingress"),
                            ("d-kept.md", "old WAL archives volume"),
                            ("b-deleted.md", "TargetDown Prometheus scrape target")]:
            hits = services.search.search(words, ANYONE, top_k=3)
            assert len(hits) == min(3, len(expected)), (name, hits)
            if name in expected:
                assert hits[0].path == name, (name, [h.path for h in hits])
            else:
                assert all(h.path != name for h in hits)
        # The old version of the updated document is gone from search.
        old = services.search.search("WAL sender network between the zones", ANYONE, top_k=10)
        assert all("WAL sender" not in h.text for h in old)
    finally:
        services.close()


def _present(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "kb").iterdir())


CASES = [(step, 1) for step in WRITE_STEPS] + [(step, 2) for step in WRITE_STEPS] + \
    [(step, 1) for step in DELETE_STEPS]


@pytest.mark.parametrize(("step", "nth"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_a_kill_at_any_step_is_recovered(template, tmp_path, step, nth):
    root = _copy(template, tmp_path)
    crashed = _crashing_run(root, step, nth)
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    _recover_and_check(root)


def test_a_deleted_file_that_comes_back_after_a_crash_is_found_again(template, tmp_path):
    """The probe's first crash window: points deleted, catalog row not yet."""
    root = _copy(template, tmp_path)
    assert _crashing_run(root, "delete-points", 1).returncode == 137
    write(root / "kb", "b-deleted.md", BEFORE["b-deleted.md"])  # back, unchanged
    _recover_and_check(root)


def test_points_of_a_new_document_orphaned_by_a_crash_are_swept(template, tmp_path):
    """The probe's second window: a new document's points written, its catalog row not, and
    then the file removed. Its points must go, and they must never cost a search result."""
    root = _copy(template, tmp_path)
    assert _crashing_run(root, "upsert", 2).returncode == 137  # c-added.md's points are in
    (root / "kb" / "c-added.md").unlink()
    _recover_and_check(root)
