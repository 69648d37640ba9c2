"""Storage format -> HTML that the spine's parser reads as headings, code, tables and lists."""

from __future__ import annotations

import pytest

from citewise.connectors.confluence.storage_format import StorageFormatError, storage_to_html
from citewise.ingest.anchors import ANCHOR_STYLES
from citewise.ingest.parse import parse
from citewise.types import SourceDocument
from tests.fakes.confluence_server import DEPLOY_GUIDE, HANDBOOK


def test_code_macro_keeps_code_and_language():
    out = storage_to_html(DEPLOY_GUIDE, title="Deploy guide")
    assert '<pre><code class="language-bash" data-language="bash">' in out
    assert "kubectl -n checkout rollout undo deployment/checkout-api\n" in out
    assert "ac:" not in out and "CDATA" not in out


def test_panels_become_labelled_paragraphs_and_contentless_macros_vanish():
    out = storage_to_html(DEPLOY_GUIDE, title="Deploy guide")
    assert "<p><strong>Info:</strong> Freeze starts Friday at noon.</p>" in out
    assert "<p><strong>Warning:</strong> Never roll back" in out
    assert "maxLevel" not in out and "toc" not in out  # the table of contents macro is dropped
    assert "children" not in storage_to_html(HANDBOOK)
    # A link to another page keeps its target's title as text.
    assert "See Database failover for the database." in out
    assert "10:00\xa0UTC" in out  # HTML entities that XML lacks are understood


def test_breadcrumb_opens_the_body():
    out = storage_to_html("<p>x</p>", title="Page", breadcrumb="Eng > Home > Page")
    assert out.index("<p>Eng &gt; Home &gt; Page</p>") < out.index("<p>x</p>")


def test_tasks_status_and_layouts():
    storage = (
        '<ac:layout><ac:layout-section ac:type="two_equal"><ac:layout-cell>'
        "<p>Left cell</p></ac:layout-cell></ac:layout-section></ac:layout>"
        "<ac:task-list><ac:task><ac:task-id>1</ac:task-id><ac:task-status>complete"
        "</ac:task-status><ac:task-body>Ship it</ac:task-body></ac:task></ac:task-list>"
        '<p>State: <ac:structured-macro ac:name="status"><ac:parameter ac:name="title">'
        "DONE</ac:parameter></ac:structured-macro></p>"
        '<ac:structured-macro ac:name="expand"><ac:parameter ac:name="title">More'
        "</ac:parameter><ac:rich-text-body><p>Hidden detail</p></ac:rich-text-body>"
        "</ac:structured-macro>"
        '<p><ac:image><ri:attachment ri:filename="x.png" /></ac:image>after image</p>'
    )
    out = storage_to_html(storage)
    assert "<p>Left cell</p>" in out
    assert "<li>[x] Ship it</li>" in out
    assert "State: [DONE]" in out
    assert "<p>More</p><p>Hidden detail</p>" in out
    assert "<p>after image</p>" in out


def test_a_body_that_does_not_parse_is_a_clear_error():
    with pytest.raises(StorageFormatError, match="not well-formed"):
        storage_to_html("<p>unclosed <strong>bold</p>")


def test_the_parser_sees_headings_code_tables_and_lists():
    html = storage_to_html(DEPLOY_GUIDE, title="Deploy guide")
    elements = parse(SourceDocument("1", "Deploy guide", html.encode(), "text/html"))
    kinds = {(e.kind, e.text.split("\n")[0]) for e in elements}
    assert ("Title", "Release train") in kinds
    assert ("Title", "Roll back a release") in kinds
    assert ("CodeSnippet", "kubectl -n checkout rollout undo deployment/checkout-api") in kinds
    tables = [e.text for e in elements if e.kind == "Table"]
    assert tables and "production | eu-prod-2" in tables[0]
    assert any(e.kind == "ListItem" and "Argo CD" in e.text for e in elements)


def test_anchor_styles_match_each_flavour():
    cloud, server = ANCHOR_STYLES["confluence-cloud"], ANCHOR_STYLES["confluence-server"]
    assert cloud("Roll back a release", "Deploy guide") == "Roll-back-a-release"
    assert server("Roll back a release", "Deploy guide") == "Deployguide-Rollbackarelease"
    assert server("Step 1: Install", "My Page") == "MyPage-Step1:Install"
