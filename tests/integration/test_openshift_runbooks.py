"""Integration: the real OpenShift runbooks corpus (../shared/corpora/openshift-runbooks).

One ingest of ~275 files (about 1,700 chunks) with the real model and embedded Qdrant, then the
incremental behaviours on a copy of the corpus: nothing re-embedded on a second run, deletions
remove chunks, an edit re-embeds only the edited file.
"""

from __future__ import annotations

import shutil

import pytest

from citewise.api.settings import Settings
from citewise.index.catalog import document_id
from citewise.index.vector_index import IndexFilter
from citewise.ingest.jobs import run_source
from citewise.settings import SourceConfig
from citewise.types import Identity
from tests.conftest import SHARED

CORPUS = SHARED / "corpora" / "openshift-runbooks"

pytestmark = pytest.mark.integration

if not CORPUS.is_dir():
    pytest.skip(f"shared corpus not found at {CORPUS}: the OpenShift runbook integration "
                "tests need ../shared/corpora/openshift-runbooks", allow_module_level=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory, dense):
    from citewise.api.composition import build_services

    root = tmp_path_factory.mktemp("openshift")
    corpus = root / "openshift-runbooks"
    shutil.copytree(CORPUS, corpus)
    services = build_services(Settings(data_dir=root / "data"))
    source = SourceConfig(name="openshift", type="folder", path=str(corpus), readers=["public"])
    first = run_source(services.pipeline, source, trigger="test")
    yield services, source, corpus, first
    services.close()


def test_first_ingest_indexes_the_corpus(world):
    services, _, corpus, first = world
    files = [p for p in corpus.rglob("*.md") if not any(x.startswith(".") for x in p.parts)]
    assert first.status == "succeeded", first.summary()
    assert first.counts.added == len(files)
    assert first.counts.chunks_written > 1000
    assert services.index.count() == services.catalog.count_chunks()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What should I do when the KubePersistentVolumeFillingUp alert fires?",
         "KubePersistentVolumeFillingUp.md"),
        ("etcdHighFsyncDurations is firing on the control plane", "etcdHighFsyncDurations.md"),
        ("CoreDNSErrorsHigh", "CoreDNSErrorsHigh.md"),
    ],
)
def test_a_question_naming_an_alert_returns_its_runbook_first(world, question, expected):
    services = world[0]
    hits = services.search.search(question, Identity.anonymous(), top_k=5)
    assert hits[0].path.endswith("/" + expected), [h.path for h in hits]


def test_second_ingest_embeds_nothing(world):
    services, source, _, first = world
    again = run_source(services.pipeline, source, trigger="test")
    assert again.counts.unchanged == first.counts.added
    assert again.counts.chunks_embedded == 0
    assert again.counts.chunks_written == 0


def test_deleting_a_file_removes_its_chunks(world):
    services, source, corpus, _ = world
    rel = "alerts/cluster-dns-operator/CoreDNSErrorsHigh.md"
    doc_id = document_id("openshift", rel)
    assert services.index.point_ids(IndexFilter(document_ids=[doc_id]))
    (corpus / rel).unlink()
    report = run_source(services.pipeline, source, trigger="test")
    assert report.counts.deleted == 1 and report.counts.chunks_embedded == 0
    assert services.index.point_ids(IndexFilter(document_ids=[doc_id])) == []
    hits = services.search.search("CoreDNSErrorsHigh", Identity.anonymous(), top_k=10)
    assert all(h.document_id != doc_id for h in hits)


def test_editing_one_file_reembeds_only_that_file(world):
    services, source, corpus, _ = world
    rel = "alerts/cluster-etcd-operator/etcdHighFsyncDurations.md"
    doc_id = document_id("openshift", rel)
    path = corpus / rel
    path.write_text(path.read_text() + "\n## Local notes\n\nOur clusters run etcd on "
                    "dedicated NVMe disks; check the disk firmware version first.\n")
    report = run_source(services.pipeline, source, trigger="test")
    assert report.counts.updated == 1
    assert report.counts.unchanged == report.counts.seen - 1
    edited = services.catalog.get_document(doc_id)
    assert 1 <= report.counts.chunks_embedded <= edited.chunk_count
    assert report.counts.chunks_written == edited.chunk_count
    hits = services.search.search("etcd NVMe disk firmware", Identity.anonymous(), top_k=3)
    assert hits[0].document_id == doc_id and hits[0].heading.endswith("Local notes")
