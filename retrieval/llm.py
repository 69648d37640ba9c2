"""Generated answers through any OpenAI-compatible chat API (vLLM, Ollama, Workers AI, OpenAI).

Optional: without ``CITEWISE_LLM_BASE_URL`` citewise answers extractively. The model only sees
passages the caller may read, numbered, and must cite them as ``[n]``; answers that cite nothing
are rejected by the caller and replaced by the extractive answer.
"""

from __future__ import annotations

import httpx

SYSTEM_PROMPT = (
    "You answer questions for engineers using only the numbered passages given. "
    "Cite every claim with the passage number in square brackets, like [1] or [2][3]. "
    "If the passages do not contain the answer, reply with exactly NO_ANSWER. "
    "Be concise: a few sentences or short steps."
)


class LLMError(Exception):
    pass


class LLMClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def answer(self, question: str, passages: list[tuple[str, str, str]]) -> str:
        numbered = "\n\n".join(
            f"[{i}] {title}{' > ' + heading if heading else ''}\n{text}"
            for i, (title, heading, text) in enumerate(passages, start=1)
        )
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"Passages:\n\n{numbered}\n\nQuestion: {question}"},
            ],
        }
        try:
            resp = self._http.post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise LLMError(f"LLM endpoint {self.base_url} unreachable: {e}") from e
        if resp.status_code != 200:
            raise LLMError(f"LLM endpoint answered {resp.status_code}: {resp.text[:200]}")
        try:
            return resp.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise LLMError(f"LLM endpoint sent an unexpected body: {resp.text[:200]}") from e

    def close(self) -> None:
        self._http.close()
