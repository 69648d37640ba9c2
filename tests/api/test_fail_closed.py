"""Fail closed: every reproduction of the security and fault probe, now refused or repaired.

Each test names the probe's finding it covers (numbers as in the issue). The services are real
(catalog, embedded Qdrant, the model); the HTTP tests use FastAPI's TestClient, except where the
socket matters (forwarded headers, bodies), which get a real uvicorn server on loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.ingest.jobs import run_source
from citewise.types import Identity
from tests.kb import SECRET, clean_env, folder_source, make_key, stored_rows, write, write_kb
from tests.live import LiveServer

LOOPBACK = ("127.0.0.1", 50000)
REMOTE = ("10.1.2.3", 50000)
ANYONE = Identity.anonymous()


def operator(client: TestClient) -> dict:
    return {"X-Citewise-Operator": client.app.state.operator_token}


def problem(resp, status: int) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json"), resp.text
    body = resp.json()
    assert body["status"] == status and body["detail"]
    return body


def wait(client: TestClient, job_id: str, headers: dict) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = client.get(f"/v1/ingest/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


# 1. Ingest by path ---------------------------------------------------------------------------


def test_1_symlinks_out_of_the_folder_are_never_followed(make_services, tmp_path):
    outside = tmp_path / "someone-elses"
    outside.mkdir()
    private = outside / "private.md"
    private.write_text("# Private\n\nThe root password of the billing database is hunter2.\n")
    private.chmod(0o600)
    folder = tmp_path / "docs"
    write(folder, "guide.md", "# Guide\n\nDeploys go out on Tuesdays.\n")
    (folder / "passwd.txt").symlink_to("/etc/passwd")
    (folder / "private.md").symlink_to(private)
    (folder / "inside.md").symlink_to(folder / "guide.md")  # within the folder: fine
    services = make_services()
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        resp = c.post("/v1/ingest/jobs", json={"path": str(folder), "readers": ["public"]},
                      headers=operator(c))
        job = wait(c, resp.json()["id"], operator(c))
    assert job["status"] == "done", job
    docs = services.catalog.documents_of_source("docs")
    assert sorted(docs) == ["guide.md", "inside.md"]
    for query in ("root x 0 0 root bin bash", "root password billing database hunter2"):
        hits = services.search.search(query, ANYONE, top_k=5)
        assert all(h.path in ("guide.md", "inside.md") for h in hits)


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/etc", 403, "turned off for HTTP callers"),
        ("~", 422, "not an absolute path"),
        ("/proc/self", 403, "system folder"),
        ("/tmp/\u0000x", 422, "NUL"),
        ("/" + "a" * 10_000, 422, "4096"),
    ],
    ids=["etc", "home", "proc", "nul", "long"],
)
def test_1_http_callers_cannot_ingest_server_folders(make_services, path, status, words):
    with TestClient(create_app(services=make_services()), client=LOOPBACK) as c:
        body = problem(c.post("/v1/ingest/jobs", json={"path": path}), status)
        assert words in json.dumps(body), body


def test_1_even_the_operator_cannot_ingest_the_data_folder_or_proc(make_services):
    services = make_services()
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for path in (str(services.settings.data_dir), "/proc/self", "/sys"):
            body = problem(c.post("/v1/ingest/jobs", json={"path": path, "readers": ["public"]},
                                  headers=operator(c)), 403)
            assert "cannot be ingested" in body["detail"]


def test_1_allowed_folders_get_the_default_readers_never_public(make_services, tmp_path):
    allowed = tmp_path / "shared"
    write(allowed / "team", "notes.md", "# Notes\n\nThe build cache lives on ci-cache-01.\n")
    write(tmp_path / "elsewhere", "x.md", "# X\n")
    services = make_services(ingest_allowed_paths=str(allowed))
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        body = problem(c.post("/v1/ingest/jobs", json={"path": str(allowed / "team")}), 422)
        assert "who may read" in body["detail"]  # no default_readers configured
        assert "CITEWISE_DEFAULT_READERS" in body["hint"]
        problem(c.post("/v1/ingest/jobs", json={"path": str(tmp_path / "elsewhere"),
                                                "readers": ["public"]}), 403)
    services = make_services(data_dir=tmp_path / "data2", ingest_allowed_paths=str(allowed),
                             default_readers="group:platform")
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        resp = c.post("/v1/ingest/jobs", json={"path": str(allowed / "team")})
        assert resp.status_code == 202, resp.text
        assert wait(c, resp.json()["id"], {})["status"] == "done"
    (doc,) = services.catalog.documents_of_source("team").values()
    assert doc.readers == ["group:platform"]
    assert services.search.search("build cache", ANYONE, top_k=3) == []


# 2. Readers declarations, through a real run ---------------------------------------------------


def test_2_a_misspelled_readers_key_fails_the_document_and_keeps_its_version(make_services,
                                                                            tmp_path):
    folder = tmp_path / "rb"
    text = "---\nreaders: [group:security]\n---\n# Rotate keys\n\nStep one: open a SEC ticket.\n"
    write(folder, "rotate.md", text)
    write(folder, "public.md", "# Public\n\nAnyone may read this page about deploys.\n")
    services = make_services()
    assert run_source(services.pipeline, folder_source(folder), trigger="t").status == \
        "succeeded"
    write(folder, "rotate.md", text.replace("readers:", "Readers:").replace("one", "two"))
    report = run_source(services.pipeline, folder_source(folder), trigger="t")
    assert report.status == "partial"  # the CLI exits 3
    assert "looks like an access declaration" in dict(report.errors)["rotate.md"]
    doc = services.catalog.documents_of_source("kb")["rotate.md"]
    assert doc.readers == ["group:security"]  # the previous, restricted version stays
    assert services.search.search("open a SEC ticket", ANYONE, top_k=5) == [] or all(
        h.path != "rotate.md" for h in services.search.search("SEC ticket", ANYONE, top_k=5))


def test_2_a_folder_or_git_source_must_say_who_reads_it(tmp_path):
    from citewise.api.settings import Settings
    from citewise.errors import ConfigError

    cfg = tmp_path / "citewise.toml"
    cfg.write_text('[[sources]]\nname = "rb"\ntype = "folder"\npath = "rb"\n')
    settings = Settings.load(cfg)
    from citewise.connectors.registry import build_connector

    with pytest.raises(ConfigError) as raised:
        build_connector(settings.sources[0])
    assert "must say who may read" in raised.value.message
    assert 'readers = ["public"]' in raised.value.hint
    cfg.write_text('[settings]\ndefault_readers = ["group:eng"]\n'
                   '[[sources]]\nname = "rb"\ntype = "folder"\npath = "rb"\n')
    assert Settings.load(cfg).sources[0].readers == ["group:eng"]


# 3. The client's address comes from the socket ---------------------------------------------------


@pytest.mark.parametrize("trusted", [None, "127.0.0.1"])
def test_3_x_forwarded_for_is_believed_only_from_trusted_proxies(make_services, tmp_path,
                                                                 trusted):
    services = make_services(trusted_proxies=trusted)
    with LiveServer(create_app(services=services), services.settings) as url:
        remote_claim = httpx.get(f"{url}/v1/ingest/runs",
                                 headers={"X-Forwarded-For": "203.0.113.9"})
        local_claim = httpx.get(f"{url}/v1/ingest/runs", headers={"X-Forwarded-For": "::1"})
    if trusted is None:
        # The socket is loopback: the header changes nothing, either way.
        assert remote_claim.status_code == 200 and local_claim.status_code == 200
    else:
        assert remote_claim.status_code == 403 and local_claim.status_code == 200


def test_3_a_wildcard_proxy_setting_is_refused_in_local_mode(make_services, tmp_path):
    """Found by the probe (issue 30, item 4): with CITEWISE_TRUSTED_PROXIES=* in local mode,
    ``X-Forwarded-For: 127.0.0.1, 10.0.0.9`` made any caller the local operator."""
    from citewise.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        create_app(services=make_services(trusted_proxies="*"))
    assert "local mode" in raised.value.message and "REQUIRE_AUTH" in raised.value.hint
    with pytest.raises(ConfigError) as raised:
        create_app(services=make_services(tmp_path / "other", require_auth=True,
                                          trusted_proxies="10.0.0.5,proxy.internal"))
    assert "CITEWISE_TRUSTED_PROXIES" in raised.value.message


@pytest.mark.parametrize("trusted,forwarded,seen", [
    # Whoever connects is trusted, and only the entry it appended: never the client's own.
    ("*", "127.0.0.1, 10.0.0.9", "10.0.0.9"),
    ("*", "127.0.0.1", "127.0.0.1"),
    # From the right, past the trusted proxies, to the first address that is not one.
    ("127.0.0.1,10.0.0.0/8", "127.0.0.1, 203.0.113.9, 10.0.0.9", "203.0.113.9"),
    ("127.0.0.1", "127.0.0.1, 10.0.0.9", "10.0.0.9"),
    ("127.0.0.1", "::1, [2001:db8::7]:4711", "2001:db8::7"),
])
def test_3_the_client_is_the_right_most_address_that_is_not_a_trusted_proxy(
        make_services, trusted, forwarded, seen):
    services = make_services(trusted_proxies=trusted, require_auth=True)
    with LiveServer(create_app(services=services), services.settings) as url:
        resp = httpx.get(f"{url}/v1/ingest/runs", headers={"X-Forwarded-For": forwarded})
    assert resp.status_code == 401
    clients = [r["client"] for r in stored_rows(services).execute(
        "SELECT client FROM audit WHERE action = 'request.refused'")]
    assert clients == [seen]


def test_3_a_forged_loopback_hop_through_a_trusted_proxy_is_not_local(make_services):
    services = make_services(trusted_proxies="127.0.0.1")
    with LiveServer(create_app(services=services), services.settings) as url:
        forged = httpx.get(f"{url}/v1/ingest/runs",
                           headers={"X-Forwarded-For": "127.0.0.1, 10.0.0.9"})
    assert forged.status_code == 403, forged.text


# 6. Wiped or emptied state ---------------------------------------------------------------


def test_6_a_deleted_index_is_noticed_reported_and_rebuilt(make_services, tmp_path, kb):
    data = tmp_path / "data"
    services = make_services(data_dir=data)
    run_source(services.pipeline, folder_source(kb), trigger="t")
    services.close()
    shutil.rmtree(data / "qdrant")
    services = make_services(data_dir=data)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        health = c.get("/healthz").json()
    assert health["status"] == "degraded" and "index is empty" in health["problem"]
    assert "citewise ingest --all" in health["problem"]
    report = run_source(services.pipeline, folder_source(kb), trigger="t")
    assert report.counts.unchanged == 0 and report.counts.updated == 5, report.summary()
    assert services.index.count() == services.catalog.count_chunks()
    assert services.search.search("Sentinel failover redis", ANYONE, top_k=1)


def test_6_files_emptied_by_a_bad_sync_count_toward_the_brake(make_services, tmp_path):
    folder = tmp_path / "many"
    for i in range(12):
        write(folder, f"p{i}.md", f"# Page {i}\n\nNotes about subsystem number {i}, its pager.\n")
    services = make_services()
    run_source(services.pipeline, folder_source(folder, name="many"), trigger="t")
    for i in range(12):
        (folder / f"p{i}.md").write_text("")
    report = run_source(services.pipeline, folder_source(folder, name="many"), trigger="t")
    assert report.status == "failed" and "12 deleted or emptied" in report.message
    assert services.catalog.count_documents("many", with_content=True) == 12
    assert services.search.search("subsystem number 3 pager", ANYONE, top_k=1)


def test_6_the_brake_remembers_the_healthy_size_across_runs(make_services, tmp_path):
    folder = tmp_path / "sixty"
    for i in range(60):
        write(folder, f"p{i:02}.md", f"# Page {i}\n\nService {i} pages the team on call.\n")
    services = make_services()
    source = folder_source(folder, name="sixty")
    run_source(services.pipeline, source, trigger="t")
    for i in range(29):
        (folder / f"p{i:02}.md").unlink()
    first = run_source(services.pipeline, source, trigger="t")
    assert first.status == "succeeded" and first.counts.deleted == 29
    for i in range(29, 44):
        (folder / f"p{i:02}.md").unlink()
    second = run_source(services.pipeline, source, trigger="t")
    assert second.status == "failed", second.summary()
    assert "would leave 16 of the 60" in second.message
    forced = run_source(services.pipeline, source, trigger="t", force=True)
    assert forced.counts.deleted == 15
    assert services.sources.healthy_documents("sixty") == 16


# 7. A missing stored copy --------------------------------------------------------------------


def test_7_a_deleted_blob_is_a_clear_problem(make_services, kb):
    services = make_services()
    run_source(services.pipeline, folder_source(kb), trigger="t")
    record = services.catalog.documents_of_source("kb")["runbooks/redis-failover.md"]
    services.blobs.delete(record.blob_key)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        body = problem(c.get(f"/v1/documents/{record.id}", params={"include_content": True}), 500)
        assert body["type"] == "urn:citewise:error:stored_copy_missing"
        assert "--force" in body["hint"]
        assert c.get(f"/v1/documents/{record.id}").status_code == 200  # metadata still there


# 8. No 500s on odd input -------------------------------------------------------------------------


def test_8_odd_input_gets_a_problem_not_a_traceback(make_services):
    services = make_services(require_auth=True)
    key = make_key(services)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        resp = c.post("/v1/search", json={"query": "x"},
                      headers={"Authorization": "Bearer ключ-ünïcode".encode()})
        problem(resp, 401)
        problem(c.get("/v1/ingest/runs/99999999999999999999999", headers=key), 422)
        problem(c.get("/v1/ingest/runs/0", headers=key), 422)


def test_8_a_corrupt_catalog_says_what_to_do(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "catalog.db").write_bytes(b"this is not a database" * 100)
    proc = subprocess.run([str(Path(sys.executable).with_name("citewise")), "--data-dir",
                           str(data), "search", "anything"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "catalog" in proc.stderr and "cannot be read" in proc.stderr
    assert "hint:" in proc.stderr and "restore the data folder from a backup" in proc.stderr
    assert "citewise verify --rebuild-catalog" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_8_a_damaged_embedded_index_is_a_backend_error(tmp_path):
    from citewise.errors import BackendError
    from citewise.index.qdrant_edge_index import EdgeVectorIndex
    from citewise.index.vector_index import IndexFilter
    from tests.index.test_vector_index_contract import corpus

    index = EdgeVectorIndex(tmp_path, 8)
    index.upsert(corpus())
    index.close()
    for status in tmp_path.glob("segments/*/vector_storage-dense/vectors/status.dat"):
        status.write_bytes(b"")
    with pytest.raises(BackendError) as raised:
        EdgeVectorIndex(tmp_path, 8).count(IndexFilter())
    assert "panicked" in raised.value.message and "damaged" in raised.value.hint


# 9. Bodies: limits, the key first, strict types ----------------------------------------------


def _raw_post(port: int, headers: str, body: bytes) -> tuple[int, bytes]:
    """Send a request whose headers promise more body than is sent; read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(headers.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data


def test_9_big_bodies_are_refused_before_they_are_read(make_services):
    services = make_services(require_auth=True)
    secret = make_key(services)["Authorization"].split()[1]
    port_holder = {}
    with LiveServer(create_app(services=services), services.settings) as url:
        port_holder["port"] = int(url.rsplit(":", 1)[1])
        big = 100 * 1024 * 1024
        # Without a key: 401 at once, though 100 MB are announced and only 10 bytes sent.
        status, _ = _raw_post(port_holder["port"],
                              "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              f"application/json\r\nContent-Length: {big}\r\n\r\n", b'{"query":')
        assert status == 401
        # With a key, the size is refused before the body is read.
        status, _ = _raw_post(port_holder["port"],
                              "POST /v1/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              f"{secret}"
                              f"\r\nContent-Type: application/json\r\nContent-Length: {big}"
                              "\r\n\r\n", b'{"query":')
        assert status == 413
        # A body that streams past the limit without announcing its size.
        def chunks():
            for _ in range(40):
                yield b"x" * 65536

        resp = httpx.post(f"{url}/v1/search", content=chunks(),
                          headers={"Authorization": f"Bearer {secret}"})
        assert resp.status_code == 413, resp.text


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/search", {"query": "redis", "top_k": "5"}, "top_k"),
        ("/v1/answer", {"question": 42}, "question"),
        ("/v1/ingest/jobs", {"source": "kb", "force": "yes"}, "force"),
    ],
    ids=["string-for-int", "int-for-string", "string-for-bool"],
)
def test_9_request_bodies_are_strict(make_services, path, body, field):
    with TestClient(create_app(services=make_services()), client=LOOPBACK) as c:
        found = problem(c.post(path, json=body), 422)
        assert field in found["detail"]


# 10. Run statistics are for operators ----------------------------------------------------------


def test_10_counts_of_restricted_content_stay_with_operators(make_services, kb):
    services = make_services()
    run_source(services.pipeline, folder_source(kb), trigger="t")
    with TestClient(create_app(services=services), client=REMOTE) as remote:
        (source,) = remote.get("/v1/sources").json()["sources"]
        assert source["documents"] == 4 and source["last_run"] is None  # 5 exist, 1 restricted
        assert remote.get("/healthz").json() == {"status": "ok"}
        problem(remote.get("/metrics"), 403)
    with TestClient(create_app(services=services), client=LOOPBACK) as local:
        (source,) = local.get("/v1/sources").json()["sources"]
        assert source["last_run"]["seen"] == 5
        assert local.get("/healthz").json()["documents"] == 5
        assert local.get("/metrics").status_code == 200
    services_with_keys = make_services(data_dir=services.settings.data_dir.parent / "d2",
                                       require_auth=True)
    admin = make_key(services_with_keys)
    reader = make_key(services_with_keys, "reader", "search,answer")
    with TestClient(create_app(services=services_with_keys), client=LOOPBACK) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        assert c.get("/healthz", headers=reader).json() == {"status": "ok"}
        assert c.get("/healthz", headers=admin).json()["documents"] == 0
        problem(c.get("/metrics"), 401)
        problem(c.get("/metrics", headers=reader), 403)
        assert c.get("/metrics", headers=admin).status_code == 200


# 11. An identity header sent twice ---------------------------------------------------------


def test_11_a_repeated_identity_header_is_refused(make_services):
    with TestClient(create_app(services=make_services()), client=LOOPBACK) as c:
        headers = [("X-Citewise-Groups", "security"), ("X-Citewise-Groups", "eng")]
        body = problem(c.post("/v1/search", json={"query": "keys"}, headers=headers), 400)
        assert "appears 2 times" in body["detail"]
        headers = [("X-Citewise-User", "mallory"), ("X-Citewise-User", "dana")]
        problem(c.post("/v1/answer", json={"question": "keys?"}, headers=headers), 400)


def test_the_operator_token_is_readable_by_its_owner_only(tmp_path):
    from citewise.api.remote import write_server_file
    from citewise.api.settings import Settings

    settings = Settings(data_dir=tmp_path)
    write_server_file(settings, "127.0.0.1", 8123, "secret-token")
    assert oct(os.stat(settings.data.server_file).st_mode & 0o777) == "0o600"
    assert json.loads(settings.data.server_file.read_text())["operator_token"] == "secret-token"


def test_secret_is_still_invisible(make_services, kb):
    """A guard on this module's helpers: the knowledge base's restricted runbook stays hidden."""
    services = make_services()
    run_source(services.pipeline, folder_source(kb), trigger="t")
    assert all(h.path != SECRET for h in services.search.search("rotate payment keys", ANYONE))
    write_kb(kb)  # unchanged content: nothing else to check
