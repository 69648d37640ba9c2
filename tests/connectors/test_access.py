"""Readers declarations fail closed: every way a probe made a restricted file public is an error.

Each case is a real file in a real folder source, read by the folder connector: the document
comes back with ``error`` set (so the pipeline keeps its previous version and reports it), never
with the source's readers.
"""

from __future__ import annotations

import pytest

from citewise.connectors.folder import FolderConfig, FolderConnector

BODY = "# Rotate the keys\n\nStep one: open a ticket in SEC.\n"


def read(tmp_path, name: str, text: str, readers=("group:eng",)):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return FolderConnector(FolderConfig(path=tmp_path, readers=list(readers))).read(name)


@pytest.mark.parametrize(
    ("front_matter", "expected"),
    [
        ("Readers: [group:security]", "'Readers' looks like an access declaration"),
        ("reader: [group:security]", "'reader' looks like an access declaration"),
        ("readres: [group:security]", "'readres' looks like an access declaration"),
        ("acl: [group:security]", "'acl' looks like an access declaration"),
        ("readers: []", "is empty"),
        ('readers: ""', "is empty"),
        ("readers:", "is empty"),
        ("readers: [admin:root]", "unknown kind"),
        ("readers: {group: security}", "must be a list"),
    ],
    ids=["capital-R", "singular", "typo", "acl", "empty-list", "empty-string", "no-value",
         "bad-kind", "mapping"],
)
def test_a_bad_readers_declaration_is_an_error_not_public(tmp_path, front_matter, expected):
    doc = read(tmp_path, "rotate.md", f"---\ntitle: Rotate\n{front_matter}\n---\n{BODY}")
    assert doc.error is not None and expected in doc.error, doc.error
    assert doc.readers == ["group:eng"]  # the source's, never public; and it is not indexed


@pytest.mark.parametrize(
    ("front_matter", "expected"),
    [
        # YAML keeps the last of two keys: the forgotten second line would publish the file.
        ("readers: [group:security]\nowner: sec\nreaders: [public]",
         "the key 'readers' twice (lines 3 and 5)"),
        ("readers: [public]\nreaders: [group:security]", "the key 'readers' twice"),
        ("tags: [a]\ntags: [b]", "the key 'tags' twice"),  # any key: nothing relies on it
        ("meta: {readers: [group:security], readers: [public]}", "the key 'readers' twice"),
        # Only the top level is read: a nested declaration would leave the source's readers.
        ("meta:\n  readers: [group:security]", "'meta.readers' is nested under 'meta'"),
        ("service: {readers: group:security}", "'service.readers' is nested"),
        ("alerts:\n  - name: KeysExpiring\n    reader: group:security",
         "'alerts[0].reader' is nested"),
        ("meta:\n  readers: [group:security]\nreaders: [group:security]", "is nested"),
    ],
    ids=["duplicate-last-public", "duplicate-first-public", "duplicate-other-key",
         "duplicate-in-flow-mapping", "nested-block", "nested-flow", "nested-in-list",
         "nested-besides-top-level"],
)
def test_a_duplicated_or_nested_readers_key_is_an_error_not_public(tmp_path, front_matter,
                                                                   expected):
    doc = read(tmp_path, "rotate.md", f"---\ntitle: Rotate\n{front_matter}\n---\n{BODY}")
    assert doc.error is not None and expected in doc.error, doc.error
    assert doc.readers == ["group:eng"]  # the source's, never public; and it is not indexed


def test_nested_keys_that_are_not_readers_are_ordinary_metadata(tmp_path):
    text = f"---\nowner: {{team: sre, groups: [oncall]}}\nreaders: [group:sre]\n---\n{BODY}"
    doc = read(tmp_path, "a.md", text)
    assert doc.error is None and doc.readers == ["group:sre"]
    assert doc.metadata["owner"] == {"team": "sre", "groups": ["oncall"]}


def test_a_blank_line_before_the_fence_still_reads_the_front_matter(tmp_path):
    doc = read(tmp_path, "rotate.md", f"\n---\nreaders: [group:security]\n---\n{BODY}")
    assert doc.error is None
    assert doc.readers == ["group:security"]
    assert doc.body_line_offset == 4  # line citations still count from the top of the file


def test_a_readers_line_outside_front_matter_is_an_error(tmp_path):
    # A broken fence ("- --") turns the front matter into body text.
    doc = read(tmp_path, "rotate.md", f"- --\nreaders: [group:security]\n---\n{BODY}")
    assert doc.error is not None and "not inside front matter" in doc.error


def test_valid_declarations_are_read(tmp_path):
    doc = read(tmp_path, "a.md", f"---\nreaders: [group:security, dana]\n---\n{BODY}")
    assert doc.error is None and doc.readers == ["group:security", "user:dana"]
    public = read(tmp_path, "b.md", f"---\nreaders: [public]\n---\n{BODY}")
    assert public.error is None and public.readers == ["public"]
    plain = read(tmp_path, "c.md", BODY)
    assert plain.error is None and plain.readers == ["group:eng"]  # the source's default


HTML = "<html><head><title>Keys</title>{meta}</head><body><h1>Keys</h1><p>Step one.</p></body>"


@pytest.mark.parametrize(
    "meta",
    [
        '<meta name="citewise-readers" content="group:security">',
        '<meta content="group:security" name="citewise-readers">',  # the other order
        '<meta name="citewise-readers" data-x="1" content="group:security">',  # extra attribute
        '<meta name = "citewise-readers"  content = "group:security" >',  # spaces around =
        "<META NAME='citewise-readers' CONTENT='group:security'/>",
    ],
    ids=["plain", "reordered", "extra-attribute", "spaces", "uppercase"],
)
def test_html_meta_readers_are_parsed_as_html(tmp_path, meta):
    doc = read(tmp_path, "keys.html", HTML.format(meta=meta))
    assert doc.error is None, doc.error
    assert doc.readers == ["group:security"]


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ('<meta name="citewise-reader" content="group:security">', "looks like an access"),
        ('<meta name="citewise_readers" content="group:security">', "looks like an access"),
        ('<meta name="citewise-readers" content="">', "is empty"),
        ('<meta name="citewise-readers">', "no content"),
        ('<meta name="citewise-readers" content="group:a"><meta name="citewise-readers" '
         'content="group:b">', "2 <meta"),
        # Another attribute than name= is ignored by the reader: a near miss, refused as one.
        ('<meta property="citewise-readers" content="group:security">',
         "<meta property='citewise-readers'> looks like an access declaration"),
        ('<meta itemprop="citewise-readers" content="group:security">', "<meta itemprop="),
        ('<meta http-equiv="Citewise-Readers" content="group:security">', "<meta http-equiv="),
        ('<meta property="citewise:reader" content="group:security">', "<meta property="),
    ],
    ids=["singular", "underscore", "empty", "no-content", "twice", "property", "itemprop",
         "http-equiv", "property-misspelled"],
)
def test_bad_html_meta_readers_are_errors(tmp_path, meta, expected):
    doc = read(tmp_path, "keys.html", HTML.format(meta=meta))
    assert doc.error is not None and expected in doc.error, doc.error
