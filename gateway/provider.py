"""One OpenAI-compatible endpoint: vLLM, Ollama, Workers AI, OpenAI, llama.cpp's server, TEI.

A provider knows its URL, model, key, price and limits, and turns every way a call can go
wrong into a ``ProviderError`` the router can act on. It never retries by itself: retrying and
failing over are the router's decisions, made with the whole chain and the deadline in view.
The one call it repeats is a protocol choice, not a failure: an embeddings request in base64
that gets a 400 is asked again at once in numbers, and in numbers from then on if that works.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from citewise.gateway.breaker import CircuitBreaker
from citewise.gateway.wire import (
    ChatUsage,
    Chunk,
    ProviderError,
    parse_chunk,
    parse_completion,
    parse_embeddings,
    refuses_base64,
    request_body,
    retry_after_seconds,
    sse_data,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderSpec:
    """What the router needs to know of a provider (``[[llm.providers]]`` in the config)."""

    name: str
    base_url: str
    model: str
    api_key: str | None = None
    input_price: float = 0.0  # per million prompt tokens
    output_price: float = 0.0  # per million completion tokens
    timeout: float = 30.0
    max_concurrency: int = 8
    stream_usage: bool = True  # ask for usage on the last chunk (stream_options.include_usage)


def estimate_tokens(text: str) -> int:
    """About four characters a token for English text (OpenAI's rule of thumb): used only when
    a provider reports no usage, so cost is never silently zero."""
    return max(1, round(len(text) / 4)) if text else 0


class Provider:
    def __init__(self, spec: ProviderSpec, *, breaker: CircuitBreaker | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.breaker = breaker or CircuitBreaker()
        self._slots = threading.BoundedSemaphore(max(1, spec.max_concurrency))
        self._cooldown_until = 0.0
        self._lock = threading.Lock()
        headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
        self._http = httpx.Client(headers=headers, transport=transport,
                                  timeout=httpx.Timeout(spec.timeout))
        self._base = spec.base_url.rstrip("/")
        # Embeddings are asked for in base64 (a quarter of JSON's bytes, decoded without parsing
        # a number per dimension) until the server refuses it; servers that ignore the field
        # send numbers, which are read as well.
        self._embedding_format = "base64"
        self._url = self._base + "/chat/completions"

    # Availability ------------------------------------------------------------------------
    def cool_down(self, seconds: float) -> None:
        with self._lock:
            self._cooldown_until = max(self._cooldown_until, time.monotonic() + seconds)

    def cooldown(self) -> float:
        """Seconds left of this provider's own ``Retry-After`` (not its breaker's)."""
        with self._lock:
            return max(0.0, self._cooldown_until - time.monotonic())

    def wait_time(self) -> float:
        """Seconds before this provider may be called again: its own ``Retry-After``, or the
        breaker's open period."""
        with self._lock:
            cooldown = max(0.0, self._cooldown_until - time.monotonic())
        return max(cooldown, self.breaker.retry_in())

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.spec.input_price + tokens_out * self.spec.output_price) / 1e6

    def usage(self, reported: tuple[int, int] | None, prompt: list[dict[str, Any]],
              completion: str) -> ChatUsage:
        if reported is None:
            tokens_in = sum(estimate_tokens(str(m.get("content", ""))) for m in prompt)
            tokens_out = estimate_tokens(completion)
        else:
            tokens_in, tokens_out = reported
        return ChatUsage(tokens_in, tokens_out, self.cost(tokens_in, tokens_out),
                         estimated=reported is None)

    # Calls -------------------------------------------------------------------------------
    def _timeout(self, seconds: float) -> httpx.Timeout:
        seconds = max(0.05, min(seconds, self.spec.timeout))
        return httpx.Timeout(seconds, connect=min(seconds, 5.0))

    def _acquire(self, seconds: float) -> None:
        if not self._slots.acquire(timeout=max(0.0, min(seconds, 1.0))):
            raise ProviderError(self.name, "busy", f"all {self.spec.max_concurrency} "
                                "concurrent requests are in use")

    def _post(self, url: str, body: dict[str, Any], timeout: float, what: str) -> str:
        """One non-streamed call within a concurrency slot: the response text, once its status
        is 200; every failure as a ``ProviderError``."""
        self._acquire(timeout)
        try:
            try:
                resp = self._http.post(url, json=body, timeout=self._timeout(timeout))
            except httpx.TimeoutException as e:
                raise ProviderError(self.name, "timeout",
                                    f"no {what} within {min(timeout, self.spec.timeout):.1f} s"
                                    ) from e
            except httpx.HTTPError as e:
                raise ProviderError(self.name, "connect", f"unreachable: {e}") from e
            self._check_status(resp.status_code, resp.headers, resp.text)
            return resp.text
        finally:
            self._slots.release()

    def complete(self, messages: list[dict[str, Any]], *, timeout: float,
                 max_tokens: int | None = None) -> tuple[str, ChatUsage]:
        body = request_body(self.spec.model, messages, stream=False, include_usage=False,
                            max_tokens=max_tokens)
        text, reported = parse_completion(self.name,
                                          self._post(self._url, body, timeout, "answer"))
        return text, self.usage(reported, messages, text)

    def embed(self, texts: list[str], *, timeout: float) -> tuple[np.ndarray, ChatUsage]:
        """``POST /embeddings`` (OpenAI, TEI, vLLM, Workers AI): one row per text, in order,
        L2-normalised so that a dot product is the cosine the index uses."""
        fmt = self._embedding_format
        body = {"model": self.spec.model, "input": texts, "encoding_format": fmt}
        started = time.monotonic()
        try:
            raw = self._post(self._base + "/embeddings", body, timeout, "embeddings")
        except ProviderError as e:
            if fmt != "base64" or not refuses_base64(e):
                raise
            # Some OpenAI-compatible servers answer 400 (or FastAPI's 422) to base64, not all
            # of them saying why. The same texts in numbers tell: if they are taken, numbers
            # from now on; if not, the 400 was about the texts, and base64 stays.
            body["encoding_format"] = "float"
            raw = self._post(self._base + "/embeddings", body,
                             max(0.0, timeout - (time.monotonic() - started)), "embeddings")
            with self._lock:
                switched, self._embedding_format = self._embedding_format == "base64", "float"
            if switched:  # one warning, however many calls were refused at once
                log.warning("provider %s refused base64 embeddings (%s) and took numbers; "
                            "asking for numbers from now on", self.name, e)
        vectors, reported = parse_embeddings(self.name, raw, len(texts))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1, norms)
        tokens = reported if reported is not None else sum(estimate_tokens(t) for t in texts)
        return vectors, ChatUsage(tokens, 0, self.cost(tokens, 0), estimated=reported is None)

    def stream(self, messages: list[dict[str, Any]], *,
               timeout: float) -> Generator[Chunk, None, None]:
        """The streamed completion chunk by chunk. Ends normally only on ``[DONE]`` or a
        ``finish_reason``; a connection that closes before either is a dropped stream. Closing
        the iterator closes the upstream connection (the caller went away)."""
        body = request_body(self.spec.model, messages, stream=True,
                            include_usage=self.spec.stream_usage)
        deadline = time.monotonic() + timeout
        self._acquire(timeout)
        try:
            try:
                with self._http.stream("POST", self._url, json=body,
                                       timeout=self._timeout(timeout),
                                       headers={"Accept": "text/event-stream"}) as resp:
                    if resp.status_code != 200:
                        resp.read()
                        self._check_status(resp.status_code, resp.headers, resp.text)
                    finished = False
                    for data in sse_data(resp.iter_lines()):
                        chunk = parse_chunk(self.name, data)
                        if chunk is None:
                            finished = True
                            break
                        if chunk.finish_reason:
                            finished = True
                        yield chunk
                        if time.monotonic() > deadline:
                            raise ProviderError(self.name, "timeout",
                                                "the stream ran past the deadline")
                    if not finished:
                        raise ProviderError(self.name, "dropped",
                                            "the stream ended before [DONE]")
            except httpx.TimeoutException as e:
                raise ProviderError(self.name, "timeout", "the stream stalled past "
                                    f"{min(timeout, self.spec.timeout):.1f} s") from e
            except httpx.HTTPError as e:
                raise ProviderError(self.name, "dropped", f"the stream broke: {e}") from e
        finally:
            self._slots.release()

    def _check_status(self, status: int, headers: httpx.Headers, text: str) -> None:
        if status == 200:
            return
        retry_after = retry_after_seconds(headers.get("retry-after"))
        detail = text[:200].strip()
        if status == 429:
            raise ProviderError(self.name, "rate_limited", f"429 rate limited: {detail}",
                                retry_after=retry_after)
        if status >= 500 or status == 408:
            raise ProviderError(self.name, "status", f"answered {status}: {detail}",
                                retry_after=retry_after)
        # 400/401/403/404: this provider will not take this request (a wrong key or model
        # name, a prompt too long for it); another provider might.
        raise ProviderError(self.name, "refused", f"answered {status}: {detail}",
                            retryable=False)

    def close(self) -> None:
        self._http.close()
