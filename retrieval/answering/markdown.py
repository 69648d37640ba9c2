"""A model's Markdown answer as blocks: paragraphs, steps with their code, code, facts.

The model writes Markdown; front ends get the same typed blocks an extractive answer has, so
they render one shape whoever wrote the answer. Citation markers stay in the text; each block
also lists the numbers it carries.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from citewise.retrieval.answering.model import AnswerBlock, CodeSnippet, Step

_MD = MarkdownIt("commonmark")
_MARK = re.compile(r"\[(\d+)\]")
_FACT = re.compile(r"^\*\*([^*]{1,40}?):?\*\*:?\s+(.+)$")


def _marks(text: str) -> list[int]:
    return sorted({int(n) for n in _MARK.findall(text)})


def blocks_from_markdown(text: str) -> list[AnswerBlock]:
    tokens = _MD.parse(text)
    blocks: list[AnswerBlock] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "paragraph_open" and t.level == 0:
            content = tokens[i + 1].content.strip()
            fact = _FACT.match(content)
            if fact:
                value = fact.group(2)
                blocks.append(AnswerBlock(type="fact", label=fact.group(1).strip(),
                                          value=_MARK.sub("", value).strip(),
                                          citations=_marks(value)))
            else:
                blocks.append(AnswerBlock(type="paragraph", text=content,
                                          citations=_marks(content)))
            i += 3
        elif t.type in ("fence", "code_block") and t.level == 0:
            blocks.append(AnswerBlock(type="code", text=t.content.rstrip("\n"),
                                      language=(t.info or "").split()[0] or None
                                      if t.info else None))
            i += 1
        elif t.type in ("ordered_list_open", "bullet_list_open") and t.level == 0:
            steps: list[Step] = []
            depth = 0
            j = i
            while j < len(tokens):
                tok = tokens[j]
                depth += tok.nesting
                if tok.type == "list_item_open" and tok.level == 1:
                    steps.append(Step(text=""))
                elif tok.type == "inline" and steps:
                    if not steps[-1].text:
                        steps[-1].text = tok.content.strip()
                    else:
                        steps[-1].notes.append(tok.content.strip())
                elif tok.type in ("fence", "code_block") and steps:
                    steps[-1].code.append(CodeSnippet(
                        language=(tok.info or "").split()[0] or None if tok.info else None,
                        text=tok.content.rstrip("\n")))
                if depth == 0:
                    break
                j += 1
            cited = sorted({n for s in steps for n in _marks(" ".join([s.text, *s.notes]))})
            start = t.attrGet("start") if t.type == "ordered_list_open" else None
            blocks.append(AnswerBlock(type="steps", steps=steps,
                                      ordered=t.type == "ordered_list_open", citations=cited,
                                      start=int(start) if start is not None else 1))
            i = j + 1
        else:
            i += 1
    return blocks
