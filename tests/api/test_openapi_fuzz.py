"""Schemathesis over the OpenAPI document: generated requests, valid and not, against every
route, as an admin key holder and as nobody. No 5xx, no status the document does not list,
no content type it does not promise, and bodies that match their schemas.

Generated in-process (``schemathesis.openapi.from_asgi``) against the real app over a small
knowledge base; about 25 examples per operation keep it to a minute or two.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from citewise.api.app import create_app
from citewise.ingest.jobs import run_source
from tests.kb import folder_source, make_key, write_kb

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.fixture(scope="module")
def api(tmp_path_factory, dense):
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings

    base = tmp_path_factory.mktemp("fuzz")
    services = build_services(Settings(data_dir=base / "data", require_auth=True,
                                       rate_search_per_minute=0, rate_answer_per_minute=0,
                                       rate_ingest_per_minute=0))
    run_source(services.pipeline, folder_source(write_kb(base / "kb")), trigger="t")
    admin = make_key(services, "fuzz-admin", "search,answer,ingest,admin")
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(services=services)), admin
    services.close()


def _operations(schema):
    out = []
    for result in schema.get_all_operations():
        out.append(result.ok())
    return out


def _fuzz(operation, examples: int, check) -> None:
    # (schemathesis' pytest plugin predates pytest 9; hypothesis drives its strategies here.)
    @given(case=operation.as_strategy())
    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    def run(case):
        check(case)

    run()


def test_every_route_keeps_its_documented_promises(api):
    schema, admin = api
    operations = _operations(schema)
    assert len(operations) >= 27  # every operation of the document, none skipped
    for operation in operations:
        _fuzz(operation, 25, lambda case: case.call_and_validate(headers=admin, checks=CHECKS))


def test_without_a_key_the_answers_are_documented_refusals(api):
    schema, _ = api

    def check(case):
        response = case.call_and_validate(checks=CHECKS)
        if case.path.startswith("/v1/"):
            assert response.status_code in (400, 401, 404, 413, 422), response.text

    for operation in _operations(schema):
        _fuzz(operation, 5, check)
