"""citewise's HTTP API as the bot calls it: with its own key, naming the asker.

The bot's key must be allowed to assert identity (``citewise keys create slack-bot --scopes
search,answer --assert-identity``): it sends the person's email and groups in
``X-Citewise-User`` / ``X-Citewise-Groups``, and citewise filters by them as it would for that
person. Every failure becomes a ``CitewiseUnavailable`` with one short sentence for the person
and the request id for the log.
"""

from __future__ import annotations

import httpx

from citewise.api.cli.base import identity_headers


class CitewiseUnavailable(Exception):
    def __init__(self, message: str, request_id: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.status = status


class CitewiseAPI:
    def __init__(self, base_url: str, api_key: str | None, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                  transport=transport)

    @staticmethod
    def _identity(user: str | None, groups: list[str]) -> dict:
        return identity_headers(user, tuple(groups))

    def _post(self, path: str, body: dict, headers: dict) -> dict:
        try:
            resp = self._http.post(path, json=body, headers=headers)
        except httpx.HTTPError as e:
            raise CitewiseUnavailable(
                "citewise cannot be reached right now; try again in a minute.") from e
        request_id = resp.headers.get("x-request-id")
        if resp.status_code == 429:
            wait = resp.headers.get("retry-after", "a few")
            raise CitewiseUnavailable(f"Too many questions just now: try again in {wait} s.",
                                      request_id, 429)
        if resp.status_code == 403 and "guardrail" in resp.text:
            raise CitewiseUnavailable(
                "That is a subject citewise does not answer here: "
                + resp.json().get("detail", ""), request_id, 403)
        if resp.status_code == 404 and path.startswith("/v1/answer"):
            raise CitewiseUnavailable("That conversation has expired; ask again.", request_id,
                                      404)
        if resp.status_code >= 400:
            raise CitewiseUnavailable(
                f"citewise could not answer (error {resp.status_code}); the team that runs it "
                f"can look up request {request_id}.", request_id, resp.status_code)
        return resp.json()

    def answer(self, question: str, *, user: str | None, groups: list[str],
               conversation_id: str | None = None, sources: list[str] | None = None) -> dict:
        body: dict = {"question": question[:2000]}
        if conversation_id:
            body["conversation_id"] = conversation_id
        if sources:
            body["filters"] = {"sources": sources}
        return self._post("/v1/answer", body, self._identity(user, groups))

    def search(self, query: str, *, user: str | None, groups: list[str], top_k: int = 3,
               sources: list[str] | None = None) -> list[dict]:
        body: dict = {"query": query[:2000], "top_k": top_k}
        if sources:
            body["filters"] = {"sources": sources}
        return self._post("/v1/search", body, self._identity(user, groups))["results"]

    def feedback(self, answer_id: str, helpful: bool, *, user: str | None,
                 groups: list[str]) -> None:
        self._post(f"/v1/answers/{answer_id}/feedback", {"helpful": helpful},
                   self._identity(user, groups))

    def close(self) -> None:
        self._http.close()
