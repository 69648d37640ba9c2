"""Outlines keep what an answer needs: steps whole with their commands, tables with headers,
line ranges that point at the stored file."""

from __future__ import annotations

import json
from dataclasses import asdict

from citewise.index.outline import Outline
from citewise.ingest.outline import build_outline

RUNBOOK = """\
# Cache failover

## Mitigation

Pick the first step that matches.

1. Check the replica:

   ```bash
   cachectl status --replica 2
   ```

   If it is `lagging`, wait.
2. Promote it:
   - announce it in `#incidents`
   - then run the command
3. Restart the clients:

```bash
kubectl rollout restart deploy/checkout-api
```

| Service | Owner | Port |
| --- | --- | --- |
| cache | team-platform | 6379 |

## Related

- [Redis basics](redis.md)
"""


def _section(outline: Outline, title: str):
    return next(s for s in outline.sections if s.title == title)


def test_markdown_steps_keep_numbers_commands_notes_and_nested_items():
    outline = build_outline(RUNBOOK, "text/markdown", title="Cache failover")
    assert [s.title for s in outline.sections] == ["Mitigation", "Related"]  # h1 = the title
    mitigation = _section(outline, "Mitigation")
    kinds = [b.kind for b in mitigation.blocks]
    # The unindented command after "Restart the clients:" belongs to that step.
    assert kinds == ["paragraph", "list", "table"]
    steps = mitigation.blocks[1]
    assert steps.ordered
    assert [i.number for i in steps.items] == [1, 2, 3]
    first, second, third = steps.items
    assert first.text == "Check the replica:"
    assert first.code[0].text == "cachectl status --replica 2"
    assert first.code[0].language == "bash"
    assert first.notes == ["If it is `lagging`, wait."]
    assert second.sub == ["announce it in `#incidents`", "then run the command"]
    assert third.code[0].text == "kubectl rollout restart deploy/checkout-api"
    # Lines count in the stored file: "1. Check the replica:" is line 7.
    assert first.start_line == 7
    assert third.end_line >= RUNBOOK.splitlines().index("kubectl rollout restart "
                                                        "deploy/checkout-api") + 1


def test_markdown_tables_keep_their_header_and_links_read_as_text():
    outline = build_outline(RUNBOOK, "text/markdown", title="Cache failover")
    table = _section(outline, "Mitigation").blocks[2]
    assert table.header == ["Service", "Owner", "Port"]
    assert table.rows == [["cache", "team-platform", "6379"]]
    related = _section(outline, "Related").blocks[0]
    assert related.items[0].text == "Redis basics"


def test_line_offset_counts_front_matter():
    outline = build_outline("## Steps\n\n1. Do it\n", "text/markdown", title="t", line_offset=4)
    assert outline.sections[0].start_line == 5
    assert outline.sections[0].blocks[0].items[0].start_line == 7


def test_html_blocks_end_where_the_next_begins():
    html = """<html><body>
<h1>Service catalog</h1>
<h2>Services</h2>
<p>Who runs what.</p>
<table>
<tr><th>Service</th><th>Owner</th></tr>
<tr><td>search</td><td>team-catalog</td></tr>
</table>
<h2>Escalation</h2>
<ol><li>Page the owner<pre><code class="language-bash">pagerctl page team-catalog</code></pre>
</li></ol>
</body></html>"""
    outline = build_outline(html, "text/html", title="Service catalog")
    services = _section(outline, "Services")
    paragraph, table = services.blocks
    assert (paragraph.start_line, paragraph.end_line) == (4, 4)
    assert table.header == ["Service", "Owner"]
    assert table.rows == [["search", "team-catalog"]]
    assert (table.start_line, table.end_line) == (5, 8)  # not just its first line
    steps = _section(outline, "Escalation").blocks[0]
    assert steps.ordered and steps.items[0].text == "Page the owner"
    assert steps.items[0].code[0].text == "pagerctl page team-catalog"


def test_outline_round_trips_through_json():
    outline = build_outline(RUNBOOK, "text/markdown", title="Cache failover")
    again = Outline.from_json(outline.to_json())
    assert again == outline
    # The form catalogs already hold: each dataclass as the dict of its fields, in order.
    assert outline.to_json() == json.dumps(asdict(outline), separators=(",", ":"))
    text = again.sections[0].plain_text()  # what a model reads: steps numbered, commands kept
    assert "1. Check the replica:" in text and "cachectl status --replica 2" in text
    assert text.index("Promote it") < text.index("kubectl rollout restart")
    assert "cache | team-platform | 6379" in text


def test_a_fence_whose_info_string_is_blank_has_no_language():
    # Seen in gitlab-com-runbooks (docs/patroni/check_wraparound.md): "``` " then the code.
    outline = build_outline("# Check\n\n``` \nSELECT 1;\n```\n", "text/markdown",
                            title="Check")
    code = [b for section in outline.sections for b in section.blocks if b.kind == "code"]
    assert [(b.text, b.language) for b in code] == [("SELECT 1;", None)]


def test_an_item_that_is_only_a_link_is_marked_in_markdown_and_html():
    """A reading list ("- [Redis basics](redis.md)") names pages; it is not steps or facts."""
    md = ("# Tools\n\n## Processes\n\n- [Blocking IPs](https://docs.example.com/b)\n"
          "- Rotate keys with `keyctl` (see [the guide](g.md))\n- **Bold**, not a link\n")
    items = _section(build_outline(md, "text/markdown", title="Tools"), "Processes").blocks[0].items
    assert [it.link_only for it in items] == [True, False, False]
    assert items[0].text == "Blocking IPs"
    related = _section(build_outline(RUNBOOK, "text/markdown", title="Cache failover"),
                       "Related").blocks[0].items
    assert related[0].link_only
    html = ("<html><body><h1>Tools</h1><h2>Processes</h2><ul>"
            "<li><a href='https://docs.example.com/b'>Blocking IPs</a></li>"
            "<li>Rotate keys with <a href='g.html'>keyctl</a> first</li></ul></body></html>")
    items = _section(build_outline(html, "text/html", title="Tools"), "Processes").blocks[0].items
    assert [it.link_only for it in items] == [True, False]
