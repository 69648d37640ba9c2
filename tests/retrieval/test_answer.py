"""Extractive cited answers, abstention, and the optional OpenAI-compatible LLM path."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from citewise.ingest.jobs import run_source
from citewise.retrieval.answer import AnswerService
from citewise.retrieval.llm import LLMClient
from citewise.types import Identity
from tests.kb import folder_source

ANON = Identity.anonymous()


@pytest.fixture
def services(make_services, kb):
    s = make_services()
    run_source(s.pipeline, folder_source(kb), trigger="t")
    return s


def markers(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\[(\d+)\]", text)}


def test_answer_cites_every_sentence(services):
    answer = services.answers.answer("How do I fail over the Redis primary?", ANON)
    assert not answer.abstained
    assert answer.citations
    assert markers(answer.answer) == {c.n for c in answer.citations}
    # Every sentence ends with a marker.
    for sentence in re.split(r"(?<=\])\s+", answer.answer.strip()):
        assert re.search(r"\[\d+\]$", sentence), sentence
    first = answer.citations[0]
    assert first.path == "runbooks/redis-failover.md"
    assert first.quote and first.quote.split("\n")[0] in services.catalog.chunks_of(
        first.document_id
    )[0]["text"] + "".join(c["text"] for c in services.catalog.chunks_of(first.document_id))


def test_unrelated_question_abstains(services):
    answer = services.answers.answer("What is the best recipe for sourdough bread?", ANON)
    assert answer.abstained
    assert answer.citations == []
    assert "could not find" in answer.answer


def test_restricted_evidence_is_not_used_for_outsiders(services):
    q = "How often are the payment provider keys rotated and where are they stored?"
    outsider = services.answers.answer(q, ANON)
    assert all("rotate-payment-keys" not in (c.path or "") for c in outsider.citations)
    assert "vault" not in outsider.answer
    insider = services.answers.answer(q, Identity(user="c", groups=("security",)))
    assert not insider.abstained
    assert insider.citations[0].path == "runbooks/secrets/rotate-payment-keys.md"


class _FakeOpenAI(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint: cites passage 1, plus a marker that points nowhere."""

    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeOpenAI.seen.append(body)
        reply = {"choices": [{"message": {"content": "Run a manual Sentinel failover [1][9]."}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_llm_answers_keep_only_valid_citations(services):
    server = HTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        llm = LLMClient(f"http://127.0.0.1:{server.server_port}/v1", "test-model")
        answers = AnswerService(search=services.search, dense=services.dense,
                                sparse=services.sparse, llm=llm)
        answer = answers.answer("How do I fail over the Redis primary?", ANON)
        assert answer.mode == "llm"
        assert answer.answer == "Run a manual Sentinel failover [1]."
        assert [c.n for c in answer.citations] == [1]
        prompt = _FakeOpenAI.seen[-1]["messages"][-1]["content"]
        assert "Sentinel" in prompt and "[1]" in prompt
        assert "payment provider" not in prompt, "the model only sees readable passages"
    finally:
        server.shutdown()


def test_llm_outage_falls_back_to_extractive(services):
    llm = LLMClient("http://127.0.0.1:9/v1", "m", timeout=2)
    answers = AnswerService(search=services.search, dense=services.dense,
                            sparse=services.sparse, llm=llm)
    answer = answers.answer("How do I fail over the Redis primary?", ANON)
    assert answer.mode == "extractive" and not answer.abstained and answer.citations
