"""The HTTP API over real services: a real catalog, the real model, embedded Qdrant.

One knowledge base (the same files as ``tests/conftest.py::kb``) is ingested once for the
module and served through FastAPI's TestClient; tests that ingest over HTTP or need other
settings build their own services with ``make_services``.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.composition import Services, build_services
from citewise.api.settings import Settings
from citewise.ingest.jobs import run_source
from tests.kb import (
    ALL_PATHS,
    ONBOARDING,
    POSTGRES,
    REDIS,
    SECRET,
    SECRET_TITLE,
    SECRET_WORDS,
    folder_source,
    make_key,
    write,
    write_kb,
)

LOOPBACK = ("127.0.0.1", 50000)
PROBLEM = "application/problem+json"
SECURITY = {"X-Citewise-Groups": "security"}
BOB = {"X-Citewise-User": "bob"}
HIT_FIELDS = {"document_id": str, "source": str, "path": str, "title": str, "heading": str,
              "text": str, "score": float}


# Fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def services(tmp_path_factory, dense) -> Iterator[Services]:
    """Services over a data folder holding the knowledge base, ingested once as source "kb"."""
    base = tmp_path_factory.mktemp("http")
    kb = write_kb(base / "kb")
    built = build_services(Settings(data_dir=base / "data"))
    report = run_source(
        built.pipeline, folder_source(kb), trigger="test"
    )
    assert report.status == "succeeded", report.summary()
    assert report.counts.added == len(ALL_PATHS)
    yield built
    built.close()


@pytest.fixture(scope="module")
def client(services) -> Iterator[TestClient]:
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        yield c


@pytest.fixture(scope="module")
def secret_id(client) -> str:
    """The restricted runbook's document id, as a member of group:security sees it."""
    hits = client.post(
        "/v1/search", json={"query": SECRET_TITLE, "top_k": 3}, headers=SECURITY
    ).json()["results"]
    assert hits and hits[0]["path"] == SECRET
    return hits[0]["document_id"]


def as_operator(client: TestClient) -> dict:
    """The header the operator's own CLI sends (its token comes from server.json)."""
    return {"X-Citewise-Operator": client.app.state.operator_token}


def search(client: TestClient, query: str, headers: dict | None = None, **body) -> list[dict]:
    resp = client.post("/v1/search", json={"query": query, **body}, headers=headers or {})
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


def answer(client: TestClient, question: str, headers: dict | None = None) -> dict:
    resp = client.post("/v1/answer", json={"question": question}, headers=headers or {})
    assert resp.status_code == 200, resp.text
    return resp.json()


def assert_problem(resp, status: int) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = resp.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:citewise:error:")
    assert body["title"] and body["detail"]
    return body


def wait_for_job(client: TestClient, job_id: str, until=("done", "failed"), timeout=120.0,
                 headers: dict | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        resp = client.get(f"/v1/ingest/jobs/{job_id}", headers=headers or {})
        assert resp.status_code == 200, resp.text
        job = resp.json()
        if job["status"] in until:
            return job
        assert time.monotonic() < deadline, f"job {job_id} stuck: {job}"
        time.sleep(0.05)


# Search ------------------------------------------------------------------------------------


def test_post_search_returns_located_passages(client):
    hits = search(client, "redis failover", top_k=5)
    assert hits
    for hit in hits:
        for name, kind in HIT_FIELDS.items():
            assert isinstance(hit[name], kind), (name, hit)
        assert hit["source"] == "kb"
        assert hit["path"] in ALL_PATHS  # relative to the source root, never absolute
        assert hit["text"].strip()
    top = hits[0]
    assert top["path"] == REDIS
    assert top["title"] == "Redis cache failover"
    assert top["service"] == "redis-cache"
    assert set(top["tags"]) == {"redis", "failover"}
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    # The Mitigation section is found with its heading.
    assert any(h["path"] == REDIS and h["heading"] == "Mitigation" for h in hits)


def test_get_search_answers_like_post(client):
    resp = client.get("/v1/search", params={"q": "disk full", "top_k": 4})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["query"] == "disk full"
    assert body["took_ms"] >= 0
    got = [h["chunk_id"] for h in body["results"]]
    assert got == [h["chunk_id"] for h in search(client, "disk full", top_k=4)]
    assert body["results"][0]["path"] == POSTGRES


@pytest.mark.parametrize("top_k", [1, 3])
def test_top_k_is_respected(client, top_k):
    assert len(search(client, "on-call", top_k=top_k)) == top_k
    resp = client.get("/v1/search", params={"q": "on-call", "top_k": top_k})
    assert len(resp.json()["results"]) == top_k


def test_source_filter(client):
    assert search(client, "redis failover", filters={"sources": ["kb"]})
    assert search(client, "redis failover", filters={"sources": ["some-other-source"]}) == []
    resp = client.get("/v1/search", params={"q": "redis failover", "source": "nope"})
    assert resp.json()["results"] == []


def test_path_prefix_filter(client):
    # Unfiltered, the onboarding page is the best match; under runbooks/ it cannot be.
    assert search(client, "onboarding access requests")[0]["path"] == ONBOARDING
    hits = search(client, "onboarding access requests", filters={"path_prefix": "runbooks"})
    assert hits
    assert all(h["path"].startswith("runbooks/") for h in hits)
    assert {h["path"] for h in hits} == {REDIS, POSTGRES}  # never the restricted one
    wiki = client.get("/v1/search", params={"q": "redis", "path_prefix": "wiki"}).json()
    assert wiki["results"] and all(h["path"].startswith("wiki/") for h in wiki["results"])


def test_tag_filter(client):
    hits = search(client, "redis failover", filters={"tags": ["postgres"]})
    assert hits and {h["path"] for h in hits} == {POSTGRES}
    assert all("postgres" in h["tags"] for h in hits)
    got = client.get("/v1/search", params=[("q", "what fires"), ("tag", "redis"),
                                           ("tag", "disk")]).json()["results"]
    assert {h["path"] for h in got} == {REDIS, POSTGRES}


def test_service_filter(client):
    hits = search(client, "disk full", filters={"services": ["redis-cache"]})
    assert hits and {h["path"] for h in hits} == {REDIS}
    assert all(h["service"] == "redis-cache" for h in hits)
    got = client.get("/v1/search", params={"q": "disk full", "service": "postgres-main"})
    assert {h["path"] for h in got.json()["results"]} == {POSTGRES}


# Permissions -------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, BOB, {"X-Citewise-User": "bob",
                                                "X-Citewise-Groups": "sre,platform"}],
                         ids=["anonymous", "bob", "bob-other-groups"])
def test_restricted_runbook_is_invisible_without_the_group(client, secret_id, headers):
    for query in (SECRET_TITLE, "payment provider keys vault rotation ninety days"):
        hits = search(client, query, headers, top_k=100)
        assert hits  # public passages still come back
        assert secret_id not in {h["document_id"] for h in hits}
        assert SECRET not in {h["path"] for h in hits}
        assert SECRET_TITLE not in {h["title"] for h in hits}
        # Filters cannot be used to reach it either.
        assert search(client, query, headers, filters={"path_prefix": "runbooks/secrets"}) == []
        assert search(client, query, headers, filters={"tags": ["secrets"]}) == []

    result = answer(client, "How do we rotate the payment provider API keys?", headers)
    assert secret_id not in {c["document_id"] for c in result["citations"]}
    assert SECRET not in {c["path"] for c in result["citations"]}
    for word in SECRET_WORDS:
        assert word not in result["answer"]
        assert all(word not in c["quote"] for c in result["citations"])

    missing = "0" * len(secret_id)
    hidden = assert_problem(client.get(f"/v1/documents/{secret_id}", headers=headers), 404)
    absent = assert_problem(client.get(f"/v1/documents/{missing}", headers=headers), 404)
    # A restricted document looks exactly like one that does not exist.
    assert hidden["detail"].replace(secret_id, "ID") == absent["detail"].replace(missing, "ID")
    assert not any(w in hidden["detail"] for w in (SECRET_TITLE, SECRET))


def test_restricted_runbook_is_visible_to_its_group(client, secret_id):
    hits = search(client, SECRET_TITLE, SECURITY)
    assert hits[0]["document_id"] == secret_id
    assert hits[0]["title"] == SECRET_TITLE
    # Several groups, with spaces, in one header.
    hits = search(client, SECRET_TITLE, {"X-Citewise-User": "bob",
                                         "X-Citewise-Groups": "sre, security"})
    assert hits[0]["document_id"] == secret_id

    result = answer(client, "How do we rotate the payment provider API keys?", SECURITY)
    assert not result["abstained"]
    assert secret_id in {c["document_id"] for c in result["citations"]}
    assert "ninety days" in result["answer"]

    doc = client.get(f"/v1/documents/{secret_id}", headers=SECURITY)
    assert doc.status_code == 200, doc.text
    assert doc.json()["path"] == SECRET
    assert doc.json()["readers"] == ["group:security"]


# Answers -----------------------------------------------------------------------------------


def test_answer_cites_its_sources(client):
    result = answer(client, "How do I fail over the Redis cache?")
    assert result["abstained"] is False
    assert result["mode"] == "extractive"
    assert result["took_ms"] >= 0
    assert "[1]" in result["answer"]
    citations = result["citations"]
    numbers = [c["n"] for c in citations]
    assert numbers == list(range(1, len(citations) + 1))
    markers = {int(n) for n in re.findall(r"\[(\d+)\]", result["answer"])}
    assert markers and markers <= set(numbers)
    for c in citations:
        assert c["document_id"] and c["title"] and c["path"] and c["quote"].strip()
        assert isinstance(c["heading"], str)
        assert c["source"] == "kb"
    assert {c["path"] for c in citations} == {REDIS}
    assert {c["title"] for c in citations} == {"Redis cache failover"}
    # The quoted passages are the answer's own words.
    for c in citations:
        for line in c["quote"].splitlines():
            assert line.strip() in result["answer"]


@pytest.mark.parametrize("question", [
    "What is the best way to bake sourdough bread at home?",
    "How long should I knead bread dough before baking it?",
])
def test_unrelated_question_abstains(client, question):
    result = answer(client, question)
    assert result["abstained"] is True
    assert result["citations"] == []
    assert not re.search(r"\[\d+\]", result["answer"])
    assert result["answer"]  # says it found nothing rather than being empty


# Validation and errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/search", {}, "query"),
        ("/v1/search", {"top_k": 5}, "query"),
        ("/v1/search", {"query": ""}, "query"),
        ("/v1/search", {"query": "redis", "top_k": 0}, "top_k"),
        ("/v1/search", {"query": "redis", "top_k": 500}, "top_k"),
        ("/v1/search", {"query": "redis", "top_k": "many"}, "top_k"),
        ("/v1/search", {"query": "redis", "unknown_field": 1}, "unknown_field"),
        ("/v1/search", {"query": "redis", "filters": {"folder": "x"}}, "filters.folder"),
        ("/v1/search", {"query": "redis", "mode": "fuzzy"}, "mode"),
        ("/v1/search", {"query": ["redis"]}, "query"),
        ("/v1/search", ["redis"], "body"),
        ("/v1/answer", {}, "question"),
        ("/v1/answer", {"question": "x", "top_k": 3}, "top_k"),
    ],
)
def test_invalid_requests_are_422_problems_naming_the_field(client, path, body, field):
    problem = assert_problem(client.post(path, json=body), 422)
    assert problem["type"] == "urn:citewise:error:invalid_request"
    assert field in problem["detail"]
    assert field in {e["field"] for e in problem["errors"]}
    assert problem["hint"]


@pytest.mark.parametrize("params", [{}, {"q": ""}, {"q": "x", "top_k": 0},
                                    {"q": "x", "top_k": 101}])
def test_invalid_query_strings_are_422_problems(client, params):
    problem = assert_problem(client.get("/v1/search", params=params), 422)
    name = "top_k" if "top_k" in params else "q"
    assert any(e["field"].split(".")[-1] == name for e in problem["errors"])


def test_malformed_json_is_a_422_problem(client):
    resp = client.post("/v1/search", content=b'{"query": "redis",',
                       headers={"content-type": "application/json"})
    problem = assert_problem(resp, 422)
    assert problem["type"] == "urn:citewise:error:invalid_request"
    assert "JSON" in problem["detail"]


def test_unknown_route_and_method(client):
    problem = assert_problem(client.get("/v1/nothing-here"), 404)
    assert "/v1/nothing-here" in problem["detail"]
    assert problem["hint"]
    assert_problem(client.delete("/v1/search"), 405)


# Library -----------------------------------------------------------------------------------


def test_document_with_chunks(client):
    doc_id = search(client, "redis failover")[0]["document_id"]
    resp = client.get(f"/v1/documents/{doc_id}")
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["id"] == doc_id
    assert (doc["source"], doc["path"], doc["external_id"]) == ("kb", REDIS, REDIS)
    assert doc["title"] == "Redis cache failover"
    assert doc["media_type"] == "text/markdown"
    assert doc["readers"] == ["public"]
    assert doc["service"] == "redis-cache"
    assert doc["metadata"]["owner"] == "team-platform"
    assert "content" not in doc
    chunks = doc["chunks"]
    assert [c["ordinal"] for c in chunks] == list(range(len(chunks)))
    assert {"Diagnosis", "Mitigation"} <= {c["heading"] for c in chunks}
    text = " ".join(c["text"] for c in chunks)
    assert "RedisPrimaryDown" in text and "Promote the replica" in text
    lines = [c["start_line"] for c in chunks]
    assert lines == sorted(lines)

    full = client.get(f"/v1/documents/{doc_id}", params={"include_content": "true"}).json()
    assert "redis-cli -p 26379" in full["content"]


def test_sources_lists_kb(client):
    resp = client.get("/v1/sources", headers=SECURITY)
    assert resp.status_code == 200, resp.text
    (kb,) = [s for s in resp.json()["sources"] if s["name"] == "kb"]
    assert kb["type"] == "folder"
    assert kb["declared"] is False
    assert kb["documents"] == len(ALL_PATHS)
    # Callers who cannot read the restricted runbook do not learn that it exists.
    (public_view,) = [s for s in client.get("/v1/sources").json()["sources"]
                      if s["name"] == "kb"]
    assert public_view["documents"] == len(ALL_PATHS) - 1
    assert kb["chunks"] >= len(ALL_PATHS)
    assert kb["last_success_at"]
    assert kb["last_run"]["status"] == "succeeded"
    assert kb["last_run"]["added"] == len(ALL_PATHS)


# Operations --------------------------------------------------------------------------------


def test_healthz(client):
    resp = client.get("/healthz")
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "ok"
    assert body["index"] == "embedded"
    assert body["answers"] == "extractive"
    assert body["documents"] == len(ALL_PATHS)
    assert body["chunks"] >= len(ALL_PATHS)
    assert body["points"] == body["chunks"]


def test_metrics_count_requests(client):
    client.get("/v1/search", params={"q": "metrics probe"})
    client.get("/v1/documents/not-a-document-id")
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    assert "citewise_http_requests_total" in text
    assert re.search(r'citewise_http_requests_total\{method="GET",route="/v1/search",'
                     r'status="200"\} [1-9]', text), text
    # Labelled by route template, not by the concrete URL (bounded label values).
    assert 'route="/v1/documents/{document_id}",status="404"' in text
    assert "not-a-document-id" not in text


def test_openapi_describes_the_api(client):
    spec = client.get("/openapi.json").json()
    assert {"get", "post"} <= set(spec["paths"]["/v1/search"])
    assert "post" in spec["paths"]["/v1/answer"]
    assert "/v1/ingest/jobs" in spec["paths"]
    assert client.get("/docs").status_code == 200


def test_openapi_says_how_to_authenticate_and_which_scope(client):
    """The reference's Authorize button and generated clients need the schemes; which
    operations need which scope comes from the front door's rules."""
    spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "http", "scheme": "bearer"}
    assert schemes["cloudflareAccess"]["name"] == "Cf-Access-Jwt-Assertion"
    search = spec["paths"]["/v1/search"]["post"]
    assert search["security"] == [{"apiKey": []}, {"cloudflareAccess": []}]
    assert search["x-citewise-scope"] == "search"
    assert search["description"].endswith("Needs the `search` scope.")
    assert spec["paths"]["/v1/ingest/jobs"]["post"]["x-citewise-scope"] == "ingest"
    assert spec["paths"]["/v1/keys"]["get"]["x-citewise-scope"] == "admin"
    assert spec["paths"]["/v1/admin/reload"]["post"]["x-citewise-scope"] == "admin"
    # Liveness is public: no credential asked for.
    assert "security" not in spec["paths"]["/healthz"]["get"]


def test_the_api_reference_loads_nothing_from_elsewhere(client):
    """/docs is Swagger UI from a package's files, served here: a CDN is out of reach on the
    networks citewise runs on (tests/web/test_page.py renders it in a browser, offline)."""
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/docs/assets/") for s in sources), sources
    assert "http://" not in page.text and "https://" not in page.text
    assert 'data-openapi-url="/openapi.json"' in page.text
    # A strict policy: script from this server only, so no inline script may be on the page
    # (FastAPI's own page starts Swagger UI with one, which would need 'unsafe-inline').
    csp = dict(d.strip().split(" ", 1) for d in page.headers["content-security-policy"].split(";"))
    assert csp["script-src"] == "'self'" and csp["default-src"] == "'none'", csp
    assert "unsafe" not in csp["script-src"] and csp["connect-src"] == "'self'"
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.text, flags=re.S)
    assert [attrs.strip() for attrs, _ in scripts] == [
        'src="/docs/assets/swagger-ui-bundle.js"', 'src="/docs/assets/swagger-init.js"']
    assert all(body.strip() == "" for _, body in scripts)
    assert not re.search(r"\son[a-z]+=", page.text)  # nor inline event handlers
    init = client.get("/docs/assets/swagger-init.js")
    assert init.status_code == 200 and "SwaggerUIBundle(" in init.text
    assert init.headers["content-type"].startswith("text/javascript")
    script = client.get("/docs/assets/swagger-ui-bundle.js")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.text
    assert script.headers["content-type"].startswith("text/javascript")
    again = client.get("/docs/assets/swagger-ui-bundle.js",
                       headers={"If-None-Match": script.headers["etag"]})
    assert again.status_code == 304
    missing = client.get("/docs/assets/index.html")  # only the files the page needs
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert client.get("/redoc").status_code == 404  # its script would come from a CDN


# API keys ----------------------------------------------------------------------------------


def test_keys_are_required_when_authentication_is(make_services, tmp_path):
    services = make_services(require_auth=True, ingest_allowed_paths=str(tmp_path),
                             default_readers="group:eng")
    key = make_key(services)
    other = make_key(services, "second", "search,answer,ingest")
    write(tmp_path / "docs", "guide.md", "# Guide\n\nDeploys go out on Tuesdays.\n")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for call in (lambda h: c.post("/v1/search", json={"query": "deploys"}, headers=h),
                     lambda h: c.get("/v1/search", params={"q": "deploys"}, headers=h),
                     lambda h: c.post("/v1/answer", json={"question": "deploys?"}, headers=h),
                     lambda h: c.get("/v1/sources", headers=h),
                     lambda h: c.get("/v1/ingest/jobs", headers=h)):
            forged = key["Authorization"][:-4] + "AAAA"
            for bad in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "k1"},
                        {"Authorization": "Basic k1"}, {"Authorization": forged}):
                problem = assert_problem(call(bad), 401)
                assert problem["type"] == "urn:citewise:error:unauthorized"
                assert problem["hint"]
            assert call(key).status_code == 200
            lower = {"Authorization": other["Authorization"].replace("Bearer", "bearer")}
            assert call(lower).status_code == 200  # the scheme is case-insensitive
        assert c.get("/healthz").status_code == 200  # liveness probes carry no key

    # A remote key holder with the ingest scope may ingest; a remote caller without one may not.
    with TestClient(create_app(services=services), client=("10.1.2.3", 1234)) as remote:
        body = {"path": str(tmp_path / "docs")}
        assert_problem(remote.post("/v1/ingest/jobs", json=body), 401)
        resp = remote.post("/v1/ingest/jobs", json=body, headers=key)
        assert resp.status_code == 202, resp.text
        job = wait_for_job(remote, resp.json()["id"], headers=key)
        assert job["status"] == "done", job
        assert job["reports"][0]["added"] == 1
    # A folder handed in by path gets the server's default readers, never public.
    (doc,) = services.catalog.documents_of_source("docs").values()
    assert doc.readers == ["group:eng"]


# Ingest over HTTP --------------------------------------------------------------------------


def test_ingest_job_over_http(make_services, tmp_path):
    folder = tmp_path / "team-notes"
    write(folder, "kafka-lag.md", """
        ---
        title: Kafka consumer lag
        tags: [kafka]
        ---
        # Kafka consumer lag

        When the orders consumer falls behind, scale the consumer group to twelve replicas.
        """)
    write(folder, "dns.txt", "Internal DNS\n\nThe resolvers live at 10.0.0.2 and 10.0.0.3.\n")
    services = make_services()
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        resp = c.post("/v1/ingest/jobs", json={"path": str(folder), "readers": ["public"]},
                      headers=as_operator(c))
        assert resp.status_code == 202, resp.text
        started = resp.json()
        assert re.fullmatch(r"[0-9a-f]{12}", started["id"])
        assert started["sources"] == ["team-notes"]
        assert started["status"] in ("queued", "running", "done")

        job = wait_for_job(c, started["id"])
        assert job["status"] == "done", job
        (report,) = job["reports"]
        assert report["source"] == "team-notes"
        assert report["status"] == "succeeded"
        assert (report["added"], report["failed"], report["errors"]) == (2, 0, [])
        assert report["chunks_embedded"] >= 2
        assert "2 added" in report["summary"]

        hits = search(c, "orders consumer falls behind")
        assert hits[0]["source"] == "team-notes" and hits[0]["path"] == "kafka-lag.md"
        assert started["id"] in {j["id"] for j in c.get("/v1/ingest/jobs").json()["jobs"]}
        runs = c.get("/v1/ingest/runs", params={"source": "team-notes"}).json()["runs"]
        assert runs[0]["id"] == report["run_id"] and runs[0]["trigger"] == "api"
        run = c.get(f"/v1/ingest/runs/{report['run_id']}")
        assert run.status_code == 200 and run.json()["added"] == 2
        assert_problem(c.get("/v1/ingest/runs/999999"), 404)
        assert_problem(c.get("/v1/ingest/jobs/nosuchjob"), 404)

        # Again: nothing changed, nothing embedded.
        body = {"path": str(folder), "readers": ["public"]}
        resp = c.post("/v1/ingest/jobs", json=body, headers=as_operator(c))
        again = wait_for_job(c, resp.json()["id"])
        assert again["reports"][0]["unchanged"] == 2
        assert again["reports"][0]["chunks_embedded"] == 0


def test_ingest_request_errors(make_services, tmp_path):
    services = make_services()
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        problem = assert_problem(c.post("/v1/ingest/jobs", json={}), 422)
        assert "PATH" in problem["detail"]
        problem = assert_problem(
            c.post("/v1/ingest/jobs", json={"path": str(tmp_path / "missing")}), 422
        )
        assert "missing" in problem["detail"]
        assert_problem(c.post("/v1/ingest/jobs", json={"path": "/tmp", "colour": "red"}), 422)
        assert not c.get("/v1/ingest/jobs").json()["jobs"]


def test_ingest_of_an_undeclared_source_is_a_client_error(make_services):
    with TestClient(create_app(services=make_services()), client=LOOPBACK) as c:
        resp = c.post("/v1/ingest/jobs", json={"source": "nope"})
        assert 400 <= resp.status_code < 500, resp.text
        problem = assert_problem(resp, resp.status_code)
        assert "nope" in problem["detail"]


def _open_fifo_writer(fifo: Path, timeout: float = 30.0) -> int | None:
    """Open the FIFO for writing once its reader (the ingest job) has opened it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            time.sleep(0.02)
    return None


def test_second_ingest_while_one_runs_is_409(make_services, tmp_path):
    # The job reads a FIFO: it blocks on it until the test writes the document, so the first
    # job is deterministically still running when the second request arrives.
    folder = tmp_path / "slow"
    write(folder, "a.md", "# Alpha\n\nThe alpha service restarts nightly.\n")
    fifo = folder / "b.md"
    os.mkfifo(fifo)
    services = make_services()
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        first = c.post("/v1/ingest/jobs", json={"path": str(folder), "readers": ["public"]},
                      headers=as_operator(c))
        assert first.status_code == 202, first.text
        job_id = first.json()["id"]
        fd = _open_fifo_writer(fifo)
        try:
            assert fd is not None, "the ingest job never opened the FIFO"
            running = wait_for_job(c, job_id, until=("running", "done", "failed"))
            assert running["status"] == "running", running
            assert running["current"] == "slow"

            second = c.post("/v1/ingest/jobs", json={"path": str(folder), "readers": ["public"]},
                      headers=as_operator(c))
            problem = assert_problem(second, 409)
            # Another run is going: the same answer as when a cron holds the run lock.
            assert problem["type"] == "urn:citewise:error:run_locked"
            assert job_id in problem["detail"]
            assert problem["hint"]
            other = tmp_path / "other"
            write(other, "c.md", "# Gamma\n")
            body = {"path": str(other), "readers": ["public"]}
            assert_problem(c.post("/v1/ingest/jobs", json=body, headers=as_operator(c)), 409)

            os.write(fd, b"# Beta\n\nThe beta service pages the platform team.\n")
        finally:
            if fd is not None:
                os.close(fd)
        job = wait_for_job(c, job_id)
        assert job["status"] == "done", job
        assert job["reports"][0]["added"] == 2
        # Once it finished, a new job is accepted.
        after = c.post("/v1/ingest/jobs", json={"path": str(other), "readers": ["public"]},
                      headers=as_operator(c))
        assert after.status_code == 202, after.text
        assert wait_for_job(c, after.json()["id"])["status"] == "done"


def test_ingest_refuses_remote_callers_without_keys(services, tmp_path):
    write(tmp_path / "docs", "x.md", "# X\n")
    with TestClient(create_app(services=services), client=("10.1.2.3", 1234)) as remote:
        body = {"path": str(tmp_path / "docs")}
        for resp in (remote.post("/v1/ingest/jobs", json=body),
                     remote.get("/v1/ingest/jobs"),
                     remote.get("/v1/ingest/runs")):
            problem = assert_problem(resp, 403)
            assert problem["type"] == "urn:citewise:error:forbidden"
            assert "'ingest' scope" in problem["detail"]
        # Reading is not an operator action.
        assert remote.post("/v1/search", json={"query": "redis"}).status_code == 200
    assert services.sources.get_source("docs") is None
