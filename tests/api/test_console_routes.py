"""The console's routes (``/v1/admin/...``) against real stores: the figures they give are the
ones recorded (runs ingested for real, usage seeded by ``tests/console_data.py``)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.ingest.jobs import run_source
from citewise.settings import SourceConfig
from tests.kb import folder_source, make_key


@pytest.fixture
def services(make_services, kb, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "small.md").write_text("# Small\n\nA page that fits.\n")
    (broken / "huge.md").write_text("# Huge\n\n" + "word " * 400 + "\n")
    sources = [folder_source(kb),
               SourceConfig(name="broken", type="folder", path=str(broken), readers=["public"],
                            max_file_bytes=1000, schedule="0 3 * * *")]
    s = make_services(require_auth=True, sources=sources, schedule_ingest="0 * * * *",
                      rate_answer_per_minute=0, rate_search_per_minute=0)
    for source in sources:
        run_source(s.pipeline, source, trigger="t")
    run_source(s.pipeline, sources[0], trigger="t")  # a second run: history of two
    return s


def test_sources_show_runs_failures_and_schedule(services):
    admin = make_key(services, "console-admin", "admin")
    with TestClient(create_app(services=services)) as client:
        got = client.get("/v1/admin/sources", headers=admin)
        assert got.status_code == 200, got.text
        by_name = {s["name"]: s for s in got.json()["sources"]}
        audit = client.app.state.door.audit.read(None, 10, "console.sources.read")
    kb, broken = by_name["kb"], by_name["broken"]
    assert kb["kind"] == "folder" and kb["readers"] == ["public"]
    assert kb["schedule"] == "0 * * * *" and broken["schedule"] == "0 3 * * *"
    expected = services.catalog.source_counts(None)
    assert (kb["documents"], kb["chunks"]) == expected["kb"] and kb["documents"] > 0
    assert len(kb["history"]) == 2 and kb["history"][-1] == kb["last_run"]
    assert kb["history"][0]["run_id"] < kb["history"][1]["run_id"]
    assert kb["last_run"]["added"] == 0 and kb["history"][0]["added"] == kb["documents"]
    assert kb["failed_documents"] == [] and kb["last_success_at"]
    assert broken["last_run"]["status"] == "partial" and broken["last_run"]["failed"] == 1
    assert broken["documents"] == 1
    [failed] = broken["failed_documents"]
    assert failed["uri"] == "huge.md" and "over the limit" in failed["error"]
    assert "max_file_bytes" in failed["hint"]
    assert broken["last_run"]["duration_s"] >= 0
    assert audit and audit[0]["actor"] == "key:console-admin"
