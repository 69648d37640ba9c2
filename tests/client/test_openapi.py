"""The typed client checked against the server's OpenAPI document (``app.openapi()``), so the
two cannot drift apart unnoticed:

* every route the client calls (``routes.ROUTES``) exists with its method, needs the scope the
  client names in its messages, and documents the success status the client expects;
* every field the client sends is in the route's request body or query parameters (the server
  refuses unknown fields);
* every field its reply models read is in the route's response schema, nested models included,
  and is one the server promises to send (required there) unless the client has a default, and
  never null unless the client accepts None.

A route whose response schema names no fields (a bare ``dict``) cannot be checked yet: its test
is skipped with what went unchecked (``-ra`` lists it), and checks itself as soon as the route
declares a ``response_model``.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from citewise.api.app import create_app
from citewise.api.settings import Settings
from citewise_client.errors import BY_CODE, Refused
from citewise_client.routes import GROUPS_HEADER, ROUTES, USER_HEADER, Route

Schema = dict[str, Any]


@pytest.fixture(scope="module")
def openapi(tmp_path_factory) -> Schema:
    """The document as /openapi.json serves it (built without services, as tests/docs does)."""
    return create_app(Settings(data_dir=tmp_path_factory.mktemp("contract") / "data")).openapi()


def _resolve(doc: Schema, schema: Schema) -> Schema:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _options(doc: Schema, schema: Schema) -> list[Schema]:
    """The schemas a value may match, null left out (``X | None`` is ``anyOf [X, null]``)."""
    schema = _resolve(doc, schema)
    members = schema.get("anyOf") or schema.get("oneOf") or [schema]
    return [m for m in (_resolve(doc, m) for m in members) if m.get("type") != "null"]


def _nullable(doc: Schema, schema: Schema) -> bool:
    schema = _resolve(doc, schema)
    members = schema.get("anyOf") or schema.get("oneOf") or [schema]
    return any(_resolve(doc, m).get("type") == "null" for m in members)


def _accepts_none(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and \
        type(None) in get_args(annotation)


def _nested(doc: Schema, annotation: Any, schema: Schema, where: str
            ) -> Iterator[tuple[type[BaseModel] | None, Schema, str]]:
    """The models inside a field's type with the schema each meets: ``(None, {}, why)`` when
    the server's schema has no such shape (a list where the client expects an object)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            if arg is not type(None):
                yield from _nested(doc, arg, schema, where)
    elif origin is list:
        arrays = [o for o in _options(doc, schema) if o.get("type") == "array"]
        if not arrays:
            yield None, {}, f"{where}: the client reads a list, the schema has none"
        for array in arrays:
            yield from _nested(doc, get_args(annotation)[0], array.get("items", {}),
                               f"{where}[]")
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        objects = [o for o in _options(doc, schema) if o.get("type", "object") == "object"]
        if not objects:
            yield None, {}, f"{where}: the client reads an object, the schema has none"
        for found in objects:
            yield annotation, found, where


def _reply_mismatches(doc: Schema, model: type[BaseModel], schema: Schema, where: str,
                      unchecked: list[str]) -> list[str]:
    """What the client's ``model`` reads that ``schema`` does not promise."""
    schema = _resolve(doc, schema)
    properties = schema.get("properties")
    required = set(schema.get("required", []))
    if properties is None:
        values = schema.get("additionalProperties")
        if not isinstance(values, dict) or not values:
            unchecked.append(where)
            return []
        # A map (dict[str, X]): any key may be there, each value is an X.
        properties, required = {name: values for name in model.model_fields}, set()
    found = []
    for name, field in model.model_fields.items():
        key, at = field.alias or name, f"{where}.{field.alias or name}"
        if key not in properties:
            found.append(f"{at}: not in the schema, which has {sorted(properties)}")
            continue
        if field.is_required() and required and key not in required:
            found.append(f"{at}: required by the client, optional in the schema (give it "
                         "the server's default)")
        if _nullable(doc, properties[key]) and not _accepts_none(field.annotation):
            found.append(f"{at}: may be null in the schema, the client does not accept None")
        for inner, inner_schema, inner_at in _nested(doc, field.annotation, properties[key],
                                                     at):
            if inner is None:
                found.append(inner_at)
            else:
                found.extend(_reply_mismatches(doc, inner, inner_schema, inner_at, unchecked))
    return found


def _request_mismatches(doc: Schema, model: type[BaseModel], schema: Schema,
                        where: str) -> list[str]:
    """What the client's request ``model`` may send that ``schema`` does not take."""
    schema = _resolve(doc, schema)
    properties = schema.get("properties", {})
    found = []
    for name, field in model.model_fields.items():
        key, at = field.alias or name, f"{where}.{field.alias or name}"
        if key not in properties:
            found.append(f"{at}: not in the request schema, which has {sorted(properties)}")
            continue
        for inner, inner_schema, inner_at in _nested(doc, field.annotation, properties[key],
                                                     at):
            if inner is None:
                found.append(inner_at)
            else:
                found.extend(_request_mismatches(doc, inner, inner_schema, inner_at))
    return found


def _operation(openapi: Schema, route: Route[Any]) -> Schema:
    assert route.path in openapi["paths"], f"{route.path} is not in the OpenAPI document"
    operations = openapi["paths"][route.path]
    assert route.method.lower() in operations, \
        f"{route.path} has no {route.method} (it has {sorted(operations)})"
    return operations[route.method.lower()]


def _name(route: Route[Any]) -> str:
    return f"{route.method} {route.path}"


@pytest.mark.parametrize("route", ROUTES, ids=_name)
def test_the_route_exists_with_the_scope_and_status_the_client_expects(openapi, route):
    operation = _operation(openapi, route)
    assert operation.get("x-citewise-scope") == route.scope, _name(route)
    assert str(route.status) in operation["responses"], \
        f"{_name(route)} documents {sorted(operation['responses'])}, not {route.status}"


@pytest.mark.parametrize("route", ROUTES, ids=_name)
def test_every_field_the_client_sends_is_one_the_route_takes(openapi, route):
    operation = _operation(openapi, route)
    if route.body is not None:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        assert _request_mismatches(openapi, route.body, schema, route.body.__name__) == []
    else:
        assert "requestBody" not in operation or not operation["requestBody"].get("required")
    taken = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
    sent = set(route.query.model_fields) if route.query is not None else set()
    assert sent <= taken, f"{_name(route)}: query {sorted(sent - taken)} not taken"
    in_path = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
    assert in_path == set(_path_names(route.path))


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


@pytest.mark.parametrize("route", ROUTES, ids=_name)
def test_every_field_the_client_reads_is_in_the_response_schema(openapi, route):
    operation = _operation(openapi, route)
    content = operation["responses"][str(route.status)].get("content", {})
    schema = content.get("application/json", {}).get("schema", {})
    unchecked: list[str] = []
    mismatches = _reply_mismatches(openapi, route.reply, schema, route.reply.__name__,
                                   unchecked)
    assert mismatches == [], f"{_name(route)}:\n" + "\n".join(mismatches)
    if unchecked:
        pytest.skip(f"{_name(route)}: the response schema names no fields for "
                    f"{', '.join(unchecked)}, so what the client reads there is unchecked "
                    "until the route declares a response_model")


def test_the_check_finds_a_field_the_schema_lacks(openapi):
    """The check itself: a reply model that reads a field the server never sends fails it."""
    from citewise_client.models import SearchHit, SearchResponse

    class Misread(SearchHit):
        page_rank: float

    class MisreadResponse(SearchResponse):
        results: list[Misread]

    schema = _operation(openapi, ROUTES[0])["responses"]["200"]["content"][
        "application/json"]["schema"]
    found = _reply_mismatches(openapi, MisreadResponse, schema, "MisreadResponse", [])
    assert len(found) == 1 and found[0].startswith("MisreadResponse.results[].page_rank: not")


def test_the_identity_headers_are_the_servers():
    from citewise.api.identity.authenticate import GROUPS_HEADER as SERVER_GROUPS
    from citewise.api.identity.authenticate import USER_HEADER as SERVER_USER

    assert (USER_HEADER.lower(), GROUPS_HEADER.lower()) == (SERVER_USER, SERVER_GROUPS)


def test_every_error_type_the_client_knows_is_one_the_server_sends():
    """The client classes errors by the code in the problem's type URN: each code it knows is
    a ``code`` of the server's errors, with a status the client's class stands for."""
    import citewise.api.app  # noqa: F401  (the API's own errors: rate_limited, ...)
    from citewise.errors import CitewiseError

    def every(cls: type[CitewiseError]) -> Iterator[type[CitewiseError]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from every(sub)

    server = {cls.code: cls.status_code for cls in [CitewiseError, *every(CitewiseError)]}
    assert set(BY_CODE) <= set(server), sorted(set(BY_CODE) - set(server))
    for code, kind in BY_CODE.items():
        statuses = _statuses(kind)
        assert not statuses or server[code] in statuses, (code, server[code], kind.__name__)


def _statuses(kind: type[Refused]) -> tuple[int, ...]:
    for cls in kind.__mro__:
        if vars(cls).get("statuses"):
            return vars(cls)["statuses"]
    return ()
