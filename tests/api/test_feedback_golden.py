"""How a person's "the right document was ..." is matched to an indexed document
(``api/feedback_golden.py``): by ``<source>/<path>``, a path inside a source, the document's
link, or a link into a repository's browser that ends with its path; never a guess."""

from citewise.api.feedback_golden import DocumentNames

NAMES = DocumentNames([
    ("kb", "runbooks/redis-failover.md", "https://wiki.example/redis", "d1"),
    ("kb", "runbooks/postgres-disk-full.md", None, "d2"),
    ("handbook", "runbooks/postgres-disk-full.md", None, "d3"),
    ("confluence", None, "https://acme.atlassian.net/wiki/spaces/OPS/pages/42", "d4"),
])


def test_a_reference_names_one_document_or_none():
    assert NAMES.resolve("kb/runbooks/redis-failover.md") == "kb/runbooks/redis-failover.md"
    assert NAMES.resolve("/runbooks/redis-failover.md") == "kb/runbooks/redis-failover.md"
    assert NAMES.resolve("redis-failover.md") == "kb/runbooks/redis-failover.md"
    assert NAMES.resolve("https://wiki.example/redis#steps") == "kb/runbooks/redis-failover.md"
    assert NAMES.resolve("https://github.com/acme/kb/blob/main/runbooks/redis-failover.md"
                         ) == "kb/runbooks/redis-failover.md"
    assert NAMES.resolve("https://acme.atlassian.net/wiki/spaces/OPS/pages/42?x=1") == \
        "confluence/d4"
    # Two sources hold that path: which one the person meant is not ours to guess.
    assert NAMES.resolve("runbooks/postgres-disk-full.md") is None
    assert NAMES.resolve("handbook/runbooks/postgres-disk-full.md") == \
        "handbook/runbooks/postgres-disk-full.md"
    assert NAMES.resolve("the one about redis") is None
    assert NAMES.resolve("  ") is None
