"""A citewise answer in Slack's format.

Slack's ``mrkdwn`` is not Markdown: bold is ``*x*``, links are ``<url|text>``, there are no
headings, and a section's text holds at most 3,000 characters (a message at most 50 blocks;
Block Kit reference, api.slack.com/reference/block-kit/blocks). So the answer is rendered from
its typed blocks, not from its Markdown: paragraphs and facts as sections, steps as numbered
lines with their commands in code blocks, each ``[n]`` as a link to the cited lines, then a
Sources context block, then the feedback buttons. Long answers become several messages; a
code block too long for one section is returned as a snippet to upload instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SECTION_CHARS = 2900  # Slack allows 3,000 in a section's text; keep a margin for the links
MAX_BLOCKS = 48  # 50 per message, minus the sources and the buttons
_MARK = re.compile(r"\[(\d+)\]")


@dataclass
class Rendered:
    messages: list[dict] = field(default_factory=list)  # {"text", "blocks"} each
    snippets: list[dict] = field(default_factory=list)  # {"title", "content", "filetype"}


def citation_url(c: dict, server_url: str) -> str:
    """The cited lines' own link where the source has one, else the document in citewise."""
    if c.get("url"):
        return c["url"]
    anchor = f"#L{c['start_line']}-L{c['end_line']}" if c.get("start_line") else ""
    return f"{server_url.rstrip('/')}/v1/documents/{c['document_id']}{anchor}"


def escape(text: str) -> str:
    """Slack's three control characters (api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mrkdwn(text: str, links: dict[int, str]) -> str:
    """Markdown of an answer as Slack mrkdwn: bold, inline code kept, [n] as links."""
    text = escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"*\1*", text)
    return _MARK.sub(lambda m: f"<{links[int(m.group(1))]}|[{m.group(1)}]>"
                     if int(m.group(1)) in links else "", text)


def _marks(numbers: list[int], links: dict[int, str]) -> str:
    return "".join(f"<{links[n]}|[{n}]>" for n in numbers if n in links)


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _code(text: str, language: str | None, rendered: Rendered, title: str) -> str | None:
    """A fenced code block, or None when it is too long and went to the snippets."""
    if len(text) > SECTION_CHARS - 20:
        rendered.snippets.append({"title": title, "content": text,
                                  "filetype": language or "text"})
        return None
    return f"```{escape(text)}```"


def _split(text: str) -> list[str]:
    """Text cut at line ends into parts that fit a section."""
    parts, current = [], ""
    for line in text.split("\n"):
        while len(line) > SECTION_CHARS:
            parts.append(line[:SECTION_CHARS])
            line = line[SECTION_CHARS:]
        if len(current) + len(line) + 1 > SECTION_CHARS:
            parts.append(current)
            current = ""
        current = f"{current}\n{line}" if current else line
    if current:
        parts.append(current)
    return parts


def answer_blocks(answer: dict, server_url: str, rendered: Rendered) -> list[dict]:
    links = {c["n"]: citation_url(c, server_url) for c in answer.get("citations", [])}
    out: list[dict] = []
    for b in answer.get("blocks", []):
        marks = _marks(b.get("citations", []), links)
        if b["type"] == "paragraph":
            text = f"{mrkdwn(b.get('text') or '', links)} {marks}".strip()
        elif b["type"] == "fact":
            text = f"*{escape(b.get('label') or '')}:* {mrkdwn(b.get('value') or '', links)} " \
                   f"{marks}".strip()
        elif b["type"] == "code":
            code = _code(b.get("text") or "", b.get("language"), rendered, "code")
            text = f"{code or '_(the code is attached as a snippet)_'} {marks}".strip()
        else:  # steps
            lines = []
            for i, step in enumerate(b.get("steps") or [], start=b.get("start", 1)):
                bullet = f"{i}." if b.get("ordered", True) else "•"
                lines.append(f"{bullet} {mrkdwn(step['text'], links)} {marks}".rstrip())
                for snippet in step.get("code", []):
                    code = _code(snippet["text"], snippet.get("language"), rendered,
                                 f"step {i}")
                    lines.append(code or "_(the command is attached as a snippet)_")
                lines.extend(f"    {mrkdwn(n, links)}" for n in step.get("notes", []))
            text = "\n".join(lines)
        out.extend(_section(part) for part in _split(text) if part.strip())
    return out


def sources_block(answer: dict, server_url: str) -> dict | None:
    items = []
    for c in answer.get("citations", []):
        where = escape(c["title"]) + (f" › {escape(c['heading'])}" if c.get("heading") else "")
        lines = f" (lines {c['start_line']}–{c['end_line']})" if c.get("start_line") else ""
        items.append(f"[{c['n']}] <{citation_url(c, server_url)}|{where}>{lines}")
    if not items:
        return None
    return {"type": "context", "elements": [{"type": "mrkdwn",
                                             "text": "*Sources*  " + "   ".join(items)}]}


def feedback_block(answer_id: str | None) -> dict | None:
    if not answer_id:
        return None
    return {"type": "actions", "block_id": "citewise_feedback", "elements": [
        {"type": "button", "action_id": "citewise_helpful", "value": answer_id,
         "text": {"type": "plain_text", "text": "Helpful"}},
        {"type": "button", "action_id": "citewise_not_helpful", "value": answer_id,
         "text": {"type": "plain_text", "text": "Not helpful"}}]}


RIGHT_DOCUMENT = "citewise_right_document"


def right_document_block(answer_id: str) -> dict:
    """After "Not helpful": a box for the document that held the answer, sent on Enter (an
    input block in a message must dispatch its action; the answer's id rides in its
    block_id, since an input carries no value of ours)."""
    return {"type": "input", "block_id": f"{RIGHT_DOCUMENT}:{answer_id}", "dispatch_action": True,
            "optional": True,
            "label": {"type": "plain_text", "text": "The right document was (optional)"},
            "element": {"type": "plain_text_input", "action_id": RIGHT_DOCUMENT,
                        "max_length": 1000,
                        "dispatch_action_config": {"trigger_actions_on": ["on_enter_pressed"]},
                        "placeholder": {"type": "plain_text",
                                        "text": "a path or link, e.g. runbooks/redis-failover.md"}}}


def render(answer: dict, server_url: str, *, closest: list[dict] | None = None,
           extra: list[dict] | None = None) -> Rendered:
    """The answer as one or more messages. ``closest``: search results to offer when it
    abstained; ``extra``: blocks to add at the end (a "Share in channel" button)."""
    rendered = Rendered()
    if answer.get("abstained"):
        text = "I could not find an answer to that in anything you can read."
        blocks = [_section(text)]
        if closest:
            offers = [f"• <{citation_url(r, server_url)}|{escape(r['title'])}"
                      f"{' › ' + escape(r['heading']) if r.get('heading') else ''}>"
                      for r in closest]
            blocks.append(_section("The closest documents:\n" + "\n".join(offers)))
        rendered.messages.append({"text": text, "blocks": blocks + (extra or [])})
        return rendered
    body = answer_blocks(answer, server_url, rendered)
    tail = [b for b in (sources_block(answer, server_url),
                        feedback_block(answer.get("answer_id"))) if b] + (extra or [])
    chunks = [body[i:i + MAX_BLOCKS] for i in range(0, len(body), MAX_BLOCKS)] or [[]]
    fallback = re.sub(r"\s+", " ", answer.get("answer", ""))[:300]
    for i, chunk in enumerate(chunks):
        last = i == len(chunks) - 1
        rendered.messages.append({"text": fallback if i == 0 else "(continued)",
                                  "blocks": chunk + (tail if last else [])})
    return rendered
