"""`citewise reindex`: a new generation built beside the live one, then switched to, while search
goes on (see ingest/reindex.py and index/generations.py).

* On the embedded engine, against a real ``citewise serve`` holding the live index in another
  process: a loop searches over HTTP while ``citewise reindex`` (another process) rebuilds with
  a smaller chunk size. No search fails, each one's results are all of one generation, and
  after the switch they are the new chunks.
* On the server backend (qdrant-client's local mode, which admits one client per folder, so
  search and reindex share this process, as on one server): the same, with threads.
* A reindex killed half-way (the swap's crash hook: ``os._exit``, what a kill -9 leaves)
  switches nothing: the old generation serves and ``citewise verify`` passes; the next reindex
  resumes it, and one killed after its switch is cleaned up by the next.
* A document that cannot be rebuilt (its stored copy lost) stops the switch; the next reindex
  resumes once it can be.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from citewise.api.cli import cli
from citewise.api.composition import build_stores
from citewise.api.settings import Settings
from citewise.index.generations import BUILDING, LIVE, building_generation
from citewise.ingest.jobs import run_source
from citewise.ingest.runlock import FileRunLock
from citewise.ingest.swap import CRASH_ENV
from citewise.types import Identity
from tests.kb import clean_env, folder_source, ingest_site, write_kb
from tests.live import free_port, wait_healthy

CITEWISE = Path(sys.executable).with_name("citewise")
SMALL = "40"  # word-pieces per chunk after the reindex (the default is 200)
QUERIES = ("redis failover sentinel", "postgres disk full", "onboarding access requests",
           "holiday on-call swap")


def _chunk_ids(data: Path) -> set[str]:
    stores = build_stores(Settings(data_dir=data))
    try:
        return {pid for _, ids in stores.catalog.live_points().values() for pid in ids}
    finally:
        stores.close()


def _meta(data: Path, key: str) -> str | None:
    stores = build_stores(Settings(data_dir=data))
    try:
        return stores.catalog.meta(key)
    finally:
        stores.close()


def _citewise(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CITEWISE), "--config", str(root / "citewise.toml"), *args],
                          cwd=root, env=clean_env(CITEWISE_LOG_LEVEL="WARNING", **env),
                          capture_output=True, text=True, timeout=300)


def _shown(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


class SearchLoop:
    """Searches in a loop until stopped, recording every answer: (started, seconds, status,
    chunk ids or the error)."""

    def __init__(self, search) -> None:
        self.search = search
        self.calls: list[tuple[float, float, int, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            query = QUERIES[n % len(QUERIES)]
            n += 1
            started = time.perf_counter()
            try:
                status, ids = self.search(query)
            except Exception as e:  # a failed search is what this test counts
                status, ids = 0, repr(e)
            self.calls.append((started, time.perf_counter() - started, status, ids))
            time.sleep(0.01)  # a steady load, leaving the two cores to the reindex too

    def __enter__(self) -> SearchLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def wait_for(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.calls) < n and time.monotonic() < deadline:
            time.sleep(0.05)


def _check_generations(calls, old: set[str], new: set[str]) -> tuple[int, int]:
    """No failed or empty search; each one's results all old or all new, and once the new
    generation answered, never the old again. (searches answered by the old, by the new)"""
    failed = [c for c in calls if c[2] != 200 or not c[3]]
    assert not failed, f"{len(failed)} of {len(calls)} searches failed: {failed[:3]}"
    seen_new = False
    counts = [0, 0]
    for _, _, _, ids in calls:
        ids = set(ids)
        if ids <= new:
            seen_new = True
            counts[1] += 1
        else:
            assert ids <= old, f"results of two generations, or of neither: {ids}"
            assert not seen_new, "the old generation answered after the new one had"
            counts[0] += 1
    return counts[0], counts[1]


def switch_latency(calls, new: set[str]) -> dict:
    """Search latency (ms) before the switch, and of the searches of the second around the
    first one the new generation answered (which opened it): what callers waited then."""
    first = next(c[0] for c in calls if set(c[3]) <= new)
    around = [c[1] for c in calls if abs(c[0] - first) <= 0.5]
    before = sorted(c[1] for c in calls if c[0] < first - 0.5)
    return {"first_new_ms": round(next(c[1] for c in calls if c[0] == first) * 1000, 1),
            "around_switch_max_ms": round(max(around) * 1000, 1),
            "before_p50_ms": round(before[len(before) // 2] * 1000, 1),
            "before_max_ms": round(before[-1] * 1000, 1)}


# Embedded engine, a real server in another process --------------------------------------------


def _serve(root: Path, config: Path) -> tuple[subprocess.Popen, str, Path]:
    """`citewise serve` on ``config`` in another process, once healthy: (process, url, log)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(CITEWISE), "--config", str(config), "serve", "--port", str(port)],
            cwd=root, env=clean_env(CITEWISE_RATE_SEARCH_PER_MINUTE="0"), stdout=out,
            stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, server, log, timeout=120)
    except BaseException:
        server.kill()
        server.wait(timeout=30)
        raise
    return server, url, log


def _http_search(http: httpx.Client):
    """A ``SearchLoop`` search over HTTP: (status, chunk ids or the error text)."""
    def search(query: str):
        resp = http.get("/v1/search", params={"q": query, "top_k": 5})
        ids = [r["chunk_id"] for r in resp.json()["results"]] if resp.status_code == 200 \
            else resp.text
        return resp.status_code, ids
    return search


def test_reindex_while_a_server_searches(tmp_path):
    config = ingest_site(tmp_path)
    data = tmp_path / "data"
    old = _chunk_ids(data)
    server, url, log = _serve(tmp_path, config)
    try:
        http = httpx.Client(base_url=url, timeout=30)
        search = _http_search(http)

        with SearchLoop(search) as loop:
            loop.wait_for(10)
            reindex = _citewise(tmp_path, "reindex", "--json", CITEWISE_CHUNK_MAX_TOKENS=SMALL)
            settled = len(loop.calls)
            loop.wait_for(settled + 20)
        assert reindex.returncode == 0, _shown(reindex) + log.read_text()
        report = json.loads(reindex.stdout)
        assert report["status"] == "switched" and report["generation"] == "g2", report
        new = _chunk_ids(data)
        assert new and not new & old and len(new) > len(old)  # smaller chunks, more of them
        before, after = _check_generations(loop.calls, old, new)
        assert before >= 10 and after >= 20, (before, after)
        print(f"\nswitch: catalog transaction {report['switch_ms']} ms; {len(loop.calls)} "
              f"searches, none failed ({before} old, {after} new); latency "
              f"{switch_latency(loop.calls, new)}")
        # The server held the old folder: the reindex dropped it if the server had already
        # moved on (and let it go), else left it to the server, which drops it once it has.
        assert report["dropped"] + report["left"] == [""], report
        _wait_until(lambda: not (data / "qdrant").exists(), log)
        assert (data / "qdrant-g2").is_dir() and not (data / "reindex" / "g2").exists()
        # What `citewise verify` hands to the server holding the index.
        verified = http.post("/v1/ingest/verify", json={}).json()
        assert verified["ok"], verified
        # The server still has chunk size 200: its ingest would undo the rebuild in place.
        ingest = http.post("/v1/ingest/jobs", json={"source": "kb"})
        job = _job_done(http, ingest.json()["id"])
        assert job["status"] == "failed" and "citewise reindex" in job["message"], job
        http.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def _another_model(tmp_path: Path) -> Path:
    """A second embedding model folder: the packaged weights under another name (no other
    model can be had offline), links rather than 90 MB of copies. Its model id is its name."""
    from citewise.index.dense import packaged_model_path

    folder = tmp_path / "minilm-b"
    folder.mkdir()
    for item in packaged_model_path().iterdir():
        (folder / item.name).symlink_to(item)
    return folder


def test_a_new_embedding_model_is_loaded_by_the_server_at_the_switch(tmp_path):
    """`citewise reindex` with another model, while a server started with the old one
    searches: the server loads the new model before it moves, so no search fails or mixes the
    generations, and it answers, caches and ingests with the new model, without a restart."""
    config = ingest_site(tmp_path)
    data = tmp_path / "data"
    old = _chunk_ids(data)
    model = _another_model(tmp_path)
    server, url, log = _serve(tmp_path, config)
    try:
        http = httpx.Client(base_url=url, timeout=60)
        search = _http_search(http)

        asked = http.post("/v1/answer", json={"question": "how do I fail over redis?"}).json()
        with SearchLoop(search) as loop:
            loop.wait_for(10)
            reindex = _citewise(tmp_path, "reindex", "--json",
                                CITEWISE_EMBEDDING_MODEL_PATH=str(model))
            settled = len(loop.calls)
            loop.wait_for(settled + 20)
        assert reindex.returncode == 0, _shown(reindex) + log.read_text()
        report = json.loads(reindex.stdout)
        assert report["status"] == "switched" and report["model"] == "minilm-b", report
        assert _meta(data, "embedding_model") == "minilm-b"
        new = _chunk_ids(data)
        assert new and not new & old  # the model is part of each chunk's version
        before, after = _check_generations(loop.calls, old, new)
        assert before >= 10 and after >= 20, (before, after)
        print(f"\nmodel switch: {len(loop.calls)} searches, none failed ({before} old, "
              f"{after} new); latency {switch_latency(loop.calls, new)}")
        assert "embedding questions with 'minilm-b'" in log.read_text()
        # The same question again is answered afresh with the new model, not from the cache
        # entry the old model's vector made.
        again = http.post("/v1/answer", json={"question": "how do I fail over redis?"}).json()
        assert not again["cached"] and again["citations"], again
        assert again["citations"][0]["path"] == asked["citations"][0]["path"]
        # The server's ingest now has the settings the index was built with: it runs, and
        # finds nothing to re-embed.
        ingest = http.post("/v1/ingest/jobs", json={"source": "kb"})
        job = _job_done(http, ingest.json()["id"])
        assert job["status"] == "done", job
        (run,) = job["reports"]
        assert run["status"] == "succeeded" and run["chunks_embedded"] == 0, run
        http.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_until(condition, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out\n{log.read_text()}")
        time.sleep(0.1)


def _job_done(http: httpx.Client, job_id: str) -> dict:
    for _ in range(300):
        job = http.get(f"/v1/ingest/jobs/{job_id}").json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


# Server backend, in this process ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["server", "pgvector"])
def test_reindex_on_the_server_backend(tmp_path, make_services, request, backend):
    """A Qdrant server's generation is a collection, pgvector's a table of its own (with its
    catalog in the same PostgreSQL database, staged in a schema of its own)."""
    from citewise.api.composition import build_reindexer

    data = tmp_path / "data"
    where = {"qdrant_url": f"local:{tmp_path / 'qdrant-server'}"} if backend == "server" else \
        {"database_url": request.getfixturevalue("postgres_url"), "vector_store": "pgvector"}
    services = make_services(data_dir=data, **where)
    report = run_source(services.pipeline, folder_source(write_kb(tmp_path / "kb")),
                        trigger="test")
    assert report.status == "succeeded", report.summary()

    def live_ids() -> set[str]:  # read through the services' catalog, wherever it is
        return {pid for _, ids in services.catalog.live_points().values() for pid in ids}

    old = live_ids()
    reindexer = build_reindexer(
        Settings(data_dir=data, chunk_max_tokens=int(SMALL), **where), services)
    reindexer.drop_delay = 0  # searches straddling the drop must start again, not fail

    def search(query: str):
        return 200, [r.chunk_id for r in services.search.search(query, Identity(), top_k=5)]

    loops = [SearchLoop(search), SearchLoop(search)]
    with loops[0], loops[1]:
        loops[0].wait_for(5)
        with FileRunLock(data / "ingest.lock").held("test reindex"):
            done = reindexer.run()
        settled = len(loops[0].calls)
        loops[0].wait_for(settled + 10)
    assert done.status == "switched" and done.dropped == [""], done
    new = live_ids()
    assert new and not new & old
    for loop in loops:
        _check_generations(loop.calls, old, new)
    assert services.index.generation == "g2"
    assert services.index.store.names() == ["g2"]  # the old collection (table) is gone
    from citewise.ingest.consistency import verify

    assert verify(services.catalog, services.index, services.blobs) == []
    hits = services.search.search("redis failover sentinel", Identity(), top_k=3)
    assert hits and all(h.chunk_id in new for h in hits)


# Killed half-way, and after the switch ----------------------------------------------------------


def _invoke(*args: str):
    """The CLI in this process (the model is loaded once per test session)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        result = CliRunner().invoke(cli, list(args), env={k: None for k in os.environ
                                                          if k.startswith("CITEWISE_")})
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result


def test_a_killed_reindex_leaves_the_old_index_serving_and_the_next_finishes(tmp_path):
    ingest_site(tmp_path)
    data = tmp_path / "data"
    old = _chunk_ids(data)
    # Killed while writing the second document of the new generation.
    killed = _citewise(tmp_path, "reindex", CITEWISE_CHUNK_MAX_TOKENS=SMALL,
                       **{CRASH_ENV: "commit:2"})
    assert killed.returncode == 137, _shown(killed)
    assert _meta(data, LIVE) is None and json.loads(_meta(data, BUILDING))["name"] == "g2"
    assert (data / "qdrant").is_dir() and (data / "qdrant-g2").is_dir()
    assert _chunk_ids(data) == old
    config = str(tmp_path / "citewise.toml")
    _invoke("--config", config, "verify")
    found = _invoke("--config", config, "search", "redis failover", "--json")
    assert {r["chunk_id"] for r in json.loads(found.stdout)["results"]} <= old
    status = _citewise(tmp_path, "reindex", "--status", CITEWISE_CHUNK_MAX_TOKENS=SMALL)
    assert "half-built: generation g2" in status.stdout and "resumes it" in status.stdout, \
        _shown(status)

    # Resumed, then killed after the switch, before the old generation is dropped.
    resumed = _citewise(tmp_path, "reindex", "--json", CITEWISE_CHUNK_MAX_TOKENS=SMALL,
                        **{CRASH_ENV: "reindex-switched"})
    assert resumed.returncode == 137, _shown(resumed)
    assert _meta(data, LIVE) == "g2" and not _meta(data, BUILDING)
    new = _chunk_ids(data)
    assert new and not new & old
    assert (data / "qdrant").is_dir()  # left behind by the kill

    # The next one finds nothing to rebuild and drops what was left.
    settings = Settings.load(tmp_path / "citewise.toml", chunk_max_tokens=int(SMALL))
    from citewise.api.composition import build_reindexer, build_services

    reindexer = build_reindexer(settings)
    try:
        with FileRunLock(settings.data.run_lock_path).held("test"):
            done = reindexer.run()
    finally:
        reindexer.close()
    assert done.status == "up-to-date" and done.dropped == [""], done
    assert not (data / "qdrant").exists() and not (data / "reindex").exists()
    stores = build_stores(settings)
    assert building_generation(stores.catalog) is None
    stores.close()
    _invoke("--config", config, "verify")
    services = build_services(settings)
    try:
        hits = services.search.search("redis failover", Identity(), top_k=3)
        assert hits and {h.chunk_id for h in hits} <= new
    finally:
        services.close()


# A document that cannot be rebuilt ----------------------------------------------------------


def test_a_document_that_cannot_be_rebuilt_stops_the_switch(tmp_path, make_services):
    """Its stored copy is gone: the new generation would lack it, so nothing is switched and
    the old generation serves on; once the copy is back, the next reindex resumes."""
    from citewise.api.composition import build_reindexer

    data = tmp_path / "data"
    services = make_services(data_dir=data)
    report = run_source(services.pipeline, folder_source(write_kb(tmp_path / "kb")),
                        trigger="test")
    assert report.status == "succeeded", report.summary()
    old = _chunk_ids(data)
    record = next(iter(services.catalog.documents_of_source("kb").values()))
    blob = data / "blobs" / record.blob_key
    content = blob.read_bytes()
    blob.unlink()
    reindexer = build_reindexer(Settings(data_dir=data, chunk_max_tokens=int(SMALL)), services)
    reindexer.drop_delay = 0
    with FileRunLock(data / "ingest.lock").held("test reindex"):
        failed = reindexer.run()
    assert failed.status == "failed" and failed.generation == "" and failed.built == "g2"
    assert any(record.external_id in f and "missing" in f for f in failed.failures), failed
    assert _chunk_ids(data) == old and services.index.generation == ""
    hits = services.search.search("redis failover sentinel", Identity(), top_k=3)
    assert hits and {h.chunk_id for h in hits} <= old

    blob.write_bytes(content)
    with FileRunLock(data / "ingest.lock").held("test reindex"):
        done = reindexer.run()
    assert done.status == "switched" and done.resumed and done.generation == "g2", done
    assert failed.documents == done.documents - 1  # the others were written the first time
    hits = services.search.search("redis failover sentinel", Identity(), top_k=3)
    assert hits and not {h.chunk_id for h in hits} & old
