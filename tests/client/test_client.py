"""``citewise_client.CitewiseClient`` against a real server: typed replies that dump back to
exactly what the server sent, a key acting for a user, ingest jobs followed to the end, and
every kind of error read from the server's problem documents by their type URN.

The few error answers a citewise server never gives (a proxy's HTML 502, a 403 whose words
mention a guardrail, a server that stalls) come from a loopback HTTP server that answers as
docs/http-api.md describes problem documents.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from citewise.ingest.runlock import FileRunLock
from citewise_client import (
    ActingFor,
    CitewiseClient,
    Filters,
    Forbidden,
    GuardrailBlocked,
    IngestJob,
    IngestRequest,
    InvalidRequest,
    NotFound,
    RateLimited,
    RunLocked,
    ServerError,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
)
from tests.client.conftest import DENIED, Server
from tests.kb import REDIS, SECRET
from tests.live import free_port

REDIS_Q = "how do I fail over the redis primary?"


def client(server: Server, key: str | None) -> CitewiseClient:
    return CitewiseClient(server.url, server.keys[key] if key else None)


def raw(server: Server, key: str, method: str, path: str, **options) -> httpx.Response:
    """The same call without the client: what the server sent."""
    return httpx.request(method, f"{server.url}{path}", timeout=60,
                         headers={"Authorization": f"Bearer {server.keys[key]}"}, **options)


# Replies ---------------------------------------------------------------------------------------


def test_search_is_typed_and_dumps_back_to_what_the_server_sent(server):
    found = client(server, "reader").search(REDIS_Q, top_k=3, filters=Filters(sources=["kb"]))
    best = found.results[0]
    assert best.path == REDIS and best.source == "kb" and best.score > 0
    assert best.citation.startswith(f"kb/{REDIS}:{best.start_line}")
    sent = raw(server, "reader", "POST", "/v1/search", json={
        "query": REDIS_Q, "top_k": 3, "filters": {"sources": ["kb"]}}).json()
    sent.pop("took_ms")
    dumped = found.model_dump()
    dumped.pop("took_ms")
    # Every field, those the client does not declare too (anchor, metadata), in the same order.
    assert json.dumps(dumped) == json.dumps(sent)


def test_answer_is_typed_down_to_its_blocks_and_citations(server):
    answer = client(server, "asker").answer(REDIS_Q)
    assert not answer.abstained and answer.citations and answer.blocks
    assert answer.citations[0].path == REDIS and answer.citations[0].n == 1
    assert all(1 <= n <= len(answer.citations) for b in answer.blocks for n in b.citations)
    assert len(answer.conversation_id) == 32 and len(answer.answer_id) == 32
    dumped = answer.model_dump()
    assert list(dumped)[:2] == ["answer", "blocks"] and "took_ms" in dumped  # as sent
    follow_up = client(server, "asker").answer("and how do I check which node is primary?",
                                               conversation_id=answer.conversation_id)
    assert follow_up.conversation_id == answer.conversation_id
    feedback = client(server, "asker").feedback(answer.answer_id, helpful=False,
                                                comment="step 2 is outdated")
    assert feedback.answer_id == answer.answer_id and feedback.helpful is False


def test_a_key_that_may_assert_identity_acts_for_the_user_it_names(server):
    bot = client(server, "bot")
    rotate = "rotate the payment provider API keys"
    as_security = bot.search(rotate, top_k=5,
                             acting_for=ActingFor("dana@example.com", ["security"]))
    as_someone = bot.search(rotate, top_k=5, acting_for=ActingFor("bob@example.com"))
    assert as_security.results[0].path == SECRET
    assert SECRET not in {hit.path for hit in as_someone.results}
    with pytest.raises(Forbidden):  # a key without --assert-identity may not name anyone
        client(server, "asker").search(rotate, acting_for=ActingFor("dana@example.com"))


def test_documents_and_sources(server):
    admin = client(server, "admin")
    hit = admin.search(REDIS_Q, top_k=1).results[0]
    document = admin.document(hit.document_id, include_content=True)
    assert document.id == hit.document_id and "Sentinel" in (document.content or "")
    assert document.chunks and all(c.text for c in document.chunks)
    assert admin.document(hit.document_id).content is None
    (kb,) = [s for s in client(server, "reader").sources() if s.name == "kb"]
    assert kb.declared and kb.documents == 4 and kb.chunks >= 4  # not the restricted one


def test_an_ingest_job_is_followed_until_it_is_done(server):
    seen: list[IngestJob] = []
    job = client(server, "cron").ingest(IngestRequest(source="kb"), on_update=seen.append,
                                        poll=0.2)
    assert job.status == "done" and job.finished, job
    (report,) = job.reports
    assert report.source == "kb" and report.status == "succeeded" and report.run_id
    assert seen[-1] == job and all(not j.finished for j in seen[:-1])


def test_verify_usage_and_health(server):
    assert client(server, "cron").verify().ok is True
    usage = client(server, "admin").usage(since="1h", group_by="key")
    assert usage.group_by == "key" and "reader" in {row["key"] for row in usage.rows}
    assert client(server, None).health().status == "ok"


# Errors from the server's problem documents ----------------------------------------------------


def test_a_bad_key_is_unauthorized(server):
    with pytest.raises(Unauthorized) as caught:
        CitewiseClient(server.url, "cw_nobody_nothing").search(REDIS_Q)
    e = caught.value
    assert (e.status, e.code) == (401, "unauthorized") and e.detail and e.request_id
    assert "check the API key" in str(e) and e.request_id in str(e)
    assert e.url == f"{server.url}/v1/search"


def test_a_key_without_the_scope_is_forbidden_and_told_which(server):
    with pytest.raises(Forbidden) as caught:
        client(server, "reader").answer(REDIS_Q)
    assert (caught.value.status, caught.value.code) == (403, "forbidden")
    assert "the answer request needs the 'answer' scope" in str(caught.value)


def test_a_denied_subject_is_a_guardrail_refusal_not_a_missing_scope(server):
    with pytest.raises(GuardrailBlocked) as caught:
        client(server, "asker").answer(DENIED)
    e = caught.value
    assert not isinstance(e, Forbidden) and e.status == 403 and "'hr' policy" in e.detail
    assert e.hint  # what the server says to do: ask the team that owns the subject


def test_an_unknown_document_or_conversation_is_not_found(server):
    with pytest.raises(NotFound) as caught:
        client(server, "reader").document("0" * 32)
    assert caught.value.code == "not_found"
    with pytest.raises(NotFound):
        client(server, "asker").answer(REDIS_Q, conversation_id="0" * 32)


def test_an_invalid_request_names_the_field(server):
    with pytest.raises(InvalidRequest) as caught:
        client(server, "reader").search(REDIS_Q, top_k=500)
    e = caught.value
    assert e.status == 422 and [err["field"] for err in e.errors] == ["top_k"]
    assert "the detail names the field" in str(e)


def test_a_held_run_lock_is_run_locked(server):
    with FileRunLock(server.services.settings.data.run_lock_path).held("citewise backup (test)"):
        with pytest.raises(RunLocked) as caught:
            client(server, "cron").start_ingest(IngestRequest(source="kb"))
    assert caught.value.status == 409 and "citewise backup (test)" in caught.value.detail


def test_over_the_rate_limit_says_when_to_retry(server):
    slow = client(server, "slow")
    slow.search(REDIS_Q, top_k=1)
    with pytest.raises(RateLimited) as caught:
        slow.search(REDIS_Q, top_k=1)
    e = caught.value
    assert e.status == 429 and e.retry_after is not None and 1 <= e.retry_after <= 60
    assert f"retry after {e.retry_after:g} s" in str(e)


def test_no_server_is_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable) as caught:
        CitewiseClient(url).health()
    e = caught.value
    assert e.status is None and e.reason and isinstance(e.__cause__, httpx.ConnectError)
    assert url in str(e) and "`citewise serve` is running" in str(e)


# Error answers a citewise server does not give, from a loopback server -------------------------


Answer = tuple[int, str, bytes]  # status, content type, body


@contextmanager
def answering(reply: Callable[[str], Answer], delay: float = 0.0) -> Iterator[str]:
    """An HTTP server on loopback answering every request with ``reply(path)``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            time.sleep(delay)
            status, kind, body = reply(self.path)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Request-Id", "req-loopback")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def problem(status: int, code: str, detail: str) -> Answer:
    body = {"type": f"urn:citewise:error:{code}", "title": code, "status": status,
            "detail": detail, "hint": None}
    return status, "application/problem+json", json.dumps(body).encode()


def test_the_kind_comes_from_the_type_urn_never_from_the_words():
    with answering(lambda path: problem(403, "forbidden", "the guardrail key lacks a scope")) \
            as url, pytest.raises(Forbidden) as caught:
        CitewiseClient(url).answer("anything")
    assert not isinstance(caught.value, GuardrailBlocked)
    with answering(lambda path: problem(403, "guardrail_blocked", "not here")) as url, \
            pytest.raises(GuardrailBlocked):
        CitewiseClient(url).answer("anything")
    # A code this client does not know is still a refusal with its code, classed by status.
    with answering(lambda path: problem(503, "index_locked", "another process")) as url, \
            pytest.raises(ServerError) as caught:
        CitewiseClient(url).health()
    assert caught.value.code == "index_locked" and caught.value.detail == "another process"


def test_a_proxys_error_page_is_classed_by_its_status():
    page = (502, "text/html", b"<html><body>502 Bad Gateway</body></html>")
    with answering(lambda path: page) as url, pytest.raises(ServerError) as caught:
        CitewiseClient(url).health()
    e = caught.value
    assert (e.status, e.code, e.request_id) == (502, None, "req-loopback")
    assert "502 Bad Gateway" in e.detail and "its logs know this request" in str(e)


def test_a_success_that_is_not_citewise_is_said_plainly():
    login = (200, "text/html", b"<form>Sign in</form>")
    with answering(lambda path: login) as url, pytest.raises(UnexpectedResponse) as caught:
        CitewiseClient(url).search("anything")
    assert caught.value.status == 200 and "not a citewise search response" in str(caught.value)


def test_a_server_that_stalls_is_unreachable_within_the_timeout():
    with answering(lambda path: (200, "application/json", b'{"status": "ok"}'), delay=3) \
            as url, pytest.raises(Unreachable) as caught:
        CitewiseClient(url, timeout=0.5).health()
    assert "did not answer within 0.5 s" in str(caught.value)

