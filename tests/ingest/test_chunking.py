from __future__ import annotations

from citewise.connectors.folder import FolderConfig, FolderConnector
from citewise.ingest.anchors import slugify
from citewise.ingest.chunking.sections import SectionChunker
from citewise.ingest.parse import parse
from tests.kb import write


def chunks_for(kb, rel, dense, max_tokens=200):
    doc = FolderConnector(FolderConfig(path=kb, readers=["public"])).read(rel)
    return SectionChunker(dense.count_tokens, max_tokens).chunk("d", doc)


def test_sections_follow_headings_with_lines(kb, dense):
    chunks = chunks_for(kb, "runbooks/redis-failover.md", dense)
    by_heading = {c.heading: c for c in chunks}
    assert set(by_heading) == {"", "Diagnosis", "Mitigation"}
    diag = by_heading["Diagnosis"]
    assert "redis-cli -p 26379 sentinel get-master-addr-by-name cache-main" in diag.text
    assert diag.anchor == "diagnosis"
    lines = (kb / "runbooks/redis-failover.md").read_text().splitlines()
    # Line numbers count the front matter: they point into the file as stored.
    assert lines[diag.start_line - 1] == "## Diagnosis"
    assert "redis-cli" in lines[diag.end_line - 1]


def test_long_sections_split_within_the_window(tmp_path, dense):
    body = "\n\n".join(
        f"Paragraph {i} explains step {i} of draining the node pool carefully before "
        "the upgrade, with the reasons and the checks to run afterwards." for i in range(60)
    )
    write(tmp_path, "long.md", f"# Long\n\n## Node pool upgrade\n\n### Draining\n\n{body}\n")
    chunks = chunks_for(tmp_path, "long.md", dense, max_tokens=128)
    assert len(chunks) > 5
    for c in chunks:
        assert c.heading == "Node pool upgrade > Draining"
        head = dense.count_tokens(f"Long > {c.heading}\n")
        assert c.token_count + head <= 128
    joined = " ".join(c.text for c in chunks)
    assert all(f"Paragraph {i} " in joined for i in range(60)), "nothing is dropped"


def test_a_single_huge_line_is_cut(tmp_path, dense):
    write(tmp_path, "wall.txt", "word " * 3000)
    chunks = chunks_for(tmp_path, "wall.txt", dense, max_tokens=100)
    assert len(chunks) >= 30
    assert all(c.token_count <= 100 for c in chunks)


def test_slugify_matches_github_anchors():
    assert slugify("Check replication lag (primary)") == "check-replication-lag-primary"
    assert slugify("Step 2: Restart") == "step-2-restart"


def test_commands_under_list_items_stay_code(tmp_path, dense):
    write(tmp_path, "steps.md", """
        # Fail over

        ## Mitigation

        1. Check the primary:
           ```bash
           redis-cli -p 26379 sentinel get-master-addr-by-name cache-main
           ```
           It should print the new address.
        2. Restart the clients:
           ```bash
           kubectl rollout restart deploy/checkout-api
           ```
        Afterwards, watch the error rate.
        - one more item
        """)
    from citewise.connectors.folder import FolderConfig, FolderConnector

    doc = FolderConnector(FolderConfig(path=tmp_path, readers=["public"])).read("steps.md")
    elements = parse(doc)
    code = [e.text for e in elements if e.kind == "CodeSnippet"]
    assert code == ["redis-cli -p 26379 sentinel get-master-addr-by-name cache-main",
                    "kubectl rollout restart deploy/checkout-api"]
    texts = [e.text for e in elements]
    assert "It should print the new address." in texts
    assert "one more item" in texts
