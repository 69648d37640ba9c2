"""The ingestion pipeline end to end: real files, real model, embedded Qdrant, real SQLite."""

from __future__ import annotations

import shutil

import pytest

from citewise.connectors.folder import FolderConfig, FolderConnector
from citewise.index.catalog import chunk_point_id, document_id
from citewise.index.payload import ChunkPayload
from citewise.index.source_store import RunCounts
from citewise.index.vector_index import ChunkPoint, IndexFilter
from citewise.ingest.jobs import run_source
from citewise.settings import SourceConfig
from citewise.types import Identity
from tests.kb import write


def ingest(services, folder, name="kb", readers=("public",), force=False):
    source = SourceConfig(name=name, type="folder", path=str(folder), readers=list(readers))
    return run_source(services.pipeline, source, trigger="test", force=force)


def points_of(services, doc_id) -> list[str]:
    return services.index.point_ids(IndexFilter(document_ids=[doc_id]))


def assert_index_matches_catalog(services):
    """Every live chunk is in the index exactly once, and nothing else is."""
    catalog_ids = {pid for _, ids in services.catalog.live_points().values() for pid in ids}
    assert set(services.index.point_ids(IndexFilter())) == catalog_ids
    assert services.index.count() == len(catalog_ids)


def test_first_run_indexes_every_document(make_services, kb):
    services = make_services()
    report = ingest(services, kb)
    assert report.status == "succeeded", report.summary()
    assert report.counts.added == 5
    assert report.counts.failed == 0
    assert report.counts.chunks_embedded == report.counts.chunks_written > 5
    docs = services.catalog.documents_of_source("kb")
    assert set(docs) == {
        "runbooks/redis-failover.md",
        "runbooks/postgres-disk-full.md",
        "runbooks/secrets/rotate-payment-keys.md",
        "wiki/onboarding.html",
        "wiki/holiday-swaps.txt",
    }
    redis = docs["runbooks/redis-failover.md"]
    assert redis.title == "Redis cache failover"
    assert redis.service == "redis-cache"
    assert redis.metadata["alerts"] == ["RedisPrimaryDown"]
    assert docs["runbooks/secrets/rotate-payment-keys.md"].readers == ["group:security"]
    assert docs["wiki/onboarding.html"].title == "Onboarding for new engineers"
    # The raw bytes are stored content-addressed and round-trip.
    raw = (kb / "runbooks/redis-failover.md").read_bytes()
    assert services.blobs.get(redis.blob_key) == raw
    headings = {c.heading for c in services.catalog.chunk_rows(redis.id)}
    assert {"Diagnosis", "Mitigation"} <= headings
    assert_index_matches_catalog(services)


def test_second_run_embeds_nothing(make_services, kb):
    services = make_services()
    ingest(services, kb)
    points = services.index.count()
    report = ingest(services, kb)
    assert report.counts.unchanged == 5
    assert report.counts.added == report.counts.updated == 0
    assert report.counts.chunks_embedded == 0
    assert report.counts.chunks_written == 0
    assert services.index.count() == points


def test_edit_replaces_only_that_documents_chunks(make_services, kb):
    services = make_services()
    ingest(services, kb)
    doc_id = document_id("kb", "runbooks/postgres-disk-full.md")
    old = services.catalog.get_document(doc_id)
    old_points = set(points_of(services, doc_id))
    other_points = set(points_of(services, document_id("kb", "runbooks/redis-failover.md")))

    path = kb / "runbooks/postgres-disk-full.md"
    path.write_text(path.read_text() + "\n## Escalation\n\nPage the database on-call "
                    "engineer through the DBA escalation policy if the volume cannot grow.\n")
    marks = services.catalog.swaps_committed()
    report = ingest(services, kb)
    assert services.catalog.swaps_committed() != marks, "a new version is a swap searches see"

    assert report.counts.updated == 1 and report.counts.unchanged == 4
    new = services.catalog.get_document(doc_id)
    assert new.version != old.version
    # Only the new section is new text: unchanged chunks come from the embedding cache.
    assert 1 <= report.counts.chunks_embedded <= new.chunk_count
    new_points = set(points_of(services, doc_id))
    assert len(new_points) == new.chunk_count
    assert not new_points & old_points, "old version's points must be gone"
    assert set(points_of(services, document_id("kb", "runbooks/redis-failover.md"))) == (
        other_points
    )
    assert not services.blobs.exists(old.blob_key), "the replaced blob is released"
    hits = services.search.search("DBA escalation policy", Identity.anonymous(), top_k=3)
    assert hits[0].document_id == doc_id and hits[0].heading == "Escalation"
    assert_index_matches_catalog(services)


def test_deleted_file_leaves_catalog_index_and_blob_store(make_services, kb):
    services = make_services()
    ingest(services, kb)
    doc_id = document_id("kb", "wiki/holiday-swaps.txt")
    blob = services.catalog.get_document(doc_id).blob_key
    assert points_of(services, doc_id)

    (kb / "wiki/holiday-swaps.txt").unlink()
    report = ingest(services, kb)

    assert report.counts.deleted == 1
    assert services.catalog.get_document(doc_id) is None
    assert points_of(services, doc_id) == []
    assert not services.blobs.exists(blob)
    assert_index_matches_catalog(services)


def test_bad_files_are_recorded_and_lose_nothing(make_services, kb):
    services = make_services()
    ingest(services, kb)
    # A runbook that was fine becomes broken: its indexed version must stay searchable.
    write(kb, "runbooks/redis-failover.md", "---\ntitle: [unclosed\n---\n# Broken\n")
    (kb / "runbooks/binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0binary")
    (kb / "wiki/latin1.txt").write_bytes("caf\xe9 menu".encode("latin-1"))
    report = ingest(services, kb)

    assert report.status == "partial"
    assert report.counts.failed == 3
    failed = dict(report.errors)
    assert "not valid YAML" in failed["runbooks/redis-failover.md"]
    assert "binary" in failed["runbooks/binary.md"]
    assert "UTF-8" in failed["wiki/latin1.txt"]
    run = services.sources.get_run(report.run_id)
    assert {e["external_id"] for e in run["errors"]} == set(failed)
    # The previously indexed redis runbook is still there and still found.
    hits = services.search.search("Sentinel failover redis", Identity.anonymous(), top_k=3)
    assert hits and hits[0].path == "runbooks/redis-failover.md"
    assert report.counts.deleted == 0


def test_missing_source_folder_fails_without_deleting(make_services, kb, tmp_path):
    services = make_services()
    ingest(services, kb)
    moved = tmp_path / "moved"
    shutil.move(kb, moved)
    report = ingest(services, kb)
    assert report.status == "failed"
    assert "does not exist" in report.message
    assert services.catalog.count_documents("kb") == 5
    assert report.counts.deleted == 0


def test_readers_change_updates_payload_without_reembedding(make_services, kb):
    services = make_services()
    ingest(services, kb)
    anon = Identity.anonymous()
    assert services.search.search("holiday on-call swap", anon, top_k=3)

    report = ingest(services, kb, readers=["group:sre"])
    assert report.counts.chunks_embedded == 0
    assert report.counts.unchanged == 5
    hits = services.search.search("holiday on-call swap", anon, top_k=10)
    # Front matter readers (the security runbook) and source readers now restrict everything.
    assert hits == []
    sre = Identity(user="ana", groups=("sre",))
    assert services.search.search("holiday on-call swap", sre, top_k=3)


def test_force_reingest_never_duplicates(make_services, kb):
    services = make_services()
    ingest(services, kb)
    before = services.index.count()
    marks = services.catalog.swaps_committed()
    report = ingest(services, kb, force=True)
    assert report.counts.updated == 5
    # Each document was written again as the version already live, in place: nothing a search
    # could miss, so nothing that would make searches meanwhile ask the index again.
    assert services.catalog.swaps_committed() == marks
    assert services.catalog.pending_writes() == []
    assert report.counts.chunks_embedded == 0, "the embedding cache serves forced re-ingests"
    assert services.index.count() == before
    assert_index_matches_catalog(services)


class CrashingConnector(FolderConnector):
    """A source whose process dies half-way through a run (the second batch never comes)."""

    def load(self, batch_size: int = 32):
        for i, batch in enumerate(super().load(batch_size=2)):
            if i == 1:
                raise KeyboardInterrupt("killed")
            yield batch


def test_crash_mid_run_then_resume(make_services, kb):
    services = make_services()
    connector = CrashingConnector(FolderConfig(path=kb, readers=["public"]))
    with pytest.raises(KeyboardInterrupt):
        services.pipeline.run("kb", "folder", connector, config={"path": str(kb)})
    runs = services.sources.list_runs("kb")
    assert runs[0]["status"] == "interrupted"
    assert services.catalog.count_documents("kb") == 2  # the first batch landed

    report = ingest(services, kb)
    assert report.status == "succeeded"
    assert report.counts.added == 3 and report.counts.unchanged == 2
    assert_index_matches_catalog(services)


class RecordingProgress:
    """A ProgressSink (the pipeline's extension point for bars and logs) that keeps what it is
    told: the sizes of the model's batches and the documents reported written."""

    def __init__(self) -> None:
        self.embedded: list[int] = []
        self.documents_done = 0

    def start(self, total):
        pass

    def documents(self, n):
        self.documents_done += n

    def chunks_embedded(self, n):
        self.embedded.append(n)

    def close(self):
        pass


def test_small_connector_batches_are_embedded_in_full_model_batches(make_services, tmp_path):
    """Chunks are embedded across the connector's batches (a window of chunks), so a source
    read four documents at a time still fills the model's batches of 32, sorted by length over
    the window rather than within four documents."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(40):
        (folder / f"note-{i:02d}.md").write_text(
            f"# Note {i}\n\nHost db-{i} was restarted {i} times during maintenance window {i}.\n")
    services = make_services()
    progress = RecordingProgress()
    connector = FolderConnector(FolderConfig(path=folder, readers=["public"]))
    report = services.pipeline.run("notes", "folder", connector, config={"path": str(folder)},
                                   progress=progress, batch_size=4)
    assert report.status == "succeeded", report.summary()
    assert report.counts.added == 40 and report.counts.chunks_embedded == 40
    assert progress.embedded == [32, 8], "the model saw the connector's batches of four"
    assert progress.documents_done == 40
    assert_index_matches_catalog(services)


def test_readers_never_see_a_half_swapped_document(make_services, kb):
    """Simulate a crash between writing a new version's points and flipping the catalog."""
    services = make_services()
    ingest(services, kb)
    doc_id = document_id("kb", "runbooks/redis-failover.md")
    live = services.catalog.get_document(doc_id)
    text = "Completely new guidance: restart the entire datacenter for Redis issues."
    vec = services.dense.embed_documents([text])[0].tolist()
    stray = ChunkPoint(
        id=chunk_point_id(doc_id, "0" * 16, 0),
        dense=vec,
        sparse=services.sparse.embed_document(text),
        payload=ChunkPayload(document_id=doc_id, version="0" * 16, source="kb",
                             readers=["public"], title=live.title, text=text, path=live.path),
    )
    services.index.upsert([stray])
    hits = services.search.search("restart the entire datacenter", Identity.anonymous(),
                                  top_k=10)
    assert all(h.text != text for h in hits), "an unflipped version must stay invisible"
    assert any(h.document_id == doc_id for h in hits)

    # The next run after an interrupted one sweeps such strays.
    run_id = services.sources.start_run("kb", "test")
    services.sources.finish_run(run_id, RunCounts(), "interrupted")
    ingest(services, kb)
    assert stray.id not in points_of(services, doc_id)
    assert_index_matches_catalog(services)


def test_a_run_that_would_empty_a_source_is_refused(make_services, tmp_path):
    services = make_services()
    folder = tmp_path / "many"
    for i in range(12):
        write(folder, f"page-{i}.md", f"# Page {i}\n\nNotes about subsystem number {i}.\n")
    ingest(services, folder, name="many")
    for i in range(8):
        (folder / f"page-{i}.md").unlink()

    refused = ingest(services, folder, name="many")
    assert refused.status == "failed"
    assert "would leave 4 of the 12" in refused.message
    assert services.catalog.count_documents("many") == 12

    forced = ingest(services, folder, name="many", force=True)
    assert forced.status == "succeeded" and forced.counts.deleted == 8
    assert services.catalog.count_documents("many") == 4


def test_mixed_case_readers_match_callers_in_that_group(make_services, tmp_path):
    """``readers: [Group:Security]`` is the security group: identity providers send the name
    as ``security`` (or ``Security``), and either must find the runbook; nobody else may."""
    kb = tmp_path / "kb"
    write(kb, "rotate.md", "---\nreaders: [Group:Security]\n---\n# Rotate the vault keys\n\n"
                           "Open a ticket with the security team, then rotate the vault keys.\n")
    services = make_services()
    assert ingest(services, kb, readers=["group:eng"]).status == "succeeded"
    doc = services.catalog.documents_of_source("kb")["rotate.md"]
    assert doc.readers == ["group:security"]
    for groups in (("security",), ("Security",)):
        hits = services.search.search("rotate the vault keys", Identity("li", groups), top_k=3)
        assert [h.document_id for h in hits][:1] == [doc.id], groups
    assert services.search.search("rotate the vault keys", Identity("li", ("eng",)), top_k=3) == []


def test_readers_stored_in_an_old_spelling_are_respelled_by_the_next_run(make_services, tmp_path):
    """An index written before names were case-folded holds ``group:Security``, which the
    folded principals of a caller no longer match. A folder source reads every file on each
    run, so its next run rewrites those readers (payload first, then catalog), embedding
    nothing."""
    kb = tmp_path / "kb"
    write(kb, "rotate.md", "---\nreaders: [Group:Security]\n---\n# Rotate the vault keys\n\n"
                           "Open a ticket with the security team, then rotate the vault keys.\n")
    services = make_services()
    ingest(services, kb, readers=["group:eng"])
    doc_id = services.catalog.documents_of_source("kb")["rotate.md"].id
    # What the previous version stored for this file.
    services.index.set_payload(doc_id, {"readers": ["group:Security"]})
    services.catalog.update_document_fields(doc_id, readers=["group:Security"])
    caller = Identity("li", ("security",))
    assert services.search.search("rotate the vault keys", caller, top_k=3) == []

    report = ingest(services, kb, readers=["group:eng"])
    assert report.counts.chunks_embedded == 0 and report.counts.unchanged == 1
    assert services.catalog.get_document(doc_id).readers == ["group:security"]
    hits = services.search.search("rotate the vault keys", caller, top_k=3)
    assert [h.document_id for h in hits][:1] == [doc_id]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_nul_character_in_a_document_indexes_alike_in_both_catalogs(backend, tmp_path,
                                                                      request, make_services):
    """PostgreSQL refuses U+0000 in text; a file carrying one past the connectors' binary probe
    (its first 8 KiB) must index there as it does in SQLite, not fail."""
    database_url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    folder = tmp_path / "notes"
    folder.mkdir()
    padding = "".join(f"Line {i} of the on-call notes.\n" for i in range(400))  # > 8 KiB
    (folder / "pager.md").write_text(
        f"# Pager notes\n\n{padding}\nRotate the pager\x00 every Monday at 09:00.\n")
    services = make_services(tmp_path / "data", database_url=database_url)
    connector = FolderConnector(FolderConfig(path=folder, readers=["public"]))
    report = services.pipeline.run("notes", "folder", connector, config={"path": str(folder)})
    assert report.status == "succeeded" and report.counts.added == 1, report
    [doc] = services.catalog.documents_of_source("notes").values()
    assert doc.title == "Pager notes"
    texts = " ".join(c.text for c in services.catalog.chunks(doc.id))
    assert "Rotate the pager every Monday at 09:00." in texts and "\x00" not in texts
