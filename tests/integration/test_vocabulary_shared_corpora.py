"""Integration: the vocabulary miner on two real corpora (../shared/corpora): the GitLab runbooks
and the GOV.UK developer docs, read by the folder connector and outlined as ingest outlines them
(no embedding: mining reads text only). It must find definitions these documents are known to
make, and nothing that is an ordinary word."""

from __future__ import annotations

import pytest

from citewise.connectors.folder import FolderConfig, FolderConnector
from citewise.index.catalog import DocumentRecord
from citewise.index.sparse import STOPWORDS
from citewise.ingest.outline import build_outline
from citewise.ingest.parse import document_text
from citewise.retrieval.vocabulary_mining import mine_documents
from tests.conftest import SHARED

CORPORA = ("gitlab-com-runbooks", "govuk-developer-docs")

pytestmark = pytest.mark.integration

missing = [c for c in CORPORA if not (SHARED / "corpora" / c).is_dir()]
if missing:
    pytest.skip(f"shared corpora not found: {', '.join(missing)} under {SHARED / 'corpora'}; "
                "the vocabulary integration test needs them", allow_module_level=True)


def documents():
    for name in CORPORA:
        connector = FolderConnector(FolderConfig(path=SHARED / "corpora" / name,
                                                 include=["*.md"], readers=["public"]))
        for batch in connector.load():
            for doc in batch:
                if doc.error:
                    continue
                record = DocumentRecord(
                    id=doc.external_id, source=name, external_id=doc.external_id,
                    title=doc.title, media_type=doc.media_type, content_hash="", version="",
                    index_signature="", readers=doc.readers, blob_key="", indexed_at="",
                    path=doc.path, tags=doc.tags, metadata=doc.metadata,
                    service=doc.metadata.get("service"))
                yield record, build_outline(document_text(doc), doc.media_type,
                                            title=doc.title, line_offset=doc.body_line_offset)


@pytest.fixture(scope="module")
def mined():
    return mine_documents(documents())


@pytest.mark.parametrize("terms", [
    ("EOC", "Engineer on Call"),
    ("IMOC", "Incident Manager on Call"),
    ("ILM", "Index Lifecycle Management"),
    ("kas", "Kubernetes Agent Server"),
    ("PITR", "Point-in-time recovery"),
    ("GDS", "Government Digital Service"),
    ("EKS", "Elastic Kubernetes Service"),
])
def test_known_definitions_are_mined(mined, terms):
    found = {tuple(t.lower() for t in e.terms): e for e in mined.entries}
    entry = found.get(tuple(t.lower() for t in terms))
    assert entry is not None, f"{terms} not mined; entries: {sorted(found)[:40]}"
    assert entry.sentence and entry.source.split(":")[0] in CORPORA
    assert entry.count >= 1


def test_nothing_mined_is_a_stop_word_a_number_or_twice_defined(mined):
    shorts = [e.terms[0].lower() for e in mined.entries]
    assert len(shorts) == len(set(shorts)), "a short name kept with two meanings"
    for e in mined.entries:
        for term in e.terms:
            assert term.lower() not in STOPWORDS and not term.isdigit(), e
            assert not any(c in term for c in "()[]<>|"), e
    assert len(mined.entries) >= 50
