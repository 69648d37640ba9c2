"""`citewise verify` finds what disagrees between the catalog, the index and the blob store, and
`--repair` puts it right from the catalog without reading the sources: faults injected into a
real index (a deleted point, a stray point, a stale payload that would leak a restricted
document, a stray blob, a lost blob), found, repaired, and checked by search as each reader."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from citewise.api.composition import build_services
from citewise.index.payload import ChunkPayload
from citewise.index.vector_index import ChunkPoint
from citewise.ingest.consistency import inspect
from citewise.ingest.jobs import run_source
from citewise.ingest.repair import repair
from citewise.settings import load_settings
from citewise.types import Identity
from tests.kb import SECRET, SECRET_TITLE, clean_env, ingest_site

CITEWISE = Path(sys.executable).with_name("citewise")
ANYONE = Identity.anonymous()
SECURITY = Identity(user="sam", groups=("security",))


@pytest.fixture
def site(tmp_path, dense) -> Path:
    """A data folder with the test knowledge base ingested, consistent to begin with."""
    ingest_site(tmp_path)
    services = _services(tmp_path)
    try:
        assert inspect(services.catalog, services.index, services.blobs) == []
    finally:
        services.close()
    return tmp_path


def _services(site: Path):
    return build_services(load_settings(site / "citewise.toml"))


def _doc(services, path: str):
    return next(r for r in services.catalog.documents_of_source("kb").values()
                if r.path == path)


def _inject_faults(services) -> dict[str, str]:
    """One of each fault; what was done, for the assertions."""
    secret = _doc(services, SECRET)
    redis = _doc(services, "runbooks/redis-failover.md")
    onboarding = _doc(services, "wiki/onboarding.html")
    lost_point = services.catalog.chunks_of(redis.id)[0]["id"]
    services.index.delete_points([lost_point])
    # A stale payload that leaks: the restricted runbook's points made readable by anyone.
    services.index.set_payload(secret.id, {"readers": ["public"]})
    # A stray point: a copy of a live point under another version.
    stray = services.pipeline.points_from_catalog(redis)[0]
    payload = ChunkPayload.from_payload({**stray.payload.to_payload(), "version": "0ld"})
    services.index.upsert([ChunkPoint(id="6f1c2f4e-0000-4000-8000-000000000001",
                                      dense=stray.dense, sparse=stray.sparse, payload=payload)])
    stray_blob = services.blobs.put(b"bytes of a document nobody has any more")
    services.blobs.delete(onboarding.blob_key)
    # A blob write a killed process left half done, an hour and more ago.
    partial = services.blobs.root / "sha256" / "ab" / ".tmp-killed"
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(b"half a docu")
    os.utime(partial, (time.time() - 7200, time.time() - 7200))
    return {"lost_point": lost_point, "secret": secret.id, "stray_blob": stray_blob,
            "lost_blob": onboarding.blob_key}


def test_faults_are_found_and_repaired_from_the_catalog(site):
    services = _services(site)
    try:
        faults = _inject_faults(services)
        # The leak is real before the repair: anyone finds the restricted runbook.
        leaked = services.search.search("rotate the payment provider API keys", ANYONE, top_k=5)
        assert any(h.title == SECRET_TITLE for h in leaked)
        found = inspect(services.catalog, services.index, services.blobs)
        kinds = {f.kind for f in found}
        assert kinds == {"missing_point", "stale_payload", "orphan_point", "orphan_blob",
                         "missing_blob", "partial_blob"}, [f.text for f in found]
        assert any(f.kind == "stale_payload" and f.document_id == faults["secret"]
                   and "readers" in f.text for f in found)
        assert any(f.key == faults["lost_point"] for f in found if f.kind == "missing_point")

        embedded = services.dense.embedded_count
        report = repair(services.pipeline)
        assert services.dense.embedded_count == embedded  # the embedding cache answered
        assert report.points_deleted == 1 and report.blobs_deleted == 2
        assert report.documents_rebuilt == 2
        assert report.marked_for_reread == ["kb/wiki/onboarding.html"]
        # Only the lost blob remains, until the source's next run reads the page again.
        assert [f.kind for f in report.remaining] == ["missing_blob"]
        hidden = services.search.search("rotate the payment provider API keys", ANYONE, top_k=5)
        assert all(h.title != SECRET_TITLE for h in hidden)
        shown = services.search.search("rotate the payment provider API keys", SECURITY,
                                       top_k=5)
        assert shown[0].title == SECRET_TITLE
        redis = services.search.search("Sentinel get-master-addr-by-name", ANYONE, top_k=3)
        assert redis[0].path == "runbooks/redis-failover.md"

        again = run_source(services.pipeline, load_settings(site / "citewise.toml").sources[0],
                           trigger="test")
        assert again.status == "succeeded" and again.counts.updated == 1, again.summary()
        assert inspect(services.catalog, services.index, services.blobs) == []
    finally:
        services.close()


def test_an_interrupted_repair_is_finished_by_the_next(site):
    services = _services(site)
    try:
        for path in ("runbooks/redis-failover.md", "runbooks/postgres-disk-full.md", SECRET):
            record = _doc(services, path)
            services.index.delete_points([c["id"] for c in services.catalog.chunks_of(record.id)])

        def interrupt(n: int, total: int) -> None:
            if n == 1:
                raise KeyboardInterrupt  # Ctrl-C (or a kill) after the first document

        with pytest.raises(KeyboardInterrupt):
            repair(services.pipeline, on_document=interrupt)
        left = inspect(services.catalog, services.index, services.blobs)
        assert {f.kind for f in left} == {"missing_point"}
        report = repair(services.pipeline)
        assert report.documents_rebuilt == 2 and report.remaining == []
    finally:
        services.close()


def _cli(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = clean_env(CITEWISE_CONFIG_FILE=str(site / "citewise.toml"))
    return subprocess.run([str(CITEWISE), *args], cwd=site, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_command_reports_repairs_and_exits_for_cron(site):
    services = _services(site)
    try:
        _inject_faults(services)
    finally:
        services.close()
    found = _cli(site, "verify")
    print(found.stdout)
    assert found.returncode == 3, found.stderr
    assert "disagrees with the catalog on readers" in found.stdout
    # What a repair will do, and what it will not: a lost blob only comes back from its source.
    assert "`citewise verify --repair` would:" in found.stdout
    assert "NOT bring back 1 missing blobs" in found.stdout
    repaired = _cli(site, "verify", "--repair")
    print(repaired.stdout)
    assert "2 documents' points rebuilt" in repaired.stdout
    assert "2 stray blobs deleted" in repaired.stdout
    assert "blob lost: kb/wiki/onboarding.html will be read again" in repaired.stdout
    assert repaired.returncode == 3  # the lost blob, until the next run
    assert _cli(site, "ingest", "--all").returncode == 0
    clean = _cli(site, "verify")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "consistent" in clean.stdout


def test_a_repair_that_would_fill_the_disk_stops_and_the_next_finishes(site):
    """The embedded index cannot fail a write cleanly on a full disk, so a repair checks the
    reserve (CITEWISE_MIN_FREE_MB) before each document it rebuilds, like an ingest run. A
    reserve larger than the disk stands for a disk with no room left."""
    services = _services(site)
    try:
        for path in ("runbooks/redis-failover.md", SECRET):
            record = _doc(services, path)
            services.index.delete_points([c["id"] for c in services.catalog.chunks_of(record.id)])
    finally:
        services.close()
    env = clean_env(CITEWISE_CONFIG_FILE=str(site / "citewise.toml"),
                    CITEWISE_MIN_FREE_MB=str(10**9))
    stopped = subprocess.run([str(CITEWISE), "verify", "--repair"], cwd=site, env=env,
                             capture_output=True, text=True, timeout=300)
    out = stopped.stdout + stopped.stderr
    print(out)
    assert stopped.returncode == 1 and "Traceback" not in out, out
    assert f"the data folder {site / 'data'} is full:" in out
    assert "stopped before rebuilding the points of kb/" in out
    assert "run `citewise verify --repair` again" in out
    services = _services(site)
    try:  # nothing was half written: the same two documents lack their points
        left = inspect(services.catalog, services.index, services.blobs)
        assert {f.kind for f in left} == {"missing_point"}
    finally:
        services.close()
    repaired = _cli(site, "verify", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "2 documents' points rebuilt" in repaired.stdout
