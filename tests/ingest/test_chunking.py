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


def test_markdown_chunks_cite_exact_lines_and_keep_step_numbers(tmp_path, dense):
    write(tmp_path, "lines.md", """
        ---
        title: Drain a node
        ---
        # Drain a node

        ## Mitigation

        1. Cordon it, so nothing new lands there:

           ```bash
           kubectl cordon node-7
           ```

        2. Evict the pods. The **`PodDisruptionBudget`** of each service is honoured.
        3. Check the `kube-system` pods moved.

        <details>
        <summary>Why not delete the node at once?</summary>
        <!-- internal: see INC-42 -->
        Its volumes detach only after the pods are gone.
        </details>

        | Service | Owner |
        |---|---|
        | `node-agent` | team-platform |
        """)
    chunks = chunks_for(tmp_path, "lines.md", dense)
    assert len(chunks) == 1
    chunk = chunks[0]
    lines = (tmp_path / "lines.md").read_text().splitlines()
    assert lines[chunk.start_line - 1] == "## Mitigation"
    assert lines[chunk.end_line - 1] == "| `node-agent` | team-platform |"
    text = chunk.text.splitlines()
    assert text[0] == "1. Cordon it, so nothing new lands there:"
    assert text[1] == "kubectl cordon node-7"
    # Marks that only cost the model word-pieces are gone; the words stay.
    assert "2. Evict the pods. The PodDisruptionBudget of each service is honoured." in text
    assert "3. Check the kube-system pods moved." in text
    # Raw HTML counts by its words, never its tags or comments.
    assert ("Why not delete the node at once? Its volumes detach only after the pods are gone."
            in text)
    assert not any("<" in line or "INC-42" in line for line in text)
    assert text[-2:] == ["Service | Owner", "node-agent | team-platform"]


def test_a_long_code_block_split_in_parts_cites_its_own_lines(tmp_path, dense):
    commands = "\n".join(f"    kubectl -n shop rollout restart deploy/service-{i:03d}"
                         for i in range(60))
    write(tmp_path, "long.md", "# Restart all\n\n## Steps\n\n```bash\n"
          + "\n".join(c.strip() for c in commands.splitlines()) + "\n```\n")
    chunks = chunks_for(tmp_path, "long.md", dense, max_tokens=128)
    assert len(chunks) >= 3
    lines = (tmp_path / "long.md").read_text().splitlines()
    for c in chunks:
        # Each part's lines are the lines that hold its first and last command.
        first, last = c.text.splitlines()[0], c.text.splitlines()[-1]
        assert lines[c.start_line - 1] in ("## Steps", first), c.start_line
        assert lines[c.end_line - 1] == last, (c.end_line, last)
    assert lines[chunks[0].start_line - 1] == "## Steps"


def test_the_chunker_and_the_outline_read_markdown_once(tmp_path, dense):
    from citewise.ingest.markdown import markdown_tokens
    from citewise.ingest.outline import build_outline
    from citewise.ingest.parse import document_text

    write(tmp_path, "once.md", "# Once\n\n## Steps\n\n1. Do the thing.\n")
    doc = FolderConnector(FolderConfig(path=tmp_path, readers=["public"])).read("once.md")
    markdown_tokens.cache_clear()
    SectionChunker(dense.count_tokens, 200).chunk("d", doc)
    build_outline(document_text(doc), doc.media_type, title=doc.title)
    info = markdown_tokens.cache_info()
    assert (info.misses, info.hits) == (1, 1)


def test_markdown_text_reads_as_commonmark_says():
    from citewise.ingest.parse import markdown_elements

    els = markdown_elements(
        "Watch node_filesystem_avail_bytes, not a_b_c or \\*stars\\*; AT&amp;T<br>next.\n\n"
        "1. first\n1. second\n1. third\n\n"
        "- \n\n## Later\n\nBody paragraph.\n\n"
        "<div>Before <table><tr><td>cell</td></tr></table> after</div>\n")
    by_text = {e.text: e for e in els}
    # Underscores inside words are not emphasis; escapes and entities resolve.
    assert "Watch node_filesystem_avail_bytes, not a_b_c or *stars*; AT&T next." in by_text
    # "1. 1. 1." is read as steps 1, 2 and 3.
    assert [(e.text, e.number) for e in els if e.kind == "ListItem"] == [
        ("first", 1), ("second", 2), ("third", 3)]
    # An empty item does not swallow the paragraph under the next heading.
    assert by_text["Body paragraph."].kind == "NarrativeText"
    assert by_text["Body paragraph."].line == 11
    # Raw HTML keeps its words around a table, in order.
    assert by_text["Before\ncell\nafter"].kind == "Table"


def test_markdown_with_old_mac_line_endings_parses():
    from citewise.ingest.parse import markdown_elements

    els = markdown_elements("# T\r\rtext\r```\rcode\r```\r")
    assert [(e.kind, e.text, e.line, e.end_line) for e in els[1:]] == [
        ("NarrativeText", "text", 3, 3), ("CodeSnippet", "code", 5, 5)]


def test_counting_a_documents_elements_at_once_gives_the_same_counts_and_chunks(kb, dense):
    """The pipeline counts a document's elements in one tokenizer call
    (``count_tokens_many``): the same numbers as one call each, so the same chunks."""
    texts = ["Restart the pods.", "", "kubectl -n ops rollout restart deploy/api",
             "Ünïcödé and CamelCaseAlertName_total", "a " * 300]
    assert dense.count_tokens_many(texts) == [dense.count_tokens(t) for t in texts]
    assert dense.count_tokens_many([]) == []
    doc = FolderConnector(FolderConfig(path=kb, readers=["public"])).read(
        "runbooks/redis-failover.md")
    one_by_one = SectionChunker(dense.count_tokens, 60).chunk("d", doc)
    at_once = SectionChunker(dense.count_tokens, 60, dense.count_tokens_many).chunk("d", doc)
    assert len(one_by_one) > 1 and at_once == one_by_one
