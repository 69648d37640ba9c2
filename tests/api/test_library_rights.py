"""What the library shows a caller: a source they may read nothing of is not listed to them by
name (``security-incidents`` says what the organisation keeps), on every door that lists them;
admins see every source."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.ingest.jobs import run_source
from tests.kb import folder_source, make_key, write, write_kb

LOOPBACK = ("127.0.0.1", 5000)


@pytest.fixture
def client(tmp_path, dense):
    kb = write_kb(tmp_path / "kb")
    incidents = write(tmp_path / "incidents", "2026-11-30-card-leak.md",
                      "# Card numbers in the checkout logs\n\nWe purged the log index.\n").parent
    services = build_services(Settings(data_dir=tmp_path / "data"))
    for source in (folder_source(kb), folder_source(incidents, "security-incidents",
                                                    readers=("group:security",))):
        assert run_source(services.pipeline, source, trigger="t").status == "succeeded"
    try:
        with TestClient(create_app(services=services), client=LOOPBACK) as c:
            yield c
    finally:
        services.close()


def names(c: TestClient, headers: dict) -> set[str]:
    resp = c.get("/v1/sources", headers=headers)
    assert resp.status_code == 200, resp.text
    return {s["name"] for s in resp.json()["sources"]}


def test_a_source_you_may_read_nothing_of_is_not_listed(client):
    services = client.app.state.services
    reader = make_key(services, "reader", scopes="search")
    assert names(client, reader) == {"kb"}
    assert "security-incidents" not in client.get("/v1/sources", headers=reader).text
    member = make_key(services, "member", scopes="search", principal="group:security")
    assert names(client, member) == {"kb", "security-incidents"}
    admin = make_key(services, "admin", scopes="search,admin")
    assert names(client, admin) == {"kb", "security-incidents"}
