"""The operator's console (the admin part of the page, api/web/console*.js), driven in Debian's
Chromium by Playwright against a real server: a small knowledge base ingested for real, three
days of usage, a failed run in its catalog, and feedback given through the API.

Reuses test_page.py's browser fixture (Chromium from the system; Playwright never downloads
one). Screenshots go to build/screenshots/ (docs/img/console-*.png are copies of them).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.gateway.settings import ProviderConfig
from citewise.ingest.jobs import run_source
from tests.console_data import seed_console
from tests.fakes.openai_provider import OpenAIProvider
from tests.kb import REDIS, folder_source, make_key, write_kb
from tests.live import LiveServer
from tests.web.test_page import CHROMIUM, SHOTS, WAIT, browser, shot, sync_api  # noqa: F401

assert CHROMIUM  # test_page skips the module without one

SECTIONS = ("sources", "usage", "models", "feedback", "keys", "audit")
# Every /v1/admin/... route the console reads (the POSTs are exercised by the triage test).
ADMIN_READS = ("/v1/admin/sources", "/v1/admin/usage?window=24h", "/v1/admin/models",
               "/v1/admin/feedback?status=open")


@pytest.fixture(scope="module")
def console(tmp_path_factory, dense) -> Iterator[dict]:
    """A server that requires a key, with an admin key and a search-only key: the small
    knowledge base ingested for real as source "kb", the console's synthetic history
    (``tests/console_data.py``: 30 days of usage, two more sources whose runs the catalog holds,
    the last one of source-00 failed, and feedback naming a document of "kb"), and two model
    providers on loopback, the first of which failed once, so the second wrote an answer."""
    root = tmp_path_factory.mktemp("console")
    kb = write_kb(root / "kb")
    first, second = OpenAIProvider(model="m-1").start(), OpenAIProvider(model="m-2").start()
    for fake in (first, second):
        fake.reply = "Fail over the cache with the sentinel command [1]."
    first.script = ["500"]
    settings = Settings(
        data_dir=root / "data", require_auth=True, answer_cache=False, llm_max_attempts=2,
        sources=[folder_source(kb, "kb")],
        llm_providers=[ProviderConfig(name="first", base_url=first.base_url, model="m-1"),
                       ProviderConfig(name="second", base_url=second.base_url, model="m-2",
                                      input_price=1.0, output_price=2.0)])
    services = build_services(settings)
    report = run_source(services.pipeline, settings.sources[0], trigger="test")
    assert report.status == "succeeded", report.summary()
    seeded = seed_console(services.stores, principals=6, sources=2, days=30, feedback=3,
                          right_documents=(f"kb/{REDIS}",))
    admin = make_key(services, "console-admin", scopes="search,answer,ingest,admin")
    reader = make_key(services, "console-reader", scopes="search,answer")
    admin_only = make_key(services, "console-admin-only", scopes="admin")
    try:
        with LiveServer(create_app(settings=settings, services=services), settings) as url:
            answered = httpx.post(f"{url}/v1/answer", headers=reader, timeout=WAIT / 1000,
                                  json={"question": "How do I fail over the redis cache?"})
            assert answered.json()["provider"] == "second", answered.text
            yield {"url": url, "services": services, "seeded": seeded, "settings": settings,
                   "failed_run": seeded.failed_run_id, "admin": admin, "reader": reader,
                   "admin_only": admin_only}
    finally:
        services.close()
        first.stop()
        second.stop()


def secret(headers: dict) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


@pytest.fixture
def admin_page(browser, console):  # noqa: F811 (the fixture of test_page.py)
    """The page signed in with the admin key, every request it makes recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    # The strict policy refuses any inline style or script a chart library might add: none.
    page.on("console", lambda m: errors.append(m.text)
            if "Content Security Policy" in m.text else None)
    page.goto(console["url"] + "/#console")
    sign_in(page, secret(console["admin"]))
    sync_api.expect(page.locator("#views")).to_be_visible()
    page.requests = requests  # type: ignore[attr-defined]
    yield page
    context.close()
    assert not errors, errors
    # Whatever the test did in the console, the page asked this server only.
    assert {urlsplit(u).netloc for u in requests} == {urlsplit(console["url"]).netloc}


def sign_in(page, key: str) -> None:
    page.fill("#key", key)
    page.keyboard.press("Enter")
    sync_api.expect(page.locator("#signin")).to_be_hidden()


def open_section(page, name: str):
    page.locator(f"#console-nav a[data-section='{name}']").click()
    body = page.locator(f"#console-body[data-section='{name}']")
    sync_api.expect(body.locator(".section-head h2")).to_be_visible(timeout=WAIT)
    return body


def test_every_section_renders_and_nothing_leaves_this_server(admin_page, console):
    page = admin_page
    sync_api.expect(page.locator("#console")).to_be_visible()
    titles = {}
    for name in SECTIONS:
        body = open_section(page, name)
        assert body.locator(".problem").count() == 0, body.inner_text()
        titles[name] = body.locator(".section-head h2").inner_text()
    assert titles == {"sources": "Sources", "usage": "Usage and cost", "models": "Models",
                      "feedback": "Feedback", "keys": "Keys", "audit": "Audit"}
    # Every request of every section went to this server, and nowhere else.
    hosts = {urlsplit(u).netloc for u in page.requests}
    assert hosts == {urlsplit(console["url"]).netloc}, hosts
    assert any("/ui/vendor/uPlot.iife.min.js" in u for u in page.requests)


def test_sources_show_the_failed_run_its_errors_and_sparklines(admin_page, console):
    page = admin_page
    body = open_section(page, "sources")
    listed = httpx.get(console["url"] + "/v1/admin/sources", headers=console["admin"]).json()
    assert {s["name"] for s in listed["sources"]} == {"kb", "source-00", "source-01"}
    failed = body.locator("article.source[data-source='source-00']")
    sync_api.expect(failed.locator(".source-head")).to_contain_text("failed")
    sync_api.expect(failed).to_contain_text("runbooks/broken-link.md")
    sync_api.expect(failed).to_contain_text("cannot read file: Permission denied")
    # Indexed, not declared: nothing to run by name.
    sync_api.expect(failed.get_by_role("button", name="Run now")).to_be_disabled()
    for source in listed["sources"]:
        card = body.locator(f"article.source[data-source='{source['name']}']")
        sparks = card.locator("figure.spark")
        sync_api.expect(sparks).to_have_count(2)
        for i, field in enumerate(("duration_s", "documents")):
            spark = sparks.nth(i)
            assert spark.get_attribute("data-points") == str(len(source["history"]))
            spark.locator("canvas").wait_for()
            drawn = spark.evaluate("f => f.chart.data[1]")
            assert drawn == pytest.approx([r[field] for r in source["history"]]), source["name"]
    assert len(listed["sources"][1]["history"]) == 30  # a seeded source's last 30 runs
    # A run's page: its per-document errors, as GET /v1/ingest/runs/{id} gives them.
    failed.locator("a", has_text=f"#{console['failed_run']}").first.click()
    run = page.locator("#console-body[data-section='runs']")
    sync_api.expect(run.locator("h2")).to_contain_text(
        f"Run #{console['failed_run']} of source-00")
    errors = run.locator("table.data tbody tr")
    sync_api.expect(errors).to_have_count(4)
    sync_api.expect(errors.first).to_contain_text("runbooks/huge-dump.md")
    sync_api.expect(errors.last).to_contain_text("(the run)")
    sync_api.expect(run).to_contain_text("the mass-deletion brake stopped the run")


@pytest.mark.parametrize(("window", "points"), [("24h", 24), ("7d", 7), ("30d", 30)])
def test_usage_charts_draw_one_point_per_bucket(admin_page, console, window, points):
    page = admin_page
    body = open_section(page, "usage")
    with page.expect_response(lambda r: f"/v1/admin/usage?window={window}" in r.url) as got:
        body.locator(f".switch button[data-window='{window}']").click()
    report = got.value.json()
    sync_api.expect(body.locator(f".switch button[data-window='{window}']")).to_have_attribute(
        "aria-pressed", "true")
    charts = body.locator("figure.chart")
    sync_api.expect(charts).to_have_count(5)
    charts.last.locator("canvas").wait_for()
    assert len(report["series"]) == points
    for i in range(charts.count()):
        figure = charts.nth(i)
        assert figure.get_attribute("data-points") == str(points)
        assert figure.evaluate("f => f.chart.data[0].length") == points
    # The first chart is the server's requests per bucket, as they are.
    drawn = charts.first.evaluate("f => f.chart.data[1]")
    assert drawn == [p["requests"] for p in report["series"]]
    assert sum(drawn) > 0
    # The accessible table behind it holds the same numbers, one row per bucket.
    assert charts.first.locator("table.data tbody tr").count() == points
    for dim in ("provider", "route", "key", "principal"):
        sync_api.expect(body.locator(f"section.top[data-top='{dim}']")).to_be_visible()
    rows = body.locator("section.top[data-top='principal'] tbody tr")
    assert rows.count() == len(report["top"]["principal"]) >= 3
    if window == "7d":
        shot(page, "console-usage.png")


def test_run_now_starts_a_job_whose_progress_reaches_done(admin_page):
    page = admin_page
    body = open_section(page, "sources")
    card = body.locator("article.source[data-source='kb']")
    with page.expect_response(lambda r: r.url.endswith("/v1/ingest/jobs")
                              and r.request.method == "POST") as started:
        card.get_by_role("button", name="Run now").click()
    assert started.value.status == 202, started.value.text()
    job = started.value.json()["id"]
    progress = card.locator(".progress")
    sync_api.expect(progress).to_have_attribute("data-job", job)
    sync_api.expect(progress).to_have_attribute("data-status", "done", timeout=WAIT)
    sync_api.expect(progress).to_contain_text("run #")
    shot(page, "console-sources.png")


def test_verify_reports_that_the_index_agrees(admin_page):
    body = open_section(admin_page, "sources")
    body.get_by_role("button", name="Verify the index").click()
    sync_api.expect(body.locator(".verify")).to_have_attribute("data-ok", "true", timeout=WAIT)


def test_a_key_created_in_the_console_works_until_revoked(admin_page, console):
    page = admin_page
    body = open_section(page, "keys")
    form = body.locator("form.key-form")
    form.locator("input[name='name']").fill("made-in-console")
    with page.expect_response(lambda r: r.url.endswith("/v1/keys")
                              and r.request.method == "POST") as created:
        form.get_by_role("button", name="Create").click()
    assert created.value.status == 201
    shown = body.locator("#new-secret")
    sync_api.expect(shown).to_be_visible()
    key = shown.inner_text()
    assert key.startswith("cw_") and key == created.value.json()["secret"]
    # The key works from anywhere, as curl would send it.
    search = f"{console['url']}/v1/search?q=redis"
    assert httpx.get(search, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    row = body.locator("tbody tr", has_text="made-in-console")
    sync_api.expect(row).to_contain_text("active")
    revoke = row.get_by_role("button", name="Revoke made-in-console")
    revoke.click()
    sync_api.expect(revoke).to_have_text("Revoke for good?")
    with page.expect_response(lambda r: "/v1/keys/made-in-console" in r.url):
        revoke.click()
    sync_api.expect(body.locator("tbody tr", has_text="made-in-console")).to_contain_text(
        "revoked")
    assert body.locator("#new-secret").count() == 0  # shown once, gone after
    assert httpx.get(search, headers={"Authorization": f"Bearer {key}"}).status_code == 401
    shot(page, "console-keys.png")


def test_feedback_triage_adds_to_the_golden_set_and_dismisses(admin_page, console):
    page = admin_page
    body = open_section(page, "feedback")
    chart = body.locator("figure.chart")
    sync_api.expect(chart).to_have_attribute("data-points", "30")
    opened = httpx.get(console["url"] + "/v1/admin/feedback?status=open",
                       headers=console["admin"]).json()
    assert chart.evaluate("f => f.chart.data[2]") == [c["not_helpful"] for c in opened["counts"]]
    items = body.locator("article.feedback-item")
    sync_api.expect(items).to_have_count(len(opened["items"]))
    first = items.filter(has_text="wrong runbook (1)")
    sync_api.expect(first).to_contain_text("How do I recover the worker pool 1?")
    sync_api.expect(first).to_contain_text(f"kb/{REDIS}")
    shot(page, "console-feedback.png")
    with page.expect_response(lambda r: r.url.endswith("/golden")) as added:
        first.get_by_role("button", name="Add to golden set").click()
    assert added.value.status == 201, added.value.text()
    sync_api.expect(first).to_have_attribute("data-status", "added")
    sync_api.expect(first).to_contain_text(added.value.json()["path"])
    other = items.filter(has_text="wrong runbook (2)")
    other.get_by_role("button", name="Dismiss").click()
    sync_api.expect(other).to_have_attribute("data-status", "dismissed")
    still_open = httpx.get(console["url"] + "/v1/admin/feedback?status=open",
                           headers=console["admin"]).json()
    assert len(still_open["items"]) == len(opened["items"]) - 2
    added_now = httpx.get(console["url"] + "/v1/admin/feedback?status=added",
                          headers=console["admin"]).json()
    assert [i["comment"] for i in added_now["items"]] == ["wrong runbook (1)"]


def test_the_audit_log_filters_by_action_and_actor(admin_page):
    page = admin_page
    open_section(page, "keys")  # a keys.list entry by this key
    body = open_section(page, "audit")
    rows = body.locator("tbody tr")
    sync_api.expect(rows.first).to_be_visible()
    body.locator("input[name='action']").fill("keys.list")
    body.locator("input[name='actor']").fill("key:console-admin")
    with page.expect_response(lambda r: "action=keys.list" in r.url
                              and "actor=key%3Aconsole-admin" in r.url):
        body.get_by_role("button", name="Filter").click()
    sync_api.expect(body.locator("caption")).to_contain_text("action keys.list")
    assert rows.count() >= 1
    assert set(body.locator("tbody tr td:nth-child(4)").all_inner_texts()) == {"keys.list"}
    assert set(body.locator("tbody tr td:nth-child(2)").all_inner_texts()) == {
        "key:console-admin"}


def test_models_show_each_providers_breaker_errors_and_failovers(admin_page, console):
    body = open_section(admin_page, "models")
    got = httpx.get(console["url"] + "/v1/admin/models", headers=console["admin"]).json()
    rows = body.locator("tbody tr")
    sync_api.expect(rows).to_have_count(len(got["providers"]))
    assert [p["name"] for p in got["providers"]] == ["first", "second"]
    first, second = rows.nth(0), rows.nth(1)
    sync_api.expect(first.locator(".badge")).to_have_text("closed")
    # first: one call, one error (100 %); second: the answer, after the failover.
    assert first.locator("td").nth(4).inner_text() == str(got["providers"][0]["requests"])
    assert first.locator("td").nth(6).inner_text() == "100.0 %"
    assert second.locator("td").nth(8).inner_text() == str(got["providers"][1]["failovers"])
    sync_api.expect(body).to_contain_text(got["replica"])


def test_the_operator_on_this_machine_sees_the_console_without_a_key(browser, console):  # noqa: F811
    """Local mode (no key required, `make run`): a loopback caller has every scope."""
    settings = console["settings"].replaced(require_auth=False)
    app = create_app(settings=settings, services=console["services"])
    with LiveServer(app, settings) as url:
        context = browser.new_context()
        page = context.new_page()
        page.goto(url + "/#console/keys")
        sync_api.expect(page.locator("#who")).to_contain_text("this machine (local mode)")
        sync_api.expect(page.locator("#console-body[data-section='keys'] h2")).to_have_text(
            "Keys")
        sync_api.expect(page.locator("#signin")).to_be_hidden()
        context.close()


def test_a_non_admin_key_sees_no_console(browser, console):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    page.goto(console["url"] + "/#console/keys")
    sign_in(page, secret(console["reader"]))
    sync_api.expect(page.locator("#who")).to_contain_text("console-reader")
    sync_api.expect(page.locator("#views")).to_be_hidden()
    sync_api.expect(page.locator("#console")).to_be_hidden()
    sync_api.expect(page.locator("#ask-view")).to_be_visible()
    assert page.locator("#console-body *").count() == 0  # nothing was fetched for it
    for path in ADMIN_READS:
        assert httpx.get(console["url"] + path, headers=console["reader"]).status_code == 403
    context.close()


def test_an_admin_key_without_ingest_sees_sources_but_cannot_run_them(browser, console):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    page.goto(console["url"] + "/#console/sources")
    sign_in(page, secret(console["admin_only"]))
    body = page.locator("#console-body[data-section='sources']")
    card = body.locator("article.source[data-source='kb']")
    sync_api.expect(card.get_by_role("button", name="Run now")).to_be_disabled()
    sync_api.expect(body.get_by_role("button", name="Verify the index")).to_be_disabled()
    sync_api.expect(body).to_contain_text("needs the ingest scope")
    assert body.locator(".problem").count() == 0
    assert httpx.get(console["url"] + "/v1/ingest/runs",
                     headers=console["admin_only"]).status_code == 403
    context.close()


def test_without_upLot_the_console_shows_its_tables_and_says_why(browser, console):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    # A server installed without `make setup` lists no vendor files.
    page.route("**/ui/vendor/", lambda route: route.fulfill(json={"files": []}))
    page.goto(console["url"] + "/#console/usage")
    sign_in(page, secret(console["admin"]))
    body = page.locator("#console-body[data-section='usage']")
    figure = body.locator("figure.chart").first
    sync_api.expect(figure.locator("table.data")).to_be_visible(timeout=WAIT)
    sync_api.expect(figure).to_contain_text("make setup")
    assert figure.locator("canvas").count() == 0
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_in_both_colour_schemes(browser, console, scheme):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, color_scheme=scheme)
    page = context.new_page()
    page.goto(console["url"] + "/#console/usage")
    sign_in(page, secret(console["admin"]))
    body = page.locator("#console-body[data-section='usage']")
    body.locator("figure.chart canvas").first.wait_for(timeout=WAIT)
    sync_api.expect(body.locator("figure.chart canvas")).to_have_count(5)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == ("rgb(21, 23, 26)" if scheme == "dark" else "rgb(247, 247, 245)")
    page.screenshot(path=str(SHOTS / f"console-usage-{scheme}.png"))  # the first screen only
    page.goto(console["url"] + "/#console/sources")
    page.reload()
    sign_in(page, secret(console["admin"]))
    page.locator("#console-body[data-section='sources'] figure.spark canvas").first.wait_for(
        timeout=WAIT)
    page.screenshot(path=str(SHOTS / f"console-sources-{scheme}.png"))
    context.close()


def test_the_chart_library_is_served_from_here_under_the_page_policy(console):
    url = console["url"]
    listed = httpx.get(url + "/ui/vendor/").json()["files"]
    if "uPlot.iife.min.js" not in listed:
        pytest.skip("uPlot is not in api/web/vendor/: run make setup (api/web_vendor.py)")
    assert sorted(listed) == ["uPlot.LICENSE.txt", "uPlot.iife.min.js", "uPlot.min.css"]
    script = httpx.get(url + "/ui/vendor/uPlot.iife.min.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "script-src 'self'" in script.headers["content-security-policy"]
    assert "unsafe-inline" not in httpx.get(url + "/").headers["content-security-policy"]
    assert httpx.get(url + "/ui/vendor/LICENSE").status_code == 404
