"""A server that loads its parts behind an open port (``api/startup.py``): /healthz says
``starting`` and then ``ok``, /readyz 503 and then 200, a request made meanwhile waits and is
answered, and a part that fails to load is said (and the model's failure stops `citewise
serve` with exit status 1)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from citewise.api.app import create_app
from citewise.api.startup import Part, Startup
from citewise.index.dense import DenseEncoder
from citewise.ingest.jobs import run_source
from tests.kb import REDIS, clean_env, folder_source
from tests.live import LiveServer, free_port

CITEWISE = Path(sys.executable).with_name("citewise")


def _broken_model(folder: Path) -> Path:
    """A model folder whose weights are not a model: what a truncated copy looks like. Its
    pooling config names the size, so the index opens, and loading the weights fails."""
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 384}')
    (folder / "modules.json").write_text(
        '[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]')
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    return folder


def test_healthz_says_starting_and_a_search_waits_for_the_model(make_services, kb):
    services = make_services()
    assert run_source(services.pipeline, folder_source(kb), trigger="test").status == "succeeded"
    release = threading.Event()

    def load_model() -> None:  # the real warm-up, held back until the test has looked
        assert release.wait(30)
        services.dense.warm_up()

    startup = Startup([Part("embedding model", load_model, needed=True, fatal=True),
                       Part("start-up checks", lambda: services.index.count(), needed=True)])
    app = create_app(services.settings, services, startup=startup)
    startup.start()
    with LiveServer(app, services.settings) as url:
        health = httpx.get(f"{url}/healthz", timeout=5)
        assert health.status_code == 200  # liveness: alive while loading
        assert health.json()["status"] == "starting"
        assert health.json()["loading"] == ["embedding model", "start-up checks"]
        ready = httpx.get(f"{url}/readyz", timeout=5)
        assert ready.status_code == 503
        assert ready.headers["content-type"] == "application/problem+json"
        assert ready.json()["type"] == "urn:citewise:error:starting"
        assert ready.json()["loading"] == ["embedding model", "start-up checks"]

        answered: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: answered.append(httpx.post(
            f"{url}/v1/search", json={"query": "redis failover"}, timeout=30)))
        asking.start()
        time.sleep(0.5)
        assert not answered, "the search was answered before the model loaded"
        # The event loop is free meanwhile: probes are answered while the search waits.
        assert httpx.get(f"{url}/healthz", timeout=5).json()["status"] == "starting"
        release.set()
        asking.join(30)
        assert answered[0].status_code == 200, answered[0].text
        assert answered[0].json()["results"][0]["path"] == REDIS
        assert startup.wait_finished(10)
        assert httpx.get(f"{url}/healthz", timeout=5).json()["status"] == "ok"
        assert httpx.get(f"{url}/readyz", timeout=5).json() == {"status": "ok"}


def test_a_model_that_fails_to_load_is_said_and_requests_get_503(make_services, tmp_path):
    services = make_services()
    broken = DenseEncoder(_broken_model(tmp_path / "broken-model"))
    startup = Startup([Part("embedding model", broken.warm_up, needed=True, fatal=True)])
    app = create_app(services.settings, services, startup=startup)
    startup.start()
    assert startup.wait_finished(60)
    with LiveServer(app, services.settings) as url:
        # Loopback in local mode is an admin: the admin's /healthz says what failed.
        health = httpx.get(f"{url}/healthz", timeout=5).json()
        assert health["status"] == "failed"
        assert "loading embedding model failed" in health["problem"]
        ready = httpx.get(f"{url}/readyz", timeout=5)
        assert ready.status_code == 503
        assert ready.json()["type"] == "urn:citewise:error:start_failed"
        assert list(ready.json()["failed"]) == ["embedding model"]
        search = httpx.post(f"{url}/v1/search", json={"query": "redis"}, timeout=10)
        assert search.status_code == 503
        assert "loading embedding model failed" in search.json()["detail"]


def test_serve_opens_its_port_before_the_model_loads_and_exits_1_when_it_cannot(tmp_path):
    """`citewise serve` for real, with a model folder that cannot load: the port opens (the
    probe answers while the model loads), the failure is logged, and the process exits 1."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**clean_env(), "CITEWISE_EMBEDDING_MODEL_PATH": str(_broken_model(tmp_path / "m"))}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(CITEWISE), "--data-dir", str(tmp_path / "data"), "serve", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                assert resp.status_code == 200
                seen.add(resp.json()["status"])
            except httpx.TransportError:
                time.sleep(0.05)
        assert proc.wait(timeout=30) == 1, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert seen and seen <= {"starting", "failed"}, (seen, output)
    assert "start-up: loading query encoder failed" in output
    assert "error: the server stopped: loading query encoder failed" in output
    assert not (tmp_path / "data" / "server.json").exists()
