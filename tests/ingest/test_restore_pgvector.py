"""`citewise restore` with the vectors in pgvector: the index is rebuilt into the database's
tables from the restored catalog, and tables that already hold an installation's points are
refused (the repair after a restore would delete that installation's newer points as strays)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.ingest.consistency import inspect
from citewise.types import Identity
from tests.kb import SECRET_TITLE, clean_env, ingest_site

CITEWISE = Path(sys.executable).with_name("citewise")


def _cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CITEWISE), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=clean_env(**env))


def test_restore_rebuilds_into_pgvector_and_refuses_tables_in_use(tmp_path, dense,
                                                                  postgres_url):
    config = {"CITEWISE_CONFIG_FILE": str(ingest_site(tmp_path))}
    assert _cli(tmp_path, "backup", "b", **config).returncode == 0
    pgvector = {**config, "CITEWISE_VECTOR_STORE": "pgvector",
                "CITEWISE_DATABASE_URL": postgres_url}

    restored = _cli(tmp_path, "--data-dir", "r1", "restore", "b", **pgvector)
    assert restored.returncode == 0, restored.stderr
    assert "consistent" in restored.stdout
    assert not (tmp_path / "r1" / "qdrant").exists()  # nothing embedded in the data folder

    again = _cli(tmp_path, "--data-dir", "r2", "restore", "b", **pgvector)
    assert again.returncode == 1
    assert "the pgvector tables already hold" in again.stderr
    assert "CITEWISE_DATABASE_URL" in again.stderr
    assert not (tmp_path / "r2" / "catalog.db").exists()  # refused before anything was written

    services = build_services(Settings.load(tmp_path / "citewise.toml",
                                            data_dir=tmp_path / "r1", vector_store="pgvector",
                                            database_url=postgres_url))
    try:
        assert services.index_kind == "pgvector"
        assert inspect(services.catalog, services.index, services.blobs) == []
        anyone = services.search.search("rotate the payment keys", Identity.anonymous())
        assert anyone and SECRET_TITLE not in [h.title for h in anyone]
        insider = services.search.search("rotate the payment keys",
                                         Identity(groups=("security",)), top_k=1)
        assert insider[0].title == SECRET_TITLE
    finally:
        services.close()
