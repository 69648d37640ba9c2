"""A consistent copy of a data folder while the server runs, and a data folder made from one.

What is copied is what cannot be derived: the catalog (SQLite's online backup API, a
consistent snapshot while readers and writers go on), the raw bytes of every document (the
blob store, local or S3), the embedding cache (so that nothing has to be embedded again) and
the config file (it holds no secrets: only the names of the variables that do). The ingest run
lock is held throughout, so no run changes the catalog or the blobs under the copy; search
keeps serving.

The vector index is not copied. It is derived data: ``citewise restore`` rebuilds it from the
restored catalog's chunks and the embedding cache (``repair``), which guarantees an index that
agrees with the catalog exactly, on any backend (embedded, a Qdrant server, pgvector), whatever
the index looked like at the time of the copy. It is rebuilt as a first generation (see
``index/generations.py``), where the restore's settings say.

A backup is written to ``<dir>.partial`` and renamed when complete, so a backup that was
interrupted never looks like one that finished.

With ``CITEWISE_DATABASE_URL`` the state is in PostgreSQL, not in the data folder: backing it up
and restoring it are PostgreSQL's (``pg_dump``, a managed service's snapshots), and both
commands refuse, saying so, rather than copy a catalog that is not the installation's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from citewise import __version__
from citewise.errors import CitewiseError, ConfigError
from citewise.index.blobs import BlobStore, LocalBlobStore, blob_key
from citewise.index.sqlite_catalog import forget_generations, summarise_copy
from citewise.ingest.space import DiskSpace
from citewise.postgres import display_url
from citewise.private_files import make_private, private_folder
from citewise.settings import DataFolder

MANIFEST = "manifest.json"
FORMAT = 1


def refuse_shared_database(database_url: str | None, command: str) -> None:
    """``ConfigError`` when the stores are in PostgreSQL: what to use instead of ``command``."""
    if not database_url:
        return
    instead = {
        "backup": "back the database up with PostgreSQL's own tools (pg_dump --format=custom, "
                  "or your managed service's snapshots and point-in-time recovery) and the "
                  "blobs with your object store's (S3 versioning or replication); the vector "
                  "index needs no copy: it is rebuilt from the catalog",
        "restore": "restore the database with pg_restore (or your managed service) into an "
                   "empty database, point CITEWISE_DATABASE_URL at it, then run `citewise "
                   "verify --repair` to rebuild the vector index from the restored catalog",
    }[command]
    raise ConfigError(
        f"`citewise {command}` copies the data folder's SQLite catalog, but this installation "
        f"keeps its state in the PostgreSQL database {display_url(database_url)} "
        "(CITEWISE_DATABASE_URL)", hint=instead)


def backup(data: DataFolder, blobs: BlobStore, dest: Path, *, config_file: Path | None,
           blob_store: str, database_url: str | None) -> dict[str, Any]:
    """Copy the data folder's state to ``dest`` (which must not exist); the manifest. The
    config file, when there is one, is copied too; ``blob_store`` (its kind) is recorded.
    Refused when the state is in the database at ``database_url``."""
    refuse_shared_database(database_url, "backup")
    if dest.exists() and any(dest.iterdir()):
        raise ConfigError(f"{dest} exists and is not empty",
                          hint="give a new folder for each backup, e.g. backups/$(date +%F)")
    if not data.catalog_path.exists():
        raise ConfigError(f"there is no catalog in {data.root} to back up",
                          hint="check CITEWISE_DATA_DIR (or --data-dir)")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # The catalog holds key hashes and the audit log, the blobs restricted documents: the
    # backup is for the account that owns the data folder only.
    partial.mkdir(parents=True, mode=0o700)
    partial.chmod(0o700)
    _sqlite_copy(data.catalog_path, partial / "catalog.db")
    if data.embedding_cache_path.exists():
        _sqlite_copy(data.embedding_cache_path, partial / "embeddings.db")
    # The blobs the copied catalog refers to: the same moment as the catalog.
    copied = summarise_copy(partial / "catalog.db")
    missing, size = [], 0
    for key in copied.blob_keys:
        try:
            content = blobs.get(key)
        except KeyError:
            missing.append(key)
            continue
        target = partial / "blobs" / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        size += len(content)
    if config_file and config_file.exists():
        (partial / "config").mkdir()
        shutil.copy2(config_file, partial / "config" / config_file.name)
    # Under a loose umask (a library caller) the copies are not private by themselves, and
    # ``copy2`` carries the config file's own mode.
    make_private(partial)
    manifest: dict[str, Any] = {
        "format": FORMAT, "citewise": __version__, "schema": copied.versions,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "data_dir": str(data.root), "blob_store": blob_store,
        "documents": copied.documents, "chunks": copied.chunks,
        "blobs": len(copied.blob_keys) - len(missing),
        "blob_bytes": size, "missing_blobs": missing,
        "files": {name: _sha256(partial / name) for name in ("catalog.db", "embeddings.db")
                  if (partial / name).exists()},
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=2))
    (partial / MANIFEST).chmod(0o600)
    if dest.exists():
        dest.rmdir()
    partial.rename(dest)
    return manifest


def restore(source: Path, data: DataFolder, blobs: BlobStore, *,
            min_free_bytes: int, database_url: str | None) -> dict[str, Any]:
    """Put a backup's catalog, embedding cache and blobs into an empty data folder, keeping
    ``min_free_bytes`` free on its disk; the manifest. The index is rebuilt afterwards
    (``repair``), by the caller. Refused when the state is in the database at
    ``database_url``."""
    refuse_shared_database(database_url, "restore")
    manifest_path = source / MANIFEST
    if not manifest_path.exists():
        raise ConfigError(f"{source} is not a citewise backup (no {MANIFEST})",
                          hint="give the folder `citewise backup` wrote; one ending in "
                               ".partial was interrupted and is not a backup")
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"{source} is a backup of format {manifest.get('format')}; this "
                          f"citewise reads format {FORMAT}")
    for name, digest in manifest.get("files", {}).items():
        if _sha256(source / name) != digest:
            raise CitewiseError(f"{source / name} is damaged (its checksum differs from the "
                                "manifest's)", hint="restore from another backup")
    if data.catalog_path.exists() or (data.qdrant_path.exists()
                                      and any(data.qdrant_path.iterdir())):
        raise ConfigError(f"{data.root} already holds a catalog or an index",
                          hint="restore into a new, empty data folder (--data-dir), then "
                               "point the server at it")
    # A blob store (or, checked by the caller, a Qdrant collection) in use by another
    # installation: the repair after the restore would take its newer blobs for strays.
    if next(iter(blobs.keys()), None) is not None:
        raise ConfigError("the configured blob store already holds blobs",
                          hint="restore into an empty one: a new CITEWISE_S3_PREFIX (or "
                               "bucket), or a new data folder for local blobs")
    root = source / "blobs"
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
    for path in files:  # every blob is checked before anything is written
        key = path.relative_to(root).as_posix()
        if blob_key(path.read_bytes()) != key:
            raise CitewiseError(f"blob {key} in the backup is damaged (its content does not "
                                "match its name)", hint="restore from another backup")
    # What lands on the data folder's disk: the databases, and the blobs when they are kept
    # there. Refused before anything is written, rather than a disk filled half-way.
    needs = sum((source / name).stat().st_size for name in ("catalog.db", "embeddings.db")
                if (source / name).exists())
    if isinstance(blobs, LocalBlobStore):
        needs += sum(path.stat().st_size for path in files)
    DiskSpace(data.root, min_free_bytes).check(
        f"restoring {source}", rerun="`citewise restore`", needs=needs)
    private_folder(data.root)
    for path in files:
        blobs.put(path.read_bytes())
    for name, target in (("embeddings.db", data.embedding_cache_path),
                         ("catalog.db", data.catalog_path)):
        if (source / name).exists():  # the catalog last: its presence means "restored"
            tmp = target.with_suffix(".restoring")
            shutil.copyfile(source / name, tmp)
            if name == "catalog.db":
                # The index is rebuilt where the settings put a first generation (the data
                # folder's ``qdrant``, the collection CITEWISE_QDRANT_COLLECTION), never under
                # the name of the installation's live one, which may be in use on the same
                # Qdrant server; a reindex the backup caught half-way is forgotten (its staging
                # folder was not copied).
                forget_generations(tmp)
            tmp.replace(target)
    # The restored folder is as private as the one it was copied from (``private_files``).
    make_private(data.root)
    return manifest


def _sqlite_copy(path: Path, target: Path) -> None:
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with sqlite3.connect(target) as copy:
            source.backup(copy)
        copy.close()
    finally:
        source.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
