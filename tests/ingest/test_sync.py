"""The pipeline's sync path: what a syncing connector (git, Confluence) can rely on.

``ChangingSource`` is a source in memory that speaks the sync protocol the way a real one
does: it remembers nothing itself, it reads the pipeline's ``SyncRequest`` and answers with what
changed since the state it returned last time. Pipeline, catalog, index and model are real.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import ClassVar

import pytest

from citewise.connectors.base import SyncBatch, SyncConnector, SyncRequest
from citewise.errors import SourceError
from citewise.index.catalog import document_id
from citewise.index.vector_index import IndexFilter
from citewise.types import Identity, SourceDocument


class ChangingSource:
    source_type: ClassVar[str] = "changing"

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}  # external id -> text
        self.revision = 0
        self.changed_at: dict[str, int] = {}
        self.deleted_at: dict[str, int] = {}
        self.broken: set[str] = set()
        self.fail_listing = False
        self.crash_after_batches: int | None = None
        self.always_list = False  # give live_ids on every run, as a periodic full listing does
        self.requests: list[SyncRequest] = []
        self.readers = ["public"]  # every page's, as a connector computed them

    # Edits, as an author makes them.
    def put(self, external_id: str, text: str) -> None:
        self.revision += 1
        self.pages[external_id] = text
        self.changed_at[external_id] = self.revision
        self.deleted_at.pop(external_id, None)

    def remove(self, external_id: str) -> None:
        self.revision += 1
        self.pages.pop(external_id)
        self.deleted_at[external_id] = self.revision

    def _doc(self, external_id: str) -> SourceDocument:
        if external_id in self.broken:
            return SourceDocument(external_id, external_id, b"", "text/markdown",
                                  error="the page body could not be fetched")
        text = self.pages[external_id]
        return SourceDocument(
            external_id=external_id, title=external_id, content=text.encode(),
            media_type="text/markdown", path=f"{external_id}.md",
            url=f"https://wiki.example/{external_id}", readers=list(self.readers),
        )

    def sync(self, request: SyncRequest, batch_size: int = 32) -> Iterator[SyncBatch]:
        self.requests.append(request)
        if self.fail_listing:
            raise SourceError("the wiki answered 503 to every listing request")
        since = 0 if request.full else int(request.state.get("revision", 0))
        resume = int((request.checkpoint or {}).get("after", 0))
        ids = sorted(
            (e for e, rev in self.changed_at.items() if e in self.pages and rev > since),
            key=lambda e: self.changed_at[e],
        )
        ids = [e for e in ids if self.changed_at[e] > resume]
        ids += [e for e in request.retry if e in self.pages and e not in ids]
        for n, i in enumerate(range(0, len(ids), batch_size)):
            if self.crash_after_batches is not None and n == self.crash_after_batches:
                raise KeyboardInterrupt("killed")
            part = ids[i : i + batch_size]
            yield SyncBatch(
                documents=[self._doc(e) for e in part],
                checkpoint={"after": max(self.changed_at[e] for e in part)},
                total=len(ids) if i == 0 else None,
            )
        gone = [e for e, rev in self.deleted_at.items() if rev > since]
        yield SyncBatch(
            deleted=gone,
            live_ids=sorted(self.pages) if request.full or self.always_list else None,
            state={"revision": self.revision},
        )


def run(services, source: ChangingSource, force: bool = False, batch_size: int = 32):
    return services.pipeline.run("wiki", "changing", source, force=force, batch_size=batch_size)


def page(topic: str) -> str:
    return f"# {topic}\n\n## Steps\n\nRestart the {topic} service and watch its error rate.\n"


def test_the_pipeline_recognises_a_sync_connector():
    assert isinstance(ChangingSource(), SyncConnector)


def test_later_runs_read_only_what_changed_and_deletions_apply(make_services):
    services = make_services()
    source = ChangingSource()
    for name in ("redis", "kafka", "postgres"):
        source.put(name, page(name))
    first = run(services, source)
    assert first.status == "succeeded", first.summary()
    assert first.counts.added == 3
    assert services.sources.get_source("wiki").state["cursor"] == {"revision": 3}

    source.put("kafka", page("kafka") + "\nAlso check consumer lag.\n")
    source.remove("redis")
    second = run(services, source)
    assert second.status == "succeeded", second.summary()
    # The connector was asked from the stored state and read only the edited page.
    assert source.requests[-1].state == {"revision": 3}
    assert second.counts.seen == 1
    assert (second.counts.updated, second.counts.deleted, second.counts.added) == (1, 1, 0)
    assert set(services.catalog.documents_of_source("wiki")) == {"kafka", "postgres"}
    assert services.index.count(IndexFilter(document_ids=[document_id("wiki", "redis")])) == 0


def test_a_failed_document_is_retried_next_run_and_keeps_its_old_version(make_services):
    services = make_services()
    source = ChangingSource()
    source.put("redis", page("redis"))
    run(services, source)
    source.put("redis", page("redis") + "\nNew step.\n")
    source.broken.add("redis")
    report = run(services, source)
    assert report.status == "partial"
    assert services.sources.get_source("wiki").state["retry"] == ["redis"]
    assert services.catalog.documents_of_source("wiki")["redis"].chunk_count > 0

    source.broken.clear()
    again = run(services, source)  # nothing changed since, but the failed page is read again
    assert source.requests[-1].retry == ["redis"]
    assert again.counts.updated == 1 and again.status == "succeeded"
    assert services.sources.get_source("wiki").state["retry"] == []


def test_an_interrupted_run_resumes_after_its_last_written_batch(make_services):
    services = make_services()
    source = ChangingSource()
    for i in range(6):
        source.put(f"page-{i}", page(f"component {i}"))
    source.crash_after_batches = 2
    with pytest.raises(KeyboardInterrupt):
        run(services, source, batch_size=2)
    assert len(services.catalog.documents_of_source("wiki")) == 4
    state = services.sources.get_source("wiki").state
    assert state["checkpoint"] == {"after": 4} and "cursor" not in state

    source.crash_after_batches = None
    report = run(services, source, batch_size=2)
    assert source.requests[-1].checkpoint == {"after": 4}
    assert report.counts.seen == 2 and report.counts.added == 2, report.summary()
    assert len(services.catalog.documents_of_source("wiki")) == 6
    assert services.sources.get_source("wiki").state["checkpoint"] is None


def test_through_parse_workers_a_checkpoint_waits_for_the_documents_before_it(make_services):
    """Workers cut past a checkpoint (it waits its turn in the cut queue); it is saved only once
    the documents before it are written, and an interrupted run resumes after them."""
    services = make_services(parse_processes=2)
    services.pipeline.parse_start_after = 0
    services.pipeline.embed_window = 16
    source = ChangingSource()
    for i in range(40):
        source.put(f"page-{i:02d}", page(f"component {i}"))
    source.crash_after_batches = 5
    with pytest.raises(KeyboardInterrupt):
        run(services, source, batch_size=4)
    # What was read is written; a checkpoint was saved only where every document before it
    # was written (none is saved while the interrupted run closes).
    written = set(services.catalog.documents_of_source("wiki"))
    assert written == {f"page-{i:02d}" for i in range(20)}
    after = int((services.sources.get_source("wiki").state.get("checkpoint") or {})
                .get("after", 0))
    assert after <= 20 and {f"page-{i:02d}" for i in range(after)} <= written

    source.crash_after_batches = None
    report = run(services, source, batch_size=4)
    # Read again from the checkpoint: the pages written after it are unchanged.
    assert report.counts.seen == 40 - after, report.summary()
    assert report.counts.added == 20 and report.counts.unchanged == 20 - after
    assert len(services.catalog.documents_of_source("wiki")) == 40
    assert services.sources.get_source("wiki").state["checkpoint"] is None


def test_a_failed_listing_keeps_everything_and_the_old_state(make_services):
    services = make_services()
    source = ChangingSource()
    source.put("redis", page("redis"))
    run(services, source)
    before = services.sources.get_source("wiki").state
    source.fail_listing = True
    report = run(services, source)
    assert report.status == "failed"
    assert "503" in report.message
    assert services.sources.get_source("wiki").state == before
    assert set(services.catalog.documents_of_source("wiki")) == {"redis"}


def test_a_full_listing_prunes_and_the_mass_deletion_brake_holds(make_services):
    services = make_services()
    source = ChangingSource()
    for i in range(12):
        source.put(f"page-{i}", page(f"component {i}"))
    run(services, source)
    source.always_list = True
    source.pages.pop("page-0")  # gone without a trace: only a full listing can notice
    pruned = run(services, source)
    assert pruned.counts.deleted == 1 and pruned.status == "succeeded", pruned.summary()
    # Now the listing admits only 3 of the 11 (a permissions outage, say): the brake refuses.
    for i in range(4, 12):
        source.pages.pop(f"page-{i}")
    braked = run(services, source)
    assert braked.status == "failed" and "would leave 3 of the 12" in braked.message
    assert len(services.catalog.documents_of_source("wiki")) == 11
    forced = run(services, source, force=True)  # the operator says the deletions are real
    assert forced.counts.deleted == 8
    assert sorted(services.catalog.documents_of_source("wiki")) == ["page-1", "page-2", "page-3"]


def test_the_brake_refuses_explicit_mass_deletions_without_force(make_services):
    services = make_services()
    source = ChangingSource()
    for i in range(12):
        source.put(f"page-{i}", page(f"component {i}"))
    run(services, source)
    for i in range(8):
        source.remove(f"page-{i}")
    report = run(services, source)
    assert report.status == "failed"
    assert "would leave 4 of the 12" in report.message
    assert len(services.catalog.documents_of_source("wiki")) == 12
    # The state did not advance, so the same deletions come again once confirmed.
    assert run(services, source, force=False).status == "failed"
    assert run(services, source, force=True).counts.deleted == 8


def test_links_are_built_per_chunk_from_the_template(make_services):
    services = make_services()

    class Repo(ChangingSource):
        def _doc(self, external_id):
            doc = super()._doc(external_id)
            doc.link_template = f"https://git.example/blob/abc123/{external_id}.md#L{{start}}-L{{end}}"
            doc.metadata = {"repository": "ops", "last_commit": {"sha": "abc123"}}
            return doc

    source = Repo()
    source.put("deploy", "# Deploy\n\n## Pick the region\n\nThe deploy script reads REGION "
                         "from the environment and defaults to eu-west-1.\n")
    run(services, source)
    hit = services.search.search("which region does deploy default to", Identity())[0]
    assert hit.start_line is not None
    assert hit.url == f"https://git.example/blob/abc123/deploy.md#L{hit.start_line}-L{hit.end_line}"
    assert hit.metadata["last_commit"]["sha"] == "abc123"


def test_secrets_are_redacted_before_anything_is_stored(make_services, tmp_path):
    from tests.kb import write

    services = make_services()
    folder = tmp_path / "notes"
    secret = "AKIAIOSFODNN7EXAMPLE"
    write(folder, "aws.md", f"# AWS access\n\nThe deploy user key is {secret} (rotate it).\n")
    from citewise.ingest.jobs import run_source
    from citewise.settings import SourceConfig

    report = run_source(services.pipeline, SourceConfig(name="notes", type="folder",
                                                         path=str(folder), readers=["public"]),
                        trigger="test")
    assert report.status == "succeeded", report.summary()
    record = services.catalog.documents_of_source("notes")["aws.md"]
    assert record.metadata["redactions"] == [{"kind": "aws-access-key-id", "line": 3}]
    assert secret.encode() not in services.blobs.get(record.blob_key)
    assert all(secret not in c.text for c in services.catalog.chunk_rows(record.id))
    hits = services.search.search("deploy user key", Identity(), top_k=5)
    assert hits and all(secret not in h.text for h in hits)


def test_new_index_settings_make_a_sync_source_read_everything_once(make_services, tmp_path):
    """A new chunker, model or chunk size changes the index signature: files the source did
    not change must still be re-chunked, so the connector is asked for a full pass."""
    data = tmp_path / "data"
    source = ChangingSource()
    for name in ("redis", "kafka"):
        source.put(name, page(name))
    first = make_services(data_dir=data)
    run(first, source)
    first.close()
    services = make_services(data_dir=data, chunk_max_tokens=150)
    report = run(services, source)
    assert source.requests[-1].full is True
    assert report.counts.updated == 2, report.summary()
    run(services, source)
    assert source.requests[-1].full is False  # once re-indexed, back to incremental



def test_a_changed_setting_asks_for_a_full_pass_but_a_changed_credential_does_not(make_services):
    """The pipeline compares the source's settings with those of its last finished run; the
    connector's ``reach_options`` (how it is reached) are left out of the comparison."""
    services = make_services()
    source = ChangingSource()
    source.reach_options = frozenset({"token_env", "timeout"})
    source.put("redis", page("redis"))

    def sync(**config):
        report = services.pipeline.run("wiki", "changing", source, trigger="test",
                                       config={"type": "changing", "readers": ["public"],
                                               **config})
        assert report.status == "succeeded", report.summary()
        return source.requests[-1].full

    assert sync(labels=["runbook"]) is False  # the first run: nothing to compare with
    assert sync(labels=["runbook"]) is False
    assert sync(labels=["runbook"], token_env="WIKI_TOKEN", timeout=5) is False
    assert sync(labels=["runbook", "howto"], token_env="WIKI_TOKEN", timeout=5) is True
    assert sync(labels=["runbook", "howto"], token_env="WIKI_TOKEN", timeout=5) is False
    report = services.pipeline.run("wiki", "changing", source, trigger="test",
                                   config={"type": "changing", "readers": ["group:eng"],
                                           "labels": ["runbook", "howto"]})
    assert source.requests[-1].full is True and report.status == "succeeded"


def test_a_new_spelling_of_readers_reaches_pages_the_source_did_not_change(make_services):
    """A syncing source (git, Confluence) yields only what changed, so pages it does not touch
    would keep readers stored in the previous version's spelling (``group:Security``), which
    the callers' case-folded principals never match. The spelling is part of the definition
    digest: the first run after the upgrade is a full pass that rewrites those readers."""
    services = make_services()
    source = ChangingSource()
    source.readers = ["group:security"]
    source.put("vault", page("vault"))
    config = {"type": "changing", "readers": ["group:security"]}
    run_config = {"trigger": "test", "config": config}
    assert services.pipeline.run("wiki", "changing", source, **run_config).status == "succeeded"
    doc_id = document_id("wiki", "vault")
    # The state and readers the previous version left: its digest had no spelling in it.
    old_definition = hashlib.sha256(
        json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    stored = services.sources.get_source("wiki").state
    services.sources.set_source_state("wiki", {**stored, "definition": old_definition})
    services.index.set_payload(doc_id, {"readers": ["group:Security"]})
    services.catalog.update_document_fields(doc_id, readers=["group:Security"])

    report = services.pipeline.run("wiki", "changing", source, **run_config)
    assert source.requests[-1].full is True
    assert report.counts.chunks_embedded == 0
    assert services.catalog.get_document(doc_id).readers == ["group:security"]
    hits = services.search.search("restart the vault service", Identity("li", ("Security",)))
    assert [h.document_id for h in hits][:1] == [doc_id]
