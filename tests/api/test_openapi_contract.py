"""The OpenAPI document describes every answer of every route: a schema for each success
response (a route that returns a bare ``dict`` fails here), problem details for each error
status, the front door's refusals where its rules apply, and no route of the app left out of
it but those that serve the page's and the reference's files."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from citewise.api.app import create_app
from citewise.api.frontdoor import rule_for
from citewise.api.settings import Settings

PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
# Routes that serve files (the web page, the API reference), not the API.
FILE_ROUTES = {"/", "/ui/{name}", "/docs", "/docs/assets/{name}"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return create_app(Settings(data_dir=tmp_path_factory.mktemp("contract") / "data"))


@pytest.fixture(scope="module")
def openapi(app) -> dict:
    return app.openapi()


def _operations(openapi: dict):
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            yield method.upper(), path, operation


def _untyped(openapi: dict, schema: dict) -> str | None:
    """Why ``schema`` says nothing of a body's shape, or None when it does: a JSON object
    needs its properties (a bare ``dict`` return has none). Maps inside a described body (a
    document's metadata, a key's limits) may be open."""
    if "$ref" in schema:
        return _untyped(openapi, openapi["components"]["schemas"][schema["$ref"].rsplit("/")[-1]])
    if not schema:
        return "no schema"
    if schema.get("type", "object") == "object" and not schema.get("properties"):
        return f"an object without properties ({schema.get('title', 'untitled')})"
    return None


def test_every_success_response_has_a_schema(openapi):
    untyped = []
    for method, path, operation in _operations(openapi):
        successes = {s: r for s, r in operation["responses"].items() if s.startswith("2")}
        assert successes, f"{method} {path} declares no success status"
        for status, response in successes.items():
            content = response.get("content")
            if status == "204":
                assert not content, f"{method} {path}: a 204 has no body"
                continue
            if not content:
                untyped.append(f"{method} {path} {status}: no content")
                continue
            for media_type, body in content.items():
                why = _untyped(openapi, body.get("schema") or {})
                if why:
                    untyped.append(f"{method} {path} {status} {media_type}: {why}")
    assert not untyped, "responses without a schema (give the route a response_model):\n" + \
        "\n".join(untyped)


def test_every_error_response_is_a_problem_document(openapi):
    for method, path, operation in _operations(openapi):
        errors = {s: r for s, r in operation["responses"].items() if not s.startswith("2")}
        for status in ("400", "413", "422", "503"):  # the front door and the body limit
            assert status in errors, f"{method} {path} lacks {status}"
        for status, response in errors.items():
            assert response.get("content") == PROBLEM, f"{method} {path} {status}"
            assert response.get("description"), f"{method} {path} {status}: say when"
    assert "Problem" in openapi["components"]["schemas"]


def test_the_front_doors_refusals_are_declared_where_its_rules_apply(openapi):
    for method, path, operation in _operations(openapi):
        rule = rule_for(method, path)
        declared = set(operation["responses"])
        if rule is None:  # public: /healthz answers anyone
            assert not declared & {"401", "403", "429"}, f"{method} {path}"
            continue
        assert {"401", "403"} <= declared, f"{method} {path}"
        assert ("429" in declared) == bool(rule.rate_class), f"{method} {path}"


def test_a_route_declares_the_problems_it_raises_itself(openapi):
    responses = {(m, p): set(o["responses"]) for m, p, o in _operations(openapi)}
    assert "404" in responses[("GET", "/v1/ingest/jobs/{job_id}")]
    assert {"404", "409"} <= responses[("POST", "/v1/answer")]
    assert "409" in responses[("POST", "/v1/keys")]
    assert "404" not in responses[("POST", "/v1/search")]  # no longer listed everywhere
    answer_403 = openapi["paths"]["/v1/answer"]["post"]["responses"]["403"]["description"]
    assert "guardrail" in answer_403  # the route's description, not the door's
    golden = ("POST", "/v1/admin/feedback/{feedback_id}/golden")
    assert {"201", "404", "422"} <= responses[golden]
    assert "404" in responses[("POST", "/v1/admin/feedback/{feedback_id}/dismiss")]


def test_the_consoles_routes_are_typed_admin_operations(openapi):
    """What the console page is built against: each route under /v1/admin/ is tagged admin,
    needs the admin scope, and answers its own named schema."""
    console = {("GET", "/v1/admin/sources"): "SourceStatusList",
               ("GET", "/v1/admin/usage"): "UsageDashboard",
               ("GET", "/v1/admin/models"): "ModelsView",
               ("GET", "/v1/admin/feedback"): "FeedbackTriage",
               ("POST", "/v1/admin/feedback/{feedback_id}/golden"): "GoldenAdded",
               ("POST", "/v1/admin/feedback/{feedback_id}/dismiss"): "Dismissed"}
    for (method, path), schema in console.items():
        operation = openapi["paths"][path][method.lower()]
        assert operation["tags"] == ["admin"], path
        assert rule_for(method, path).scope == "admin", path
        success = next(r for s, r in operation["responses"].items() if s.startswith("2"))
        assert success["content"]["application/json"]["schema"]["$ref"].endswith(
            "/" + schema), path
    usage = openapi["components"]["schemas"]["UsageDashboard"]["properties"]
    assert usage["window"]["enum"] == ["24h", "7d", "30d"]


def test_no_route_of_the_app_is_left_out_of_the_document(app, openapi):
    left_out = sorted(r.path for r in app.routes if isinstance(r, APIRoute)
                      and r.path not in openapi["paths"] and r.path not in FILE_ROUTES)
    assert not left_out, f"routes missing from the OpenAPI document: {left_out}"
