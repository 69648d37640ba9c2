"""docs/http-api.md names every field of the request bodies it documents: a field that the
OpenAPI document has and the page does not (``name`` of an ingest job, once) is one a reader of
the docs never learns of."""

from __future__ import annotations

from pathlib import Path

import pytest

from citewise.api.app import create_app
from citewise.api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# Each route and the heading of the page's section that documents it.
ROUTES = [("post", "/v1/ingest/jobs", "Ingest jobs"), ("post", "/v1/answer", "Answers"),
          ("post", "/v1/search", "Search")]


@pytest.fixture(scope="module")
def openapi(tmp_path_factory) -> dict:
    return create_app(Settings(data_dir=tmp_path_factory.mktemp("ref") / "data")).openapi()


def _fields(openapi: dict, method: str, path: str) -> set[str]:
    body = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]
    schema = body["schema"]
    if "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return set(schema.get("properties", {}))


def _section(page: str, heading: str) -> str:
    """The part of the page under ``## heading`` (its ``###`` subsections included)."""
    return next(s for s in page.split("\n## ") if s.startswith(heading + "\n"))


@pytest.mark.parametrize(("method", "path", "heading"), ROUTES)
def test_every_request_field_is_in_the_http_api_page(openapi, method, path, heading):
    section = _section((ROOT / "docs" / "http-api.md").read_text(), heading)
    missing = sorted(f for f in _fields(openapi, method, path) if f"`{f}`" not in section
                     and f'"{f}"' not in section)
    assert not missing, f"{method.upper()} {path}: {missing} not in docs/http-api.md"
