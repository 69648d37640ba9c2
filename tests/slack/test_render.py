"""An answer in Slack's format: links for [n], steps with their commands, Slack's limits."""

from __future__ import annotations

from citewise.api.slack.render import MAX_BLOCKS, render

CITATION = {"n": 1, "document_id": "abc123", "source": "runbooks", "title": "Redis <failover>",
            "heading": "Mitigation", "path": "redis.md", "url": None, "start_line": 49,
            "end_line": 66, "quote": "..."}


def answer(blocks: list[dict], **extra) -> dict:
    return {"answer": "x", "blocks": blocks, "citations": [CITATION], "abstained": False,
            "answer_id": "f" * 32, **extra}


def test_markers_become_links_and_sources_name_the_lines():
    out = render(answer([{"type": "paragraph", "text": "Promote the **replica** [1] & wait [7]",
                          "citations": [1]}]), "https://cw.example")
    section = out.messages[0]["blocks"][0]["text"]["text"]
    link = "https://cw.example/v1/documents/abc123#L49-L66"
    assert f"<{link}|[1]>" in section and "*replica*" in section and "&amp;" in section
    assert "[7]" not in section  # a marker that points nowhere is dropped
    sources = out.messages[0]["blocks"][1]["elements"][0]["text"]
    assert f"<{link}|Redis &lt;failover&gt; › Mitigation> (lines 49–66)" in sources


def test_steps_keep_their_commands_and_long_code_goes_to_a_snippet():
    big = "\n".join(f"echo line {i}" for i in range(600))
    out = render(answer([{"type": "steps", "ordered": True, "start": 3, "citations": [1],
                          "steps": [{"text": "Fail over", "notes": ["then check"], "code": [
                              {"language": "bash", "text": "aws elasticache test-failover"}]},
                                    {"text": "Dump", "notes": [], "code": [
                                        {"language": "bash", "text": big}]}]}]), "https://cw")
    text = out.messages[0]["blocks"][0]["text"]["text"]
    assert text.startswith("3. Fail over") and "```aws elasticache test-failover```" in text
    assert "4. Dump" in text and "attached as a snippet" in text
    assert out.snippets == [{"title": "step 4", "content": big, "filetype": "bash"}]


def test_long_answers_are_split_at_slacks_limits():
    blocks = [{"type": "paragraph", "text": f"paragraph {i} " + "word " * 700, "citations": [1]}
              for i in range(60)]
    out = render(answer(blocks), "https://cw")
    assert len(out.messages) >= 2
    for message in out.messages:
        assert len(message["blocks"]) <= 50
        for block in message["blocks"]:
            if block["type"] == "section":
                assert len(block["text"]["text"]) <= 3000  # Slack's limit for a section
    assert out.messages[-1]["blocks"][-1]["block_id"] == "citewise_feedback"
    assert MAX_BLOCKS < 50


def test_an_abstention_says_so_and_offers_the_closest_documents():
    out = render({"answer": "no", "abstained": True, "citations": [], "blocks": []},
                 "https://cw", closest=[{**CITATION, "title": "Redis cache failover"}])
    text = str(out.messages[0]["blocks"])
    assert "could not find" in text and "Redis cache failover" in text
