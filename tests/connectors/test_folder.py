from __future__ import annotations

import pytest

from citewise.connectors.folder import FolderConfig, FolderConnector
from citewise.errors import SourceError
from tests.kb import write


def test_lists_exactly_what_it_loads(kb):
    write(kb, "node_modules/pkg/readme.md", "# vendored\n")
    write(kb, ".git/notes.md", "# hidden\n")
    write(kb, "images/diagram.png", "not text")
    connector = FolderConnector(FolderConfig(path=kb, readers=["public"]))
    listed = list(connector.list_ids())
    loaded = [d.external_id for batch in connector.load(batch_size=2) for d in batch]
    assert listed == loaded
    assert "node_modules/pkg/readme.md" not in listed
    assert ".git/notes.md" not in listed
    assert len(listed) == 5


def test_front_matter_becomes_metadata(kb):
    connector = FolderConnector(FolderConfig(path=kb, readers=["public"]))
    doc = connector.read("runbooks/redis-failover.md")
    assert doc.error is None
    assert doc.title == "Redis cache failover"
    assert doc.tags == ["redis", "failover"]
    assert doc.metadata == {"service": "redis-cache", "owner": "team-platform",
                            "severity": "high", "alerts": ["RedisPrimaryDown"]}
    assert doc.body.startswith("# Redis cache failover")
    assert doc.body_line_offset == 8
    assert doc.readers == ["public"]


def test_document_readers_replace_source_readers(kb):
    connector = FolderConnector(FolderConfig(path=kb, readers=["group:eng"]))
    assert connector.read("runbooks/secrets/rotate-payment-keys.md").readers == [
        "group:security"
    ]
    assert connector.read("wiki/holiday-swaps.txt").readers == ["group:eng"]


def test_titles_from_html_and_filenames(kb):
    connector = FolderConnector(FolderConfig(path=kb, readers=["public"]))
    assert connector.read("wiki/onboarding.html").title == "Onboarding for new engineers"
    assert connector.read("wiki/holiday-swaps.txt").title == "Holiday swaps"


def test_bad_reader_names_are_document_errors(kb):
    write(kb, "bad.md", "---\nreaders: [team:sre]\n---\n# x\n")
    doc = FolderConnector(FolderConfig(path=kb, readers=["public"])).read("bad.md")
    assert "unknown kind" in doc.error


def test_oversized_file_is_reported_not_read(kb):
    write(kb, "big.md", "# big\n" + "word " * 5000)
    config = FolderConfig(path=kb, readers=["public"], max_file_bytes=1000)
    doc = FolderConnector(config).read("big.md")
    assert "over the limit" in doc.error


def test_missing_folder_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        list(FolderConnector(FolderConfig(path=tmp_path / "nope", readers=["public"])).list_ids())


def test_unknown_options_are_rejected():
    with pytest.raises(SourceError, match="unknown setting"):
        FolderConnector.from_options({"path": "/x", "recursive": True}, ["public"])
