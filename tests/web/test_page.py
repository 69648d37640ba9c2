"""The web page at /, driven in a real headless Chromium (Debian's package) by Playwright,
against a real citewise server holding the demo knowledge base.

Screenshots go to build/screenshots/ (docs/img/page-answer.png is one of them). Chromium comes
from the system (`.ci/run` installs Debian's `chromium`); Playwright never downloads a browser.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from citewise.api.app import create_app
from tests.kb import make_key, stored_rows
from tests.live import LiveServer

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no chromium on PATH: apt-get install -y --no-install-recommends chromium "
                "(.ci/run does)", allow_module_level=True)

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
REDIS = "How do I fail over the Redis cache?"
RESTRICTED_TITLE = "Rotating payment provider API keys"
WAIT = 60_000  # ms: the first answer of a session warms the model up


@pytest.fixture(scope="module")
def server(demo_kb) -> Iterator[str]:
    """The demo on loopback in local mode: no key needed, as after `make run`."""
    services, _ = demo_kb
    with LiveServer(create_app(services=services), services.settings) as url:
        yield url


@pytest.fixture(scope="module")
def locked_server(demo_kb) -> Iterator[tuple[str, dict[str, str]]]:
    """The same knowledge behind a front door that requires a key, and keys for two people."""
    services, _ = demo_kb
    settings = services.settings.replaced(require_auth=True)
    keys = {}
    for name, principal in (("page-bob", "user:bob"), ("page-sec", "group:security")):
        header = make_key(services, name, scopes="search,answer", principal=principal)
        keys[name] = header["Authorization"].removeprefix("Bearer ")
    with LiveServer(create_app(settings=settings, services=services), settings) as url:
        yield url, keys


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1200, "height": 900},
                                  permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(server + "/")
    yield page
    context.close()
    # A failed request shows as a console error too; none is expected on the happy paths.
    assert not errors, errors


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)
    print(f"screenshot: {SHOTS / name}")


def ask(page, question: str, turn: int = 1):
    page.fill("#q", question)
    with page.expect_response(lambda r: r.url.endswith("/v1/answer")) as answered:
        page.keyboard.press("Enter")
    answer = page.locator(f"article.turn >> nth={turn - 1}").locator(".answer")
    answer.locator(".meta").filter(has_text="evidence").wait_for(timeout=WAIT)
    return answered.value, answer


def test_the_page_says_who_you_are_and_focuses_the_question(page):
    sync_api.expect(page.locator("#who")).to_contain_text("Signed in as this machine")
    sync_api.expect(page.locator("#q")).to_be_focused()
    page.locator("body").click()
    page.keyboard.press("/")
    sync_api.expect(page.locator("#q")).to_be_focused()


def test_a_question_streams_in_as_a_cited_answer(page):
    response, answer = ask(page, REDIS)
    assert response.headers["content-type"].startswith("text/event-stream")
    sync_api.expect(answer).not_to_have_class("answer streaming")
    # The steps of the runbook, with the command to run, not only a pointer to it.
    sync_api.expect(answer.locator(".blocks")).to_contain_text("aws elasticache test-failover")
    assert answer.locator(".blocks .code").count() >= 2
    sources = answer.locator(".sources .citation")
    assert sources.count() >= 1
    sync_api.expect(sources.first).to_contain_text("runbooks/redis-cache-failover.md:")
    sync_api.expect(answer.locator(".meta")).to_contain_text("extractive answer")
    # Every [n] in the text resolves to a listed source.
    listed = {f"[{i + 1}]" for i in range(sources.count())}
    markers = set(answer.locator("a.cite").all_inner_texts())
    assert markers and markers <= listed
    shot(page, "page-answer.png")


def test_a_citation_opens_to_its_quote_and_its_lines_in_the_document(page):
    _, answer = ask(page, REDIS)
    answer.locator("a.cite").first.click()
    citation = answer.locator("details.citation").first
    sync_api.expect(citation).to_have_attribute("open", "")
    quote = citation.locator("blockquote")
    sync_api.expect(quote).to_be_visible()
    where = citation.locator(".where").inner_text()  # runbooks/redis-cache-failover.md:49-66
    first, last = (int(n) for n in where.rsplit(":", 1)[1].split("-"))
    citation.get_by_role("button", name="Show in the document").click()
    viewer = page.locator("#viewer")
    sync_api.expect(viewer).to_be_visible()
    cited = viewer.locator(".line.cited")
    cited.first.wait_for(timeout=WAIT)
    assert cited.count() == last - first + 1
    assert cited.first.locator(".no").inner_text() == str(first)
    # The quote is the text of those lines (the lines are Markdown, the quote plain text).
    lines = " ".join(cited.all_inner_texts())
    words = [w for w in quote.inner_text().split() if w.isalpha() and len(w) > 5]
    assert words and all(w in lines for w in words[:8]), (words, lines)
    shot(page, "page-document.png")
    page.keyboard.press("Escape")
    sync_api.expect(viewer).to_be_hidden()


def test_a_command_is_copied_with_one_click(page):
    _, answer = ask(page, REDIS)
    block = answer.locator(".blocks .code").first
    command = block.locator("code").inner_text()
    block.locator("button.copy").click()
    sync_api.expect(block.locator("button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == command


def test_a_follow_up_continues_the_conversation(page):
    # (Asked as "Is there a runbook for failing over the redis cache?", the demo now ranks
    # docs/retrievers.md first: its examples pass sources=["runbooks"] and quote the question.)
    ask(page, "How do I fail over the redis cache?")
    sync_api.expect(page.locator("#new-btn")).to_be_visible()
    response, second = ask(page, "how do I trigger it by hand?", turn=2)
    sent = response.request.post_data_json
    assert len(sent["conversation_id"]) == 32
    rewritten = page.locator("article.turn >> nth=1").locator(".rewritten")
    sync_api.expect(rewritten).to_contain_text("redis", ignore_case=True)
    sync_api.expect(second.locator(".blocks")).to_contain_text("aws elasticache test-failover")
    page.locator("#new-btn").click()
    assert page.locator("article.turn").count() == 0


def test_search_with_filters_shows_only_the_chosen_source(page):
    page.locator("#filters summary").click()
    page.locator("#f-sources input[value='wiki']").check()
    sync_api.expect(page.locator("#filter-count")).to_have_text("(1)")
    page.fill("#q", "postgres")
    with page.expect_response(lambda r: "/v1/search?" in r.url) as searched:
        page.locator("#search-btn").click()
    assert "source=wiki" in searched.value.url
    results = page.locator("#results article.result")
    results.first.wait_for(timeout=WAIT)
    assert results.count() >= 1
    assert set(results.locator(".badge >> nth=0").all_inner_texts()) == {"wiki"}
    shot(page, "page-search.png")
    # A service filter narrows runbooks to that service's.
    page.locator("#clear-filters").click()
    page.locator("#f-services input[value='postgres-main']").check()
    with page.expect_response(lambda r: "/v1/search?" in r.url) as searched:
        page.locator("#search-btn").click()
    assert "service=postgres-main" in searched.value.url and "source=" not in searched.value.url
    sync_api.expect(page.locator("#results h2")).to_contain_text("passages for")
    sync_api.expect(results.first).to_contain_text("postgres-main")
    for text in results.all_inner_texts():
        assert "postgres-main" in text


def test_feedback_is_sent_with_the_wrong_citation_and_the_right_document(page, demo_kb):
    services, _ = demo_kb
    _, answer = ask(page, REDIS)
    answer.get_by_role("button", name="Not helpful").click()
    answer.get_by_role("textbox", name="What was wrong?").fill("step order changed in March")
    answer.get_by_role("combobox", name="Which source was wrong?").select_option("1")
    answer.get_by_role("textbox", name="The right document").fill(
        "runbooks/redis-cache-failover.md")
    answer.get_by_role("button", name="Send").click()
    sync_api.expect(answer.locator(".feedback .thanks")).to_be_visible()
    row = stored_rows(services).execute(
        "SELECT helpful, comment, wrong_citation, right_document FROM feedback "
        "ORDER BY id DESC LIMIT 1").fetchone()
    assert tuple(row) == (0, "step order changed in March", 1,
                          "runbooks/redis-cache-failover.md")


def test_dark_mode_for_the_night_shift(browser, server):
    context = browser.new_context(viewport={"width": 1200, "height": 900}, color_scheme="dark")
    page = context.new_page()
    # A shared link fills the question in and waits for Enter (it never asks unseen).
    page.goto(server + "/?q=" + REDIS.replace(" ", "+"))
    sync_api.expect(page.locator("#q")).to_have_value(REDIS)
    sync_api.expect(page.locator("#status")).to_contain_text("Press Enter")
    assert page.locator("article.turn").count() == 0
    page.keyboard.press("Enter")
    page.locator(".answer .meta").filter(has_text="evidence").wait_for(timeout=WAIT)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(21, 23, 26)"
    shot(page, "page-answer-dark.png")
    context.close()


def test_sign_in_with_a_key_shows_only_what_that_person_may_read(browser, locked_server):
    url, keys = locked_server
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "/")
    signin = page.locator("#signin")
    sync_api.expect(signin).to_be_visible()
    sync_api.expect(page.locator("#signin-why")).to_contain_text("requires an API key")
    # A wrong key: the server's reason, and the form again.
    page.fill("#key", "cw_nosuchkey0_" + "x" * 30)
    page.keyboard.press("Enter")
    sync_api.expect(page.locator("#signin-why")).to_contain_text("The server says")
    sync_api.expect(page.locator("#signin-why")).to_contain_text("key")
    sync_api.expect(signin).to_be_visible()

    def search_as(key: str) -> list[str]:
        page.fill("#key", key)
        page.keyboard.press("Enter")
        sync_api.expect(signin).to_be_hidden()
        page.fill("#q", "rotate the payment provider API keys")
        with page.expect_response(lambda r: "/v1/search?" in r.url) as searched:
            page.locator("#search-btn").click()
        assert searched.value.ok, (searched.value.status, searched.value.text())
        page.locator("#results article.result").first.wait_for(timeout=WAIT)
        return page.locator("#results article.result h3").all_inner_texts()

    titles = search_as(keys["page-bob"])
    sync_api.expect(page.locator("#who")).to_contain_text("Signed in as bob")
    assert not any(RESTRICTED_TITLE in t for t in titles)
    # The key lives in the page's memory only, never in storage other scripts could read.
    assert page.evaluate("sessionStorage.length + localStorage.length") == 0
    page.locator("#signout").click()
    sync_api.expect(signin).to_be_visible()
    assert page.locator("#results article.result").count() == 0  # bob's results are gone
    titles = search_as(keys["page-sec"])
    assert any(RESTRICTED_TITLE in t for t in titles)
    context.close()


def test_a_late_answer_to_a_mistyped_key_does_not_sign_out_the_right_one(browser, locked_server):
    """The answer to a mistyped key can arrive after the right key was pasted (a slow network,
    a busy server); it must neither forget the right key nor show the sign-in form again."""
    url, keys = locked_server
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "/")
    held = []
    wrong = "cw_nosuchkey0_" + "y" * 30

    def hold_the_wrong_key(route):
        if route.request.headers.get("authorization") == f"Bearer {wrong}":
            held.append(route)  # answered only after the right key has signed in
        else:
            route.continue_()

    page.route("**/v1/me", hold_the_wrong_key)
    page.fill("#key", wrong)
    page.keyboard.press("Enter")
    deadline = time.monotonic() + WAIT / 1000
    while not held and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # route handlers run while Playwright waits
    assert len(held) == 1, "the mistyped key's /v1/me never reached the route"
    sync_api.expect(page.locator("#key")).to_have_value("")
    page.fill("#key", keys["page-bob"])
    page.keyboard.press("Enter")
    sync_api.expect(page.locator("#who")).to_contain_text("Signed in as bob")
    with page.expect_response(lambda r: r.url.endswith("/v1/me") and r.status == 401):
        held[0].continue_()
    sync_api.expect(page.locator("#who")).to_contain_text("Signed in as bob")
    sync_api.expect(page.locator("#signin")).to_be_hidden()
    page.fill("#q", "rotate the payment provider API keys")
    with page.expect_response(lambda r: "/v1/search?" in r.url) as searched:
        page.locator("#search-btn").click()
    assert searched.value.status == 200, searched.value.text()
    page.locator("#results article.result").first.wait_for(timeout=WAIT)
    context.close()


def test_the_api_reference_renders_with_nothing_from_elsewhere(browser, server):
    """/docs in a real browser that refuses every request off this server, as a network
    without internet would: Swagger UI draws the API from /openapi.json all the same."""
    context = browser.new_context()
    page = context.new_page()
    elsewhere: list[str] = []

    def only_this_server(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_server)
    # The page's Content-Security-Policy forbids inline script: Swagger UI must start without.
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text)
            if "Content Security Policy" in m.text else None)
    page.goto(server + "/docs")
    sync_api.expect(page.locator(".swagger-ui .info .title")).to_contain_text("citewise",
                                                                             timeout=WAIT)
    sync_api.expect(page.locator(".opblock-summary-path").filter(has_text="/v1/search")
                    .first).to_be_visible()
    assert elsewhere == []
    assert refused == []
    context.close()


def test_the_api_reference_tries_a_route_with_a_key(browser, locked_server):
    """On a server that requires a key, the reference's Authorize button takes one and "Try it
    out" sends it: the search answers 200 with the key's principal, not 401."""
    url, keys = locked_server
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "/docs")
    page.locator("button.authorize").first.click()
    dialog = page.locator(".auth-container").filter(has=page.locator("#auth-bearer-value"))
    dialog.locator("#auth-bearer-value").fill(keys["page-bob"])
    dialog.locator("button.authorize").click()
    page.locator("button.btn-done").first.click()
    operation = page.locator(".opblock-get").filter(
        has=page.locator(".opblock-summary-path", has_text=re.compile(r"^/v1/search$")))
    operation.locator(".opblock-summary").click()
    operation.locator("button.try-out__btn").click()
    operation.locator("tr[data-param-name='q'] input").fill("redis failover")
    with page.expect_response(lambda r: "/v1/search?" in r.url) as searched:
        operation.locator("button.execute").click()
    assert searched.value.status == 200, searched.value.text()
    assert searched.value.request.headers["authorization"] == f"Bearer {keys['page-bob']}"
    context.close()


def test_the_page_is_our_own_files_under_a_strict_policy(server):
    page = httpx.get(server + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "<script src=\"/ui/app.js\"" in page.text and "http" not in page.text.split(
        "<body>")[0].replace('http-equiv', '')
    again = httpx.get(server + "/ui/app.js", headers={"If-None-Match": httpx.get(
        server + "/ui/app.js").headers["etag"]})
    assert again.status_code == 304
    missing = httpx.get(server + "/ui/nope.js")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
