"""The data folder (restricted chunk texts in the catalog and the index, restricted documents in
the blobs, key hashes) is for the account that runs citewise only: every folder 0700 and every
file 0600 after an ingest started under a loose umask, in the command and in a process that
embeds citewise; a loosened file reported by `citewise verify` and fixed by `--repair`;
backups and restored folders just as private."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from citewise.api.settings import Settings
from citewise.api.slack.threads import Threads
from tests.kb import clean_env, ingest_site, write_site

CITEWISE = Path(sys.executable).with_name("citewise")


def _cli(root: Path, *args: str, umask: int = 0o022) -> subprocess.CompletedProcess:
    env = clean_env(CITEWISE_CONFIG_FILE=str(root / "citewise.toml"))
    return subprocess.run([str(CITEWISE), *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=lambda: os.umask(umask))


def _open_to_others(root: Path) -> list[str]:
    """Everything under ``root`` (``root`` too) that group or others may use at all."""
    paths = [root, *root.rglob("*")]
    return [f"{p.relative_to(root.parent)} {stat.S_IMODE(p.lstat().st_mode):o}" for p in paths
            if not p.is_symlink() and p.lstat().st_mode & 0o077]


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_an_ingest_under_a_loose_umask_leaves_every_file_private(tmp_path, umask, dense):
    write_site(tmp_path)
    made = _cli(tmp_path, "ingest", "--all", umask=umask)
    assert made.returncode == 0, made.stderr
    data = tmp_path / "data"
    names = {p.name for p in data.iterdir()}
    assert {"catalog.db", "embeddings.db", "qdrant", "blobs"} <= names, names
    assert any((data / "qdrant").rglob("*")), "the index's own files are checked too"
    assert _open_to_others(data) == []


def test_a_process_embedding_citewise_under_a_loose_umask_leaves_it_private(tmp_path, dense):
    """No CLI to set the umask: the stores create their files private, the embedded index
    closes its folder private."""
    previous = os.umask(0o002)
    try:
        settings = Settings.load(ingest_site(tmp_path))
        threads = Threads(settings.data_dir / "slack-threads.db")
        threads.put("C1", "1.0", "conversation")
    finally:
        os.umask(previous)
    assert _open_to_others(settings.data_dir) == []


def test_a_loosened_file_is_reported_by_verify_and_fixed_by_repair(tmp_path, dense):
    write_site(tmp_path)
    assert _cli(tmp_path, "ingest", "--all").returncode == 0
    data = tmp_path / "data"
    (data / "catalog.db").chmod(0o644)
    (data / "qdrant").chmod(0o755)
    found = _cli(tmp_path, "verify")
    print(found.stdout)
    assert found.returncode == 3
    assert "readable by other accounts" in found.stdout
    assert "catalog.db (644)" in found.stdout and "qdrant (755)" in found.stdout
    assert "make the data folder's files 0600 and its folders 0700" in found.stdout
    repaired = _cli(tmp_path, "verify", "--repair")
    print(repaired.stdout)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    # The two, and the catalog's -wal and -shm, which SQLite made with the catalog's mode.
    made_private = re.search(r"(\d+) files and folders made private", repaired.stdout)
    assert made_private and int(made_private.group(1)) >= 2, repaired.stdout
    assert _open_to_others(data) == []
    assert _cli(tmp_path, "verify").returncode == 0


def test_backups_and_restored_folders_are_private(tmp_path, dense):
    config = write_site(tmp_path)
    config.chmod(0o644)  # the config file is copied into the backup with its own mode
    assert _cli(tmp_path, "ingest", "--all").returncode == 0
    made = _cli(tmp_path, "backup", "backups/b")
    assert made.returncode == 0, made.stderr
    backup = tmp_path / "backups" / "b"
    assert (backup / "config" / "citewise.toml").exists()
    assert _open_to_others(backup) == []
    restored = _cli(tmp_path, "--data-dir", str(tmp_path / "restored"), "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert (tmp_path / "restored" / "catalog.db").exists()
    assert _open_to_others(tmp_path / "restored") == []
