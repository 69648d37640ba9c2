"""citewise as an OpenAI-compatible model, used through the official ``openai`` client as any
chat front end, IDE assistant or agent framework would use it."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.gateway.settings import ProviderConfig
from citewise.ingest.jobs import run_source
from tests.fakes.openai_provider import OpenAIProvider, cite_first_passage
from tests.kb import REDIS, folder_source, make_key, write_kb
from tests.live import LiveServer

REDIS_Q = [{"role": "user", "content": "How do I fail over the Redis cache?"}]


def serve(base, dense, **settings) -> tuple:
    kb = write_kb(base / "kb")
    settings = Settings(data_dir=base / "data", require_auth=True, **settings)
    services = build_services(settings)
    assert run_source(services.pipeline, folder_source(kb), trigger="t").status == "succeeded"
    return services, create_app(services=services)


@pytest.fixture(scope="module")
def extractive(tmp_path_factory, dense) -> Iterator[tuple[str, object]]:
    services, app = serve(tmp_path_factory.mktemp("chat"), dense)
    key = make_key(services, "chat", scopes="answer")["Authorization"].split()[1]
    search_only = make_key(services, "reader", scopes="search")["Authorization"].split()[1]
    with LiveServer(app, services.settings) as url:
        yield url, key, search_only
    services.close()


@pytest.fixture(scope="module")
def provider() -> Iterator[OpenAIProvider]:
    fake = OpenAIProvider().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def generated(tmp_path_factory, dense, provider) -> Iterator[tuple[str, str]]:
    # Without the answer cache: every request here must reach the provider.
    services, app = serve(tmp_path_factory.mktemp("chat-llm"), dense, answer_cache=False,
                          llm_providers=[
        ProviderConfig(name="loop", base_url=provider.base_url, model=provider.model)])
    key = make_key(services, "chat", scopes="answer")["Authorization"].split()[1]
    with LiveServer(app, services.settings) as url:
        yield url, key
    services.close()


def client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def test_the_model_list_names_citewise(extractive):
    url, key, _ = extractive
    assert [m.id for m in client(url, key).models.list()] == ["citewise"]
    assert client(url, key).models.retrieve("citewise").owned_by == "citewise"


def test_a_completion_answers_with_numbered_links_and_a_citations_field(extractive):
    url, key, _ = extractive
    resp = client(url, key).chat.completions.create(model="citewise", messages=REDIS_Q)
    content = resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop" and resp.model == "citewise"
    assert "[1]" in content
    assert f"\n[1]: {url}/v1/documents/" in content  # a Markdown reference link for [1]
    citations = resp.model_extra["citations"]
    assert citations[0]["path"] == REDIS and citations[0]["n"] == 1
    assert resp.model_extra["citewise"]["mode"] == "extractive"
    assert resp.usage.total_tokens == 0  # no model was called


def test_a_streamed_completion_gives_the_same_answer(extractive):
    url, key, _ = extractive
    c = client(url, key)
    whole = c.chat.completions.create(model="citewise", messages=REDIS_Q)
    chunks = list(c.chat.completions.create(model="citewise", messages=REDIS_Q, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.strip() == whole.choices[0].message.content.strip()
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].model_extra["citations"][0]["path"] == REDIS
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


def test_a_follow_up_is_answered_in_the_conversations_context(extractive):
    url, key, _ = extractive
    resp = client(url, key).chat.completions.create(model="citewise", messages=[
        *REDIS_Q, {"role": "assistant", "content": "Check Sentinel first [1]."},
        {"role": "user", "content": "and what comes after that?"}])
    assert resp.model_extra["citations"][0]["path"] == REDIS


def test_an_unknown_model_is_a_404(extractive):
    url, key, _ = extractive
    with pytest.raises(openai.NotFoundError) as raised:
        client(url, key).chat.completions.create(model="gpt-4o", messages=REDIS_Q)
    assert "citewise" in str(raised.value)


def test_identity_and_scopes_apply(extractive):
    url, key, search_only = extractive
    with pytest.raises(openai.AuthenticationError):
        client(url, "cw_nobody_nothing").chat.completions.create(model="citewise",
                                                                 messages=REDIS_Q)
    with pytest.raises(openai.PermissionDeniedError):
        client(url, search_only).chat.completions.create(model="citewise", messages=REDIS_Q)


def test_a_restricted_runbook_never_reaches_a_chat_client(extractive):
    url, key, _ = extractive
    resp = client(url, key).chat.completions.create(model="citewise", messages=[
        {"role": "user", "content": "How do I rotate the payment provider API keys?"}])
    assert "vault" not in resp.choices[0].message.content.lower()
    assert all("secrets" not in c["path"] for c in resp.model_extra["citations"])


def test_a_generated_answer_streams_through_the_client_with_its_usage(generated, provider):
    url, key = generated
    provider.mode, provider.reply = "ok", cite_first_passage
    chunks = list(client(url, key).chat.completions.create(
        model="citewise", messages=REDIS_Q, stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.startswith("Roll back the release first [")
    assert chunks[-1].usage.prompt_tokens == 812
    final = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason][0]
    assert final.model_extra["citewise"]["mode"] == "llm"


def test_a_stream_that_breaks_midway_raises_in_the_client(generated, provider):
    url, key = generated
    provider.mode = "drop"
    try:
        with pytest.raises(openai.APIError) as raised:
            for _ in client(url, key).chat.completions.create(model="citewise",
                                                              messages=REDIS_Q, stream=True):
                pass
        assert "broke off" in str(raised.value)
    finally:
        provider.mode = "ok"
