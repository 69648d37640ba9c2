"""Every admin operation is closed to everyone but admins: a key without the ``admin`` scope
gets 403 and no caller at all 401, both as problem documents. The operations are read from the
app's own OpenAPI document (every one tagged ``admin``), so a new admin route is covered the
moment it exists; a route that forgot its tag is caught by the second test, which lists the
paths the front door's admin rule covers."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.frontdoor import rule_for
from citewise.api.settings import Settings
from tests.kb import make_key


def _admin_operations() -> list[tuple[str, str]]:
    # Collected before any fixture runs: an app is only built, never started, for its document.
    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp(prefix="admin-scope-")) / "data"))
    return sorted((method.upper(), path) for path, ops in app.openapi()["paths"].items()
                  for method, op in ops.items() if "admin" in op.get("tags", []))


OPERATIONS = _admin_operations()


def _concrete(path: str) -> str:
    """The path with each parameter filled: the front door refuses before any route reads it."""
    return re.sub(r"\{[^}]+\}", "1", path)


@pytest.fixture(scope="module")
def served(tmp_path_factory, dense):
    from citewise.api.composition import build_services

    services = build_services(Settings(data_dir=tmp_path_factory.mktemp("scope") / "data",
                                       require_auth=True))
    plain = make_key(services, "scope-plain", "search,answer,ingest")
    with TestClient(create_app(services=services)) as client:
        yield client, plain
    services.close()


def test_the_admin_operations_include_the_console_and_the_older_ones():
    paths = {p for _, p in OPERATIONS}
    assert {"/v1/keys", "/v1/keys/{name}", "/v1/usage", "/v1/audit", "/v1/admin/reload",
            "/v1/admin/sources"} <= paths


def test_every_path_under_the_admin_rule_is_tagged_admin():
    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp(prefix="admin-tag-")) / "data"))
    for path, ops in app.openapi()["paths"].items():
        for method, op in ops.items():
            rule = rule_for(method.upper(), path)
            if rule is not None and rule.scope == "admin" and path.startswith("/v1/"):
                assert "admin" in op.get("tags", []), f"{method.upper()} {path} is not tagged"


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_a_non_admin_key_gets_403_and_no_caller_401(served, method, path):
    client, plain = served
    url = _concrete(path)
    refused = client.request(method, url, headers=plain)
    assert refused.status_code == 403, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "'admin' scope" in refused.json()["detail"]
    anonymous = client.request(method, url)
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.headers["content-type"].startswith("application/problem+json")
