"""The HTTP client against a real server on loopback: pagination, 429, 5xx, auth."""

from __future__ import annotations

import base64

import pytest

from citewise.connectors.confluence.client import (
    ClientSettings,
    ConfluenceAuthError,
    ConfluenceHttp,
    ConfluenceNotFound,
    ConfluenceUnavailable,
)
from tests.fakes.confluence_server import FakeConfluence, sample_site


@pytest.fixture
def site():
    model, ids = sample_site(filler=12)
    server = FakeConfluence(model, max_limit=4).start()
    yield server, ids
    server.stop()


def cloud_client(server, sleeps, token="cloud-secret-token", **kw) -> ConfluenceHttp:
    basic = base64.b64encode(f"bot@example.com:{token}".encode()).decode()
    settings = ClientSettings(requests_per_second=0, max_retries=kw.pop("max_retries", 3),
                              max_retry_wait=kw.pop("max_retry_wait", 5.0), backoff_base=0.01)
    return ConfluenceHttp(server.cloud_url, {"Authorization": f"Basic {basic}"}, settings,
                          sleep=sleeps.append, credential_hint="check CITEWISE_CONFLUENCE_TOKEN")


def test_pagination_follows_next_links_to_the_end(site):
    server, ids = site
    http = cloud_client(server, [])
    pages = list(http.pages("/api/v2/spaces/1000/pages", {"limit": 100}))
    assert len(pages) == 5  # 18 ENG pages, 4 per answer (the server caps limit)
    assert pages[-1][1] is None and all(link for _, link in pages[:-1])
    assert sum(len(r) for r, _ in pages) == 18


def test_429_waits_what_retry_after_says_with_a_bound(site):
    server, _ = site
    sleeps: list[float] = []
    http = cloud_client(server, sleeps)
    server.rate_limit_on = {1}
    server.retry_after = "3"
    assert http.get_json("/api/v2/spaces")["results"]
    assert sleeps == [3.0] and http.retries == 1
    # A server asking for an hour is waited on no longer than max_retry_wait.
    server.rate_limit_on = {len(server.log) + 1}
    server.retry_after = "3600"
    http.get_json("/api/v2/spaces")
    assert sleeps[-1] == 5.0


def test_transient_500_is_retried_and_a_persistent_one_gives_up(site):
    server, _ = site
    sleeps: list[float] = []
    http = cloud_client(server, sleeps)
    server.transient["/api/v2/spaces$"] = 2
    assert http.get_json("/api/v2/spaces")["results"]
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0] * 1.0 - 1e-9  # backoff grows
    server.failing.append("/labels")
    with pytest.raises(ConfluenceUnavailable, match="after 4 attempts"):
        http.get_json("/api/v2/pages/100001/labels")


def test_bad_credentials_fail_at_once_without_leaking_the_token(site):
    server, _ = site
    sleeps: list[float] = []
    http = cloud_client(server, sleeps, token="wrong-token-value")
    with pytest.raises(ConfluenceAuthError) as e:
        http.get_json("/api/v2/spaces", {"keys": "ENG"})
    assert "401" in str(e.value) and "CITEWISE_CONFLUENCE_TOKEN" in str(e.value)
    assert "wrong-token-value" not in str(e.value) and "keys=" not in str(e.value)
    assert sleeps == []  # never retried


def test_missing_page_is_not_found(site):
    server, _ = site
    with pytest.raises(ConfluenceNotFound):
        cloud_client(server, []).get_json("/api/v2/pages/999")
