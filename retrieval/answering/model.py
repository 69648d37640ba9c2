"""What an answer is: Markdown for people, typed blocks for front ends, numbered citations.

``Answer.answer`` is Markdown with ``[n]`` markers (numbered steps and fenced code survive in
it); ``Answer.blocks`` says the same as a list a front end can render without parsing Markdown:
paragraphs, steps (each with its commands), code, and facts (label and value). Every block names
the citations it rests on. Both are built together (``render_markdown``), so they never disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_serializer

from citewise.retrieval.search import Passage


class CodeSnippet(BaseModel):
    language: str | None = Field(default=None, description="e.g. bash, promql, python")
    text: str


class Step(BaseModel):
    text: str = Field(description="The step; inline `code` in backticks.")
    code: list[CodeSnippet] = Field(default_factory=list, description="Commands under it.")
    notes: list[str] = Field(default_factory=list, description="What the step says after them.")


class AnswerBlock(BaseModel):
    type: Literal["paragraph", "steps", "code", "fact"]
    text: str | None = Field(default=None, description="paragraph and code: the text")
    language: str | None = Field(default=None, description="code: its language")
    steps: list[Step] | None = Field(default=None, description="steps: in order")
    ordered: bool = Field(default=True, description="steps: numbered, or alternatives")
    start: int = Field(default=1, ge=0, description="steps: the number of the first one (a "
                       "list the source resumes after a command block)")
    label: str | None = Field(default=None, description="fact: what it is (Owner, Port...)")
    value: str | None = Field(default=None, description="fact: its value")
    citations: list[int] = Field(default_factory=list, description="The [n] it rests on.")


class Citation(Passage):
    """A passage an answer rests on; ``[n]`` in the answer points at it."""

    n: int = Field(description="The number used as [n] in the answer.")
    quote: str = Field(description="The passage text the answer quotes.")


ANSWER_EXAMPLE: dict[str, Any] = {
    "answer": "Roll back the last release, then turn off the new flags:\n\n"
              "1. Roll back [1]\n   ```bash\n   shipit rollback checkout-api --to previous\n   ```",
    "blocks": [
        {"type": "paragraph", "text": "Roll back the last release, then turn off the new flags:",
         "citations": [1]},
        {"type": "steps", "ordered": True, "citations": [1], "steps": [
            {"text": "Roll back", "code": [{"language": "bash",
                                            "text": "shipit rollback checkout-api --to previous"}],
             "notes": []}]},
    ],
    "citations": [{"n": 1, "document_id": "9c1f0e", "source": "runbooks",
                   "title": "Checkout API high latency", "heading": "Mitigation",
                   "path": "checkout-api-high-latency.md", "url": None, "start_line": 127,
                   "end_line": 158, "symbol": None, "score": 0.71, "quote": "..."}],
    "abstained": False, "mode": "extractive", "kind": "action", "evidence": 0.71,
}


class AnswerUsage(BaseModel):
    tokens_in: int = Field(default=0, description="Prompt tokens the model read.")
    tokens_out: int = Field(default=0, description="Tokens the model wrote.")
    cost: float = Field(default=0.0, description="Their price, from the provider's prices.")
    estimated: bool = Field(default=False, description="True when the provider reported no "
                            "usage and the tokens were estimated from the text.")


class Answer(BaseModel):
    model_config = {"json_schema_extra": {"examples": [ANSWER_EXAMPLE]}}

    answer: str = Field(description="Markdown with [n] markers resolving to `citations`.")
    blocks: list[AnswerBlock] = Field(
        default_factory=list, description="The answer as typed blocks, for front ends."
    )
    citations: list[Citation] = Field(default_factory=list)
    abstained: bool = Field(
        default=False, description="True when the knowledge base has no answer the caller "
        "may read (the answer then says so)."
    )
    mode: str = Field(default="extractive", description="extractive or llm")
    kind: str = Field(default="general", description="The shape of question recognised: "
                      "action, alert, fact, code, cause, definition, yesno or general.")
    evidence: float = Field(
        default=0.0, description="Similarity of the best passage to the question."
    )
    reason: str | None = Field(default=None, description="Why it abstained, or fell back.")
    provider: str | None = Field(default=None, description="The model provider that wrote it "
                                 "(llm mode).")
    model: str | None = Field(default=None, description="The provider's model (llm mode).")
    usage: AnswerUsage | None = Field(default=None, description="Model tokens and cost, when a "
                                      "model was called (also when it failed over).")
    guardrails: list[dict[str, Any]] = Field(
        default_factory=list, description="Guardrail decisions taken on this answer: "
        "{policy, kind, action, where, detail} (a passage left out, a secret redacted...).")
    cached: bool = Field(default=False, description="True when this is a cached answer to a "
                         "question close to this one, asked before by a caller who may read "
                         "exactly what this one may (usage then names the tokens it saved).")

    @field_serializer("evidence")
    def _round(self, value: float) -> float:
        return round(value, 4)


def _marks(numbers: list[int]) -> str:
    return "".join(f"[{n}]" for n in numbers)


def render_markdown(blocks: list[AnswerBlock]) -> str:
    """The blocks as Markdown: steps numbered with their commands fenced under them."""
    parts = []
    for b in blocks:
        marks = _marks(b.citations)
        if b.type == "paragraph":
            parts.append(f"{b.text} {marks}".strip())
        elif b.type == "fact":
            parts.append(f"**{b.label}:** {b.value} {marks}".strip())
        elif b.type == "code":
            fence = "```" + (b.language or "")
            parts.append(f"{fence}\n{b.text}\n```\n{marks}".strip())
        elif b.type == "steps":
            lines = []
            for i, step in enumerate(b.steps or [], start=b.start):
                bullet = f"{i}." if b.ordered else "-"
                indent = " " * (len(bullet) + 1)
                lines.append(f"{bullet} {step.text} {marks}".rstrip())
                for snippet in step.code:
                    lines.append(f"{indent}```{snippet.language or ''}")
                    lines.extend(f"{indent}{line}" if line else "" for line in
                                 snippet.text.split("\n"))
                    lines.append(f"{indent}```")
                for note in step.notes:
                    lines.append(f"{indent}{note}")
            parts.append("\n".join(lines))
    return "\n\n".join(p for p in parts if p)
