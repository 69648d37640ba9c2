"""A real citewise server for the client's tests: the small test knowledge base as source "kb",
keys required, a deny-list guardrail, and keys that differ in what they may do."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from citewise.api.app import create_app
from citewise.api.composition import Services, build_services
from citewise.api.settings import GuardrailConfig, Settings
from citewise.ingest.jobs import run_source
from tests.kb import folder_source, make_key, write_kb
from tests.live import LiveServer

DENIED = "What is the salary band for an L5?"  # the "hr" policy refuses it


@dataclass
class Server:
    url: str
    services: Services
    keys: dict[str, str]  # name -> secret


@pytest.fixture(scope="session")
def server(tmp_path_factory, dense) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("client-server")
    settings = Settings(data_dir=base / "data", require_auth=True, answer_cache=False,
                        sources=[folder_source(write_kb(base / "kb"))],
                        guardrails=[GuardrailConfig(name="hr", kind="deny", action="block",
                                                    terms=["salary"])])
    services = build_services(settings)
    assert run_source(services.pipeline, settings.sources[0], trigger="test").status == \
        "succeeded"

    def secret(name: str, scopes: str, **options) -> str:
        return make_key(services, name, scopes=scopes, **options)["Authorization"].split()[1]

    keys = {
        "reader": secret("reader", "search"),
        "asker": secret("asker", "search,answer"),
        "bot": secret("bot", "search,answer", assert_identity=True),
        "cron": secret("cron", "ingest"),
        "admin": secret("admin", "search,answer,ingest,admin"),
        "slow": secret("slow", "search", limits=["search_per_minute=1"]),
    }
    try:
        with LiveServer(create_app(services=services), settings) as url:
            yield Server(url, services, keys)
    finally:
        services.close()
