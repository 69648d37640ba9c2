"""The OpenAI chat-completions protocol as providers speak it: what we send, what comes back.

Written from the API reference (https://platform.openai.com/docs/api-reference/chat) and what
the compatible servers send: vLLM and Ollama put ``usage`` on the last chunk only when asked
with ``stream_options.include_usage``; Workers AI's OpenAI endpoint and llama.cpp's server send
``data: [DONE]`` last; some servers send keep-alive comments (``: ping``) and empty ``choices``.
Anything else that is not JSON with a ``choices`` list is a malformed chunk.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import numpy as np

from citewise.errors import CitewiseError


class ProviderError(CitewiseError):
    """One call to one provider failed. ``kind`` says how; ``retryable`` whether another try
    (there or at the next provider) may succeed; ``retry_after`` is the provider's own word on
    when to come back (429 and 503 ``Retry-After``)."""

    status_code = 502
    code = "provider_error"

    def __init__(self, provider: str, kind: str, message: str, *, retryable: bool = True,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider
        self.kind = kind
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass
class ChatUsage:
    """Tokens one call used and what they cost (the provider's price per million tokens)."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    estimated: bool = False  # the provider reported none; counted from the text

    def add(self, other: ChatUsage) -> None:
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cost += other.cost
        self.estimated = self.estimated or other.estimated

    def as_dict(self) -> dict[str, Any]:
        return {"tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "cost": round(self.cost, 8), "estimated": self.estimated}


def request_body(model: str, messages: list[dict[str, Any]], *, stream: bool, include_usage: bool,
                 temperature: float = 0.0, max_tokens: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "temperature": temperature,
                  "stream": stream}
    if max_tokens:
        body["max_tokens"] = max_tokens
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def parse_usage(raw: object) -> tuple[int, int] | None:
    """``usage.prompt_tokens`` / ``completion_tokens``, or None when absent or odd."""
    if not isinstance(raw, dict):
        return None
    try:
        return int(raw.get("prompt_tokens") or 0), int(raw.get("completion_tokens") or 0)
    except (TypeError, ValueError):
        return None


def parse_completion(provider: str, text: str) -> tuple[str, tuple[int, int] | None]:
    """The message text and usage of a non-streamed response body."""
    try:
        body = json.loads(text)
        content = body["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ProviderError(provider, "malformed",
                            f"sent a response that is not a chat completion: {text[:200]!r}") from e
    if content is not None and not isinstance(content, str):
        raise ProviderError(provider, "malformed", "sent a message whose content is not text")
    return content or "", parse_usage(body.get("usage"))


def _vector(embedding: list[float] | str) -> np.ndarray | list[float]:
    """One row as sent: a list of numbers (``"encoding_format": "float"``, and servers that
    ignore the field), or with ``"base64"`` the float32 values, little-endian, base64-encoded
    (the reference; the official OpenAI clients ask for it because it is smaller and far cheaper
    to decode than JSON numbers)."""
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4")
    return embedding


def refuses_base64(error: ProviderError) -> bool:
    """A 400 or 422 to a request that asked for base64: maybe the server takes embeddings
    requests but not ``"encoding_format": "base64"`` (llama.cpp-style servers and FastAPI
    validators answer so, not all of them naming the field), maybe the texts were the
    trouble. Asking again in numbers, the protocol's default, tells which."""
    text = str(error).lower()
    return error.kind == "refused" and (
        "encoding_format" in text or "base64" in text
        or "answered 400" in text or "answered 422" in text)


def parse_embeddings(provider: str, text: str, count: int) -> tuple[np.ndarray, int | None]:
    """``data[i].embedding`` ordered by ``data[i].index`` (the reference says rows come in
    input order; ``index`` is there so nobody has to trust it), and ``usage.prompt_tokens``.
    A row is a list of numbers or a base64 string (see ``_vector``)."""
    try:
        body = json.loads(text)
        rows = sorted(body["data"], key=lambda d: d.get("index", 0))
        vectors = np.asarray([_vector(row["embedding"]) for row in rows], dtype=np.float32)
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # bad base64 too
        raise ProviderError(provider, "malformed",
                            f"sent a response that is not embeddings: {text[:200]!r}") from e
    if vectors.ndim != 2 or len(vectors) != count:
        raise ProviderError(provider, "malformed",
                            f"sent {len(vectors)} embeddings for {count} inputs")
    usage = body.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return vectors, int(tokens) if isinstance(tokens, int) else None


@dataclass
class Chunk:
    """One streamed piece: text (possibly empty), and usage when the provider sent it."""

    text: str = ""
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The ``data`` of each event of a server-sent event stream (multi-line data joined with
    newlines, comments and other fields skipped), per the WHATWG event-stream format."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
    if data:
        yield "\n".join(data)


def parse_chunk(provider: str, data: str) -> Chunk | None:
    """One ``data:`` payload of a streamed completion; None for ``[DONE]``."""
    if data.strip() == "[DONE]":
        return None
    try:
        body = json.loads(data)
        choices = body["choices"]
        if not isinstance(choices, list):
            raise TypeError("choices is not a list")
    except (ValueError, KeyError, TypeError) as e:
        raise ProviderError(provider, "malformed",
                            f"sent a stream chunk that is not a completion chunk: {data[:200]!r}"
                            ) from e
    chunk = Chunk(usage=parse_usage(body.get("usage")))
    if choices:
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        content = delta.get("content") if isinstance(delta, dict) else None
        if content is not None and not isinstance(content, str):
            raise ProviderError(provider, "malformed", "sent a delta whose content is not text")
        chunk.text = content or ""
        chunk.finish_reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return chunk


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
