"""`citewise verify` finds what disagrees between the catalog, the index and the blob store, and
`--repair` puts it right from the catalog without reading the sources: faults injected into a
real index (a deleted point, a stray point, a stale payload that would leak a restricted
document, a stray blob, a lost blob), found, repaired, and checked by search as each reader."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.index.payload import ChunkPayload
from citewise.index.vector_index import ChunkPoint
from citewise.ingest.consistency import inspect
from citewise.ingest.jobs import run_source
from citewise.ingest.repair import repair
from citewise.types import Identity
from tests.kb import SECRET, SECRET_TITLE, clean_env, ingest_site
from tests.live import free_port

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
    return build_services(Settings.load(site / "citewise.toml"))


def _doc(services, path: str):
    return next(r for r in services.catalog.documents_of_source("kb").values()
                if r.path == path)


def _inject_faults(services) -> dict[str, str]:
    """One of each fault; what was done, for the assertions."""
    secret = _doc(services, SECRET)
    redis = _doc(services, "runbooks/redis-failover.md")
    onboarding = _doc(services, "wiki/onboarding.html")
    lost_point = services.catalog.chunk_rows(redis.id)[0].id
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

        again = run_source(services.pipeline, Settings.load(site / "citewise.toml").sources[0],
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
            services.index.delete_points([c.id for c in services.catalog.chunk_rows(record.id)])

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
            services.index.delete_points([c.id for c in services.catalog.chunk_rows(record.id)])
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


def _readers(services) -> dict[str, list[str]]:
    return {r.id: sorted(r.readers) for r in services.catalog.documents_of_source("kb").values()}


def test_a_zeroed_catalog_is_lost_not_strays_and_is_rebuilt_from_the_index(site):
    """Emptied document tables beside a full index and blob store: verify says the catalog
    was lost, --repair refuses to delete the installation, --rebuild-catalog writes the
    documents back with their readers exactly, and the next ingest adds no duplicate."""
    services = _services(site)
    try:
        readers = _readers(services)
        points = services.index.count()
    finally:
        services.close()
    assert ["group:security"] in readers.values()  # the restricted runbook
    conn = sqlite3.connect(site / "data" / "catalog.db")
    with conn:
        conn.executescript("DELETE FROM outlines; DELETE FROM chunks; DELETE FROM documents;")
    conn.close()

    found = _cli(site, "verify")
    print(found.stdout)
    assert found.returncode == 3
    assert "the catalog was lost or emptied" in found.stdout
    assert "citewise verify --rebuild-catalog" in found.stdout and "restore" in found.stdout
    assert "`citewise verify --repair` would:" not in found.stdout
    refused = _cli(site, "verify", "--repair")
    print(refused.stdout, refused.stderr)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "refusing to repair" in refused.stderr and "--rebuild-catalog" in refused.stderr
    services = _services(site)
    try:  # nothing was deleted
        assert services.index.count() == points
        assert len(list(services.blobs.keys())) == len(readers)
    finally:
        services.close()

    rebuilt = _cli(site, "verify", "--rebuild-catalog")
    print(rebuilt.stdout, rebuilt.stderr)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"rebuilt {len(readers)} documents" in rebuilt.stdout
    assert f"{len(readers)} with their blob" in rebuilt.stdout
    assert "not exact until each source's next run" in rebuilt.stdout
    services = _services(site)
    try:
        assert _readers(services) == readers  # never public, never narrowed
        assert inspect(services.catalog, services.index, services.blobs) == []
        anyone = services.search.search("rotate the payment provider API keys", ANYONE, top_k=5)
        assert all(h.title != SECRET_TITLE for h in anyone)
        shown = services.search.search("rotate the payment provider API keys", SECURITY,
                                       top_k=5)
        assert shown[0].title == SECRET_TITLE
        answer = services.answers.answer("How do I rotate the payment provider API keys?",
                                          SECURITY, use_cache=False)
        assert any(c.title == SECRET_TITLE for c in answer.citations), answer
        hidden = services.answers.answer("How do I rotate the payment provider API keys?",
                                          ANYONE, use_cache=False)
        assert all(c.title != SECRET_TITLE for c in hidden.citations)
        assert "vault" not in hidden.answer
    finally:
        services.close()

    again = _cli(site, "ingest", "--all")
    print(again.stdout)
    assert again.returncode == 0, again.stderr
    assert f"0 added, {len(readers)} updated, 0 unchanged, 0 deleted" in again.stdout
    services = _services(site)
    try:
        assert services.index.count() == points == services.catalog.count_chunks()
        assert _readers(services) == readers
        assert inspect(services.catalog, services.index, services.blobs) == []
    finally:
        services.close()
    assert "consistent" in _cli(site, "verify").stdout


@pytest.mark.parametrize("damage", ["overwritten", "truncated"])
def test_a_damaged_catalog_is_a_clean_message_naming_it_and_what_to_do(site, damage):
    catalog = site / "data" / "catalog.db"
    size = catalog.stat().st_size
    with catalog.open("r+b") as f:
        if damage == "overwritten":  # the header page kept: SQLite opens it, queries fail
            f.seek(4096)
            f.write(os.urandom(size - 4096))
        else:
            f.truncate(size // 3)
    for args in (("verify",), ("serve", "--port", str(free_port()))):
        out = _cli(site, *args)
        text = out.stdout + out.stderr
        print(text)
        assert out.returncode != 0 and "Traceback" not in text, text
        assert f"the catalog {catalog} is damaged" in text
        assert "restore" in text and "--rebuild-catalog" in text


def test_a_deleted_blob_folder_is_said_marked_and_stored_again_by_the_next_ingest(site):
    shutil.rmtree(site / "data" / "blobs")
    found = _cli(site, "verify")
    print(found.stdout)
    assert found.returncode == 3
    assert "NOT bring back 5 missing blobs" in found.stdout
    assert "marks their documents to be read again" in found.stdout
    repaired = _cli(site, "verify", "--repair")
    print(repaired.stdout)
    assert repaired.returncode == 3
    assert "5 problems remain: 5 documents whose blob is lost are read again by `citewise " \
        "ingest`" in repaired.stdout
    marked = _cli(site, "verify")
    problems = [line for line in marked.stdout.splitlines() if line.startswith("problem:")]
    assert len(problems) == 5 and all("marked to be read again" in p for p in problems)
    ran = _cli(site, "ingest", "--all")
    assert ran.returncode == 0, ran.stderr
    clean = _cli(site, "verify")
    assert clean.returncode == 0 and "consistent" in clean.stdout, clean.stdout
    services = _services(site)
    try:
        for record in services.catalog.documents_of_source("kb").values():
            assert services.blobs.get(record.blob_key) == \
                (site / "kb" / record.external_id).read_bytes()
    finally:
        services.close()


def test_a_deleted_index_folder_is_a_summary_not_a_line_per_chunk(site):
    # 40 more runbooks of several sections each: a few hundred chunks, every one without its
    # point once the index folder is gone (3,940 lines in the operator's report, 100k at scale).
    for n in range(40):
        sections = "\n".join(f"## Step {s}\n\nRestart worker {n} in zone {s}; check its queue "
                             f"depth and the error rate of service {n}.\n" for s in range(6))
        (site / "kb" / "runbooks" / f"worker-{n}.md").write_text(f"# Worker {n}\n\n{sections}")
    assert _cli(site, "ingest", "--all").returncode == 0
    services = _services(site)
    try:
        chunks = services.catalog.count_chunks()
        documents = services.catalog.count_documents()
    finally:
        services.close()
    assert chunks > 200
    shutil.rmtree(site / "data" / "qdrant")

    found = _cli(site, "verify")
    print(found.stdout)
    assert found.returncode == 3, found.stderr
    lines = found.stdout.splitlines()
    assert len(lines) < 40, found.stdout
    assert f"problem: {chunks} chunks that have no point in the vector index, in {documents} " \
           "documents; for example:" in lines, found.stdout
    assert f"  ... --verbose lists all {chunks}" in lines
    assert "more of this document)" in found.stdout  # the documents with the most, counted
    assert f"rebuild the points of {documents} documents" in found.stdout  # the plan, as before

    every = _cli(site, "verify", "--verbose")
    assert every.returncode == 3
    problems = [ln for ln in every.stdout.splitlines() if ln.startswith("problem: ")]
    assert len(problems) == chunks and all("has no point" in p for p in problems)

    as_json = _cli(site, "verify", "--json")
    assert as_json.returncode == 3
    result = json.loads(as_json.stdout)
    assert len(result["problems"]) == chunks
    (group,) = result["summary"]
    assert (group["kind"], group["count"], group["documents"]) == \
        ("missing_point", chunks, documents)

    repaired = _cli(site, "verify", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert len(repaired.stdout.splitlines()) < 40, repaired.stdout
    assert f"found: {chunks} chunks that have no point" in repaired.stdout
