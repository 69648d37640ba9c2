"""The document catalog's contract (``index/catalog.py``), on every backend of ``conftest.py``."""

from __future__ import annotations

import pytest

from citewise.errors import BackendError
from citewise.index.catalog import (
    SWAPS_COMMITTED,
    DocumentRecord,
    PendingWrite,
    chunk_point_id,
    document_id,
)
from citewise.index.outline import Block, Outline, Section
from citewise.retrieval.live_versions import LiveVersions
from citewise.types import Chunk


def record(source: str, external_id: str, version: str = "v1", *, readers=("public",),
           tags=(), service=None, blob="ab/1", path=None, content="h1") -> DocumentRecord:
    return DocumentRecord(
        id=document_id(source, external_id), source=source, external_id=external_id,
        title=f"Title of {external_id}", media_type="text/markdown", content_hash=content,
        version=version, index_signature="sig", readers=list(readers), blob_key=blob,
        indexed_at="2026-01-01T00:00:00+00:00", path=path or external_id, tags=list(tags),
        service=service, metadata={"owner": "sre"}, chunk_count=2)


def chunks(doc: DocumentRecord, *texts: str) -> tuple[list[Chunk], list[str]]:
    made = [Chunk(document_id=doc.id, ordinal=i, text=t, heading=f"H{i}", start_line=i + 1,
                  end_line=i + 1, token_count=3, symbol="def f" if i else None,
                  continues_symbol=(i > 1) if i else None)
            for i, t in enumerate(texts)]
    return made, [chunk_point_id(doc.id, doc.version, i) for i in range(len(made))]


def outline(title: str) -> Outline:
    return Outline([Section(title=title, path=title, level=2, start_line=1, end_line=3,
                            blocks=[Block(kind="paragraph", text="Fail over.")])])


def save(stores, doc: DocumentRecord, *texts: str, with_outline: bool = True) -> list[str]:
    stores.sources.ensure_source(doc.source, "folder", {})  # a document names its source
    made, ids = chunks(doc, *(texts or ("first", "second")))
    stores.catalog.save_document(doc, made, ids, outline("Steps") if with_outline else None)
    return ids


def test_a_saved_document_reads_back_as_written(stores):
    doc = record("kb", "a.md", tags=["db", "redis"], service="payments")
    ids = save(stores, doc, "alpha", "beta")
    catalog = stores.catalog
    assert catalog.get_document(doc.id) == doc
    assert catalog.get_document("nope") is None
    assert catalog.documents_of_source("kb") == {"a.md": doc}
    assert [c.text for c in catalog.chunks(doc.id)] == ["alpha", "beta"]
    assert [(r.id, r.symbol) for r in catalog.chunk_rows(doc.id)] == [(ids[0], None),
                                                                       (ids[1], "def f")]
    assert catalog.outlines([doc.id, "nope"])[doc.id].sections[0].title == "Steps"
    # The code chunker's mark is kept, so that a point rebuilt from the catalog says it too;
    # unknown (None), false and true are three answers.
    save(stores, code := record("kb", "f.py", content="h2"), "def f():", "    x = 1", "    y")
    assert [c.continues_symbol for c in catalog.chunks(code.id)] == [None, False, True]
    catalog.delete_document(code.id)
    assert catalog.current_versions([doc.id, "nope"]) == {doc.id: "v1"}
    assert catalog.content_hashes() == {doc.id: "h1"}
    assert (catalog.count_documents(), catalog.count_documents("kb"),
            catalog.count_documents("other"), catalog.count_chunks()) == (1, 1, 0, 2)
    assert catalog.live_points() == {doc.id: ("v1", set(ids))}
    assert set(catalog.sample_chunk_ids(5)) == set(ids)
    assert catalog.signature_counts() == [("text/markdown", "sig", 1)]


def test_a_new_version_replaces_the_chunks_and_outline_of_the_old(stores):
    doc = record("kb", "a.md")
    save(stores, doc, "one", "two", "three")
    newer = record("kb", "a.md", version="v2", content="h2")
    ids = save(stores, newer, "only", with_outline=False)
    assert [c.text for c in stores.catalog.chunks(doc.id)] == ["only"]
    assert stores.catalog.outlines([doc.id]) == {}
    assert stores.catalog.live_points() == {doc.id: ("v2", set(ids))}
    stores.catalog.update_document_fields(doc.id, readers=["group:sre"], index_signature="old")
    changed = stores.catalog.get_document(doc.id)
    assert changed.readers == ["group:sre"] and changed.index_signature == "old"
    assert stores.catalog.documents_with_signature("old") == {doc.id}
    stores.catalog.delete_document(doc.id)
    assert stores.catalog.get_document(doc.id) is None and stores.catalog.count_chunks() == 0


def test_what_a_caller_may_read_follows_the_readers(stores):
    public = record("kb", "public.md", tags=["db"], service="payments", path="runbooks/pg.md")
    secret = record("kb", "secret.md", readers=["group:sre"], tags=["secret-tag"],
                    service="vault", path="runbooks/KafkaLag.md")
    other = record("wiki", "page", readers=["user:dana", "group:sre"], tags=["db"])
    for doc in (public, secret, other):
        save(stores, doc)
    catalog = stores.catalog
    ids = [public.id, secret.id, other.id, "gone"]
    assert catalog.readable_documents(ids, ["public"]) == {public.id}
    assert catalog.readable_documents(ids, ["public", "group:sre"]) == {public.id, secret.id,
                                                                         other.id}
    assert catalog.readable_documents(ids, []) == set()
    assert sorted(catalog.titles_hidden_from(["public"])) == sorted([secret.title, other.title])
    assert catalog.path_mentions("kafkalag", ["group:sre"])
    assert not catalog.path_mentions("kafkalag", ["public"])
    assert catalog.source_counts(["public"]) == {"kb": (1, 2)}
    assert catalog.source_counts(None) == {"kb": (2, 4), "wiki": (1, 2)}
    assert catalog.source_counts(["user:dana"]) == {"wiki": (1, 2)}
    assert catalog.list_facets(["public"]) == {"kb": {"tags": ["db"], "services": ["payments"]}}
    assert "secret-tag" in catalog.list_facets(["group:sre"])["kb"]["tags"]


def test_blobs_are_known_by_the_documents_that_use_them(stores):
    first, second = record("kb", "a.md", blob="ab/shared"), record("kb", "b.md", blob="ab/shared")
    save(stores, first)
    save(stores, second)
    assert stores.catalog.blob_in_use("ab/shared") and not stores.catalog.blob_in_use("ab/x")
    assert stores.catalog.blob_owners() == {"ab/shared": min(first.id, second.id)}
    assert {d.id for d in stores.catalog.documents_with_blob("ab/shared")} == {first.id,
                                                                                second.id}


def test_an_open_swap_survives_a_restart_and_hides_the_right_points(stores, open_stores):
    """Pending-write recovery: what a crashed run leaves is found by the next process, and the
    points a search must not return are the new version's before the commit, the old's after."""
    old = record("kb", "a.md", version="v1")
    save(stores, old, "old one", "old two")
    new = record("kb", "a.md", version="v2", content="h2")
    pending = PendingWrite(document_id=old.id, source="kb", kind="write", new_version="v2",
                           new_points=1, old_version="v1", old_points=2)
    stores.catalog.begin_pending(pending)
    marks = stores.catalog.swaps_committed()

    restarted = open_stores().catalog
    (found,) = restarted.pending_writes()
    assert found.phase == "started" and found.started_at
    assert restarted.pending_writes("other") == []
    assert restarted.stale_point_ids() == [chunk_point_id(old.id, "v2", 0)]
    assert restarted.current_versions([old.id]) == {old.id: "v1"}

    made, ids = chunks(new, "new")
    restarted.commit_write(found, new, made, ids)
    assert found.phase == "committed"
    assert restarted.swaps_committed() != marks
    assert restarted.current_versions([old.id]) == {old.id: "v2"}
    assert stores.catalog.pending_writes()[0].phase == "committed"
    assert sorted(stores.catalog.stale_point_ids()) == sorted(
        chunk_point_id(old.id, "v1", i) for i in range(2))
    restarted.end_pending(old.id)
    assert stores.catalog.pending_writes() == [] and stores.catalog.stale_point_ids() == []


def test_a_write_of_the_live_version_hides_nothing_and_is_not_counted(stores):
    """A forced run (or new readers on the same text) writes the version already live: its
    points are overwritten where they stand, so no search may be told to skip them or to ask
    again."""
    doc = record("kb", "a.md", version="v1")
    save(stores, doc, "one", "two")
    pending = PendingWrite(document_id=doc.id, source="kb", kind="write", new_version="v1",
                           new_points=2, old_version="v1", old_points=2)
    assert pending.in_place
    stores.catalog.begin_pending(pending)
    assert stores.catalog.stale_point_ids() == []
    before = stores.catalog.swaps_committed()
    made, ids = chunks(record("kb", "a.md", version="v1", readers=["group:sre"]), "one", "two")
    stores.catalog.commit_write(pending, record("kb", "a.md", version="v1",
                                                readers=["group:sre"]), made, ids)
    assert stores.catalog.swaps_committed() == before
    assert stores.catalog.get_document(doc.id).readers == ["group:sre"]
    assert stores.catalog.stale_point_ids() == []


def test_a_first_version_is_hidden_until_committed_and_not_counted(stores):
    """A document's first version takes nothing away from any search: its points are hidden
    until the commit, and the commit does not make searches ask again."""
    stores.sources.ensure_source("kb", "folder", {})
    doc = record("kb", "new.md", version="v1")
    pending = PendingWrite(document_id=doc.id, source="kb", kind="write", new_version="v1",
                           new_points=2)
    assert not pending.takes_a_version_away and not pending.in_place
    stores.catalog.begin_pending(pending)
    assert sorted(stores.catalog.stale_point_ids()) == sorted(
        chunk_point_id(doc.id, "v1", i) for i in range(2))
    before = stores.catalog.swaps_committed()
    made, ids = chunks(doc, "one", "two")
    stores.catalog.commit_write(pending, doc, made, ids)
    assert stores.catalog.swaps_committed() == before
    assert stores.catalog.current_versions([doc.id]) == {doc.id: "v1"}


def test_a_committed_delete_removes_the_document(stores):
    doc = record("kb", "a.md")
    save(stores, doc)
    pending = PendingWrite(document_id=doc.id, source="kb", kind="delete", old_version="v1",
                           old_points=2)
    stores.catalog.begin_pending(pending)
    assert stores.catalog.stale_point_ids() == []  # a delete hides nothing until it is done
    before = stores.catalog.swaps_committed()
    stores.catalog.commit_delete(pending)
    assert stores.catalog.get_document(doc.id) is None and stores.catalog.count_chunks() == 0
    assert stores.catalog.swaps_committed() != before
    assert stores.catalog.pending_writes()[0].phase == "committed"


def test_meta_is_kept_and_forgotten(stores, open_stores):
    stores.catalog.set_meta("embedding_model", "model-a")
    stores.catalog.set_meta("embedding_model", "model-b")
    stores.catalog.set_meta("index_generation", "g2")
    assert open_stores().catalog.meta("embedding_model") == "model-b"
    stores.catalog.delete_meta("embedding_model", "index_generation")
    assert stores.catalog.meta("embedding_model") is None
    assert stores.catalog.meta("index_generation") is None


def test_several_facts_are_read_at_once_and_unset_ones_left_out(stores):
    """What a search reads before and after its index queries (``SearchService._mark``)."""
    assert stores.catalog.meta_many(SWAPS_COMMITTED, "index_generation") == {}
    stores.catalog.set_meta("index_generation", "g2")
    stores.catalog.set_meta("embedding_model", "model-a")
    doc = record("kb", "a.md")
    save(stores, doc)
    pending = PendingWrite(document_id=doc.id, source="kb", kind="delete", old_version="v1",
                           old_points=2)
    stores.catalog.begin_pending(pending)
    stores.catalog.commit_delete(pending)
    facts = stores.catalog.meta_many(SWAPS_COMMITTED, "index_generation", "absent")
    assert facts == {SWAPS_COMMITTED: stores.catalog.swaps_committed(),
                     "index_generation": "g2"}
    assert facts[SWAPS_COMMITTED] != "0"


def test_the_generation_switch_takes_the_staged_rows_and_the_pointer_at_once(stores):
    doc = record("kb", "a.md")
    save(stores, doc, "live chunk")
    staged = stores.staging.open("g2")
    staged.sources.ensure_source("kb", "folder", {})
    rebuilt = record("kb", "a.md", version="v1b")
    made, ids = chunks(rebuilt, "small", "pieces")
    staged.catalog.save_document(rebuilt, made, ids, outline("Rebuilt"))
    assert stores.staging.documents("g2") == 1 and stores.staging.documents("g3") == 0

    stores.catalog.switch_generation(staged.catalog, {"index_generation": "g2"})
    assert stores.catalog.meta("index_generation") == "g2"
    assert [c.text for c in stores.catalog.chunks(doc.id)] == ["small", "pieces"]
    assert stores.catalog.current_versions([doc.id]) == {doc.id: "v1b"}
    assert stores.catalog.outlines([doc.id])[doc.id].sections[0].title == "Rebuilt"
    staged.close()
    stores.staging.discard()
    assert stores.staging.documents("g2") == 0


def test_a_staged_catalog_of_other_documents_is_refused_and_nothing_switches(stores):
    doc = record("kb", "a.md")
    save(stores, doc, "live chunk")
    staged = stores.staging.open("g2")
    staged.sources.ensure_source("kb", "folder", {})
    other = record("kb", "other.md")
    made, ids = chunks(other, "x")
    staged.catalog.save_document(other, made, ids)
    with pytest.raises(BackendError, match="other documents"):
        stores.catalog.switch_generation(staged.catalog, {"index_generation": "g2"})
    assert stores.catalog.meta("index_generation") is None
    assert [c.text for c in stores.catalog.chunks(doc.id)] == ["live chunk"]
    staged.close()


def test_every_fact_is_listed_and_a_document_copies_whole_into_another_catalog(stores,
                                                                             other_stores):
    """What ``citewise migrate-catalog`` reads and writes: the meta listed whole, a document
    read back with its chunks (``ChunkRow.chunk``) and outline saved unchanged elsewhere, and an
    open swap kept with its phase."""
    stores.catalog.set_meta("embedding_model", "model-a")
    stores.catalog.set_meta("index_generation", "g2")
    assert stores.catalog.meta_items() == {"embedding_model": "model-a",
                                           "index_generation": "g2"}
    doc = record("kb", "f.py", tags=["x"], service="svc")
    save(stores, doc, "def f():", "    x = 1", "    y")
    pending = PendingWrite(document_id=doc.id, source="kb", kind="write", phase="committed",
                           new_version="v1", new_points=3, old_version="v0", old_points=1,
                           started_at="2026-01-01T00:00:00+00:00")
    stores.catalog.begin_pending(pending)

    rows = stores.catalog.chunk_rows(doc.id)
    other_stores.sources.ensure_source("kb", "folder", {})
    other_stores.catalog.save_document(stores.catalog.get_document(doc.id),
                                       [r.chunk(doc.id) for r in rows], [r.id for r in rows],
                                       stores.catalog.outlines([doc.id])[doc.id])
    other_stores.catalog.begin_pending(stores.catalog.pending_writes()[0])
    copy = other_stores.catalog
    assert copy.get_document(doc.id) == doc and copy.chunk_rows(doc.id) == rows
    assert copy.chunks(doc.id) == stores.catalog.chunks(doc.id)
    assert copy.outlines([doc.id]) == stores.catalog.outlines([doc.id])
    assert copy.pending_writes() == [pending]
    assert copy.meta_items() == {}


def test_remembered_live_versions_follow_every_committed_swap(stores):
    """Search remembers live versions until the swap count or the generation moves
    (``retrieval/live_versions.py``): that is only right if every switch and removal of a
    version moves the count, on every catalog."""
    catalog = stores.catalog
    doc, other = record("kb", "a.md", version="v1"), record("kb", "b.md", version="w1")
    save(stores, doc, "one")
    save(stores, other, "two")
    live = LiveVersions(catalog)

    def versions(generation: str = "g0") -> dict[str, str]:
        return live.of([doc.id, other.id, "gone"], committed=catalog.swaps_committed(),
                       generation=generation)

    assert versions() == {doc.id: "v1", other.id: "w1"}
    assert versions() == {doc.id: "v1", other.id: "w1"}
    reads = live.reads
    assert reads == 2  # "gone" is never remembered as absent: asked again, the rest not

    new = record("kb", "a.md", version="v2", content="h2")
    pending = PendingWrite(document_id=doc.id, source="kb", kind="write", new_version="v2",
                           new_points=1, old_version="v1", old_points=1)
    catalog.begin_pending(pending)
    assert versions() == {doc.id: "v1", other.id: "w1"}  # not live before the commit
    catalog.commit_write(pending, new, *chunks(new, "one, again"))
    assert versions() == {doc.id: "v2", other.id: "w1"}

    removal = PendingWrite(document_id=other.id, source="kb", kind="delete")
    catalog.begin_pending(removal)
    catalog.commit_delete(removal)
    assert versions() == {doc.id: "v2"}
    reads = live.reads
    versions("g1")  # another generation: its versions are read afresh
    assert live.reads == reads + 1
