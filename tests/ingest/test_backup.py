"""`citewise backup` while a real server serves the index, and `citewise restore` into a fresh
data folder: the index rebuilt from the catalog (no source read, no model call for cached
chunks), `verify` consistent, and search answering as before, permissions included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.ingest.consistency import inspect
from citewise.ingest.jobs import run_source
from citewise.ingest.runlock import FileRunLock
from citewise.types import Identity
from tests.kb import SECRET_TITLE, clean_env, ingest_site, write_site
from tests.live import LiveServer

CITEWISE = Path(sys.executable).with_name("citewise")


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CITEWISE), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=clean_env(**env))


def _titles(services, question: str, who: Identity) -> list[str]:
    return [h.title for h in services.search.search(question, who, top_k=5)]


def test_backup_while_serving_then_restore_into_a_fresh_folder(tmp_path, dense):
    settings = Settings.load(write_site(tmp_path))
    services = build_services(settings)
    config = {"CITEWISE_CONFIG_FILE": str(tmp_path / "citewise.toml")}
    try:
        run_source(services.pipeline, settings.sources[0], trigger="test")
        secret_before = _titles(services, "rotate the payment keys", Identity(groups=("security",)))
        with LiveServer(create_app(services=services), settings) as url:
            made = _cli(tmp_path, "backup", "backups/first", **config)
            assert made.returncode == 0, made.stderr
            # The server kept serving.
            assert httpx.get(f"{url}/v1/search", params={"q": "redis"}).status_code == 200
            # While a run holds the lock, a backup waits for nothing: it says so and exits 4.
            with FileRunLock(settings.data.run_lock_path).held("a long ingest"):
                busy = _cli(tmp_path, "backup", "backups/second", **config)
            assert busy.returncode == 4 and "a long ingest" in busy.stderr
            assert not (tmp_path / "backups" / "second").exists()
    finally:
        services.close()
    print(made.stdout)
    backup = tmp_path / "backups" / "first"
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["documents"] == 5 and manifest["blobs"] == 5 and manifest["chunks"] > 5
    assert (backup / "catalog.db").exists() and (backup / "embeddings.db").exists()
    assert (backup / "config" / "citewise.toml").exists()

    fresh = tmp_path / "restored"
    restored = _cli(tmp_path, "--data-dir", str(fresh), "restore", str(backup), **config)
    print(restored.stdout, restored.stderr)
    assert restored.returncode == 0, restored.stderr
    assert "consistent" in restored.stdout
    again = _cli(tmp_path, "--data-dir", str(fresh), "restore", str(backup), **config)
    assert again.returncode == 1 and "already holds a catalog" in again.stderr

    services = build_services(Settings.load(tmp_path / "citewise.toml", data_dir=fresh))
    try:
        assert inspect(services.catalog, services.index, services.blobs) == []
        assert services.catalog.count_documents() == 5
        anyone = _titles(services, "rotate the payment keys", Identity.anonymous())
        assert SECRET_TITLE not in anyone
        assert _titles(services, "rotate the payment keys",
                       Identity(groups=("security",))) == secret_before
        # A run over the restored folder finds every document unchanged.
        report = run_source(services.pipeline, services.settings.sources[0], trigger="test")
        assert report.counts.unchanged == 5 and report.counts.added == 0, report.summary()
    finally:
        services.close()


def test_a_damaged_backup_is_refused(tmp_path, dense):
    config = {"CITEWISE_CONFIG_FILE": str(ingest_site(tmp_path))}
    made = _cli(tmp_path, "backup", "b", **config)
    assert made.returncode == 0
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o700  # key hashes, restricted blobs
    blob = next(p for p in (tmp_path / "b" / "blobs").rglob("*") if p.is_file())
    original = blob.read_bytes()
    blob.write_bytes(original[:-5] + b"XXXXX")
    out = _cli(tmp_path, "--data-dir", str(tmp_path / "r"), "restore", "b", **config)
    assert out.returncode == 1 and "damaged" in out.stderr
    assert not (tmp_path / "r" / "catalog.db").exists()  # nothing was written
    blob.write_bytes(original)
    with (tmp_path / "b" / "catalog.db").open("r+b") as f:
        f.seek(200)
        f.write(b"\x00\xff" * 8)
    out = _cli(tmp_path, "--data-dir", str(tmp_path / "r"), "restore", "b", **config)
    assert out.returncode == 1 and "damaged" in out.stderr
    assert not (tmp_path / "r" / "catalog.db").exists()


def test_restore_refuses_a_blob_store_in_use(tmp_path, dense):
    """Its newer blobs would be taken for strays by the repair that follows the restore."""
    config = {"CITEWISE_CONFIG_FILE": str(ingest_site(tmp_path))}
    assert _cli(tmp_path, "backup", "b", **config).returncode == 0
    in_use = tmp_path / "r" / "blobs" / "sha256" / "aa"
    in_use.mkdir(parents=True)
    (in_use / ("aa" + "0" * 62)).write_bytes(b"someone else's document")
    out = _cli(tmp_path, "--data-dir", str(tmp_path / "r"), "restore", "b", **config)
    assert out.returncode == 1 and "already holds blobs" in out.stderr
    assert not (tmp_path / "r" / "catalog.db").exists()


def test_a_restore_that_would_not_fit_writes_nothing(tmp_path, dense):
    """The backup's databases and blobs must fit beside the reserve kept free for the index
    (CITEWISE_MIN_FREE_MB): checked before anything is written, not found out half-way. A
    reserve larger than the disk stands for a disk with no room left."""
    config = {"CITEWISE_CONFIG_FILE": str(ingest_site(tmp_path))}
    assert _cli(tmp_path, "backup", "b", **config).returncode == 0
    out = _cli(tmp_path, "--data-dir", str(tmp_path / "r"), "restore", "b",
               CITEWISE_MIN_FREE_MB=str(10**9), **config)
    print(out.stderr)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"the data folder {tmp_path / 'r'} is too full:" in out.stderr
    assert "needed beside the" in out.stderr and "stopped before restoring b" in out.stderr
    assert "nothing was written" in out.stderr
    assert not (tmp_path / "r" / "catalog.db").exists()
    assert not any(p.is_file() for p in (tmp_path / "r").rglob("*"))
    fits = _cli(tmp_path, "--data-dir", str(tmp_path / "r"), "restore", "b", **config)
    assert fits.returncode == 0, fits.stderr


def test_backup_and_restore_point_a_postgresql_installation_at_its_own_tools(tmp_path):
    """With CITEWISE_DATABASE_URL the state is the database's: copying the data folder would
    save nothing of it, so both commands refuse and say what to use (the password unsaid)."""
    url = "postgresql://citewise:s3cret@db.internal:5432/citewise"
    made = _cli(tmp_path, "backup", "b", CITEWISE_DATABASE_URL=url,
                CITEWISE_DATA_DIR=str(tmp_path / "data"))
    assert made.returncode == 1 and "Traceback" not in made.stderr, made.stderr
    assert "PostgreSQL database postgresql://citewise:***@db.internal:5432/citewise" in \
        made.stderr and "pg_dump" in made.stderr and "s3cret" not in made.stderr
    assert not (tmp_path / "b").exists()
    (tmp_path / "b").mkdir()
    restored = _cli(tmp_path, "restore", "b", CITEWISE_DATABASE_URL=url,
                    CITEWISE_DATA_DIR=str(tmp_path / "data"))
    assert restored.returncode == 1 and "pg_restore" in restored.stderr, restored.stderr
    assert "citewise verify --repair" in restored.stderr
