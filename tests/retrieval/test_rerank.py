"""The optional reranker: a real rerank HTTP API on loopback, and a local cross-encoder folder."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from citewise.index.dense import packaged_model_path
from citewise.ingest.jobs import run_source
from citewise.retrieval.rerank import CrossEncoderReranker, HttpReranker, RerankError
from citewise.types import Identity
from tests.kb import SECRET_WORDS, folder_source


class RerankAPI:
    """Speaks the Cohere/Jina rerank shape; scores a passage by how often it says ``favour``."""

    def __init__(self, favour: str, status: int = 200) -> None:
        self.favour, self.status, self.seen = favour, status, []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.seen.append((self.path, self.headers.get("Authorization"), body))
                results = [{"index": i, "relevance_score": d.lower().count(api.favour)}
                           for i, d in enumerate(body["documents"])]
                payload = json.dumps({"results": results}).encode()
                self.send_response(api.status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def api():
    servers: list[RerankAPI] = []

    def start(favour: str, status: int = 200) -> RerankAPI:
        servers.append(RerankAPI(favour, status))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def ingested(make_services, kb, **settings):
    s = make_services(**settings)
    run_source(s.pipeline, folder_source(kb), trigger="test")
    return s


def test_rerank_api_reorders_only_readable_candidates(make_services, kb, api):
    server = api("holiday")
    s = ingested(make_services, kb, rerank_url=server.url, rerank_model="rr-1",
                 rerank_api_key="k", rerank_candidates=8)
    hits = s.search.search("what to do when the redis primary is down", Identity.anonymous(),
                           top_k=3)
    # The fused ranking puts the Redis runbook first; the reranker prefers the holiday page.
    assert hits[0].path == "wiki/holiday-swaps.txt"
    assert len(hits) == 3 and hits[0].score >= hits[1].score >= hits[2].score
    path, auth, body = server.seen[-1]
    assert path == "/v1/rerank" and auth == "Bearer k" and body["model"] == "rr-1"
    assert 3 <= len(body["documents"]) <= 8
    sent = " ".join(body["documents"]).lower()
    assert not any(word in sent for word in SECRET_WORDS)  # restricted text never leaves


def test_a_failing_reranker_leaves_the_fused_ranking(make_services, kb, api, caplog):
    broken = api("holiday", status=500)
    s = ingested(make_services, kb, rerank_url=broken.url)
    hits = s.search.search("what to do when the redis primary is down", Identity.anonymous())
    assert hits[0].path == "runbooks/redis-failover.md"
    assert "reranking failed" in caplog.text
    with pytest.raises(RerankError, match="answered 500"):
        HttpReranker(broken.url).scores("q", ["a passage"])


def test_cross_encoder_from_a_local_folder_orders_by_its_own_scores(tmp_path):
    # No cross-encoder weights exist here; a BERT folder with a fresh classification head
    # exercises the same loading and scoring code a real one goes through.
    reranker = CrossEncoderReranker(packaged_model_path())
    passages = ["Promote the replica.", "Swap on-call shifts a week ahead.", "Grow the volume."]
    scores = reranker.scores("redis primary down", passages)
    assert len(scores) == 3 and all(isinstance(x, float) for x in scores)
    assert scores == reranker.scores("redis primary down", passages)  # deterministic
    with pytest.raises(Exception, match="not a model folder"):
        CrossEncoderReranker(tmp_path)
