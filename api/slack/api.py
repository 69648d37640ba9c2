"""citewise's HTTP API as the bot calls it: with its own key, naming the asker.

The bot's key must be allowed to assert identity (``citewise keys create slack-bot --scopes
search,answer --assert-identity``): it sends the person's email and groups in
``X-Citewise-User`` / ``X-Citewise-Groups`` (``ActingFor``), and citewise filters by them as it
would for that person. The calls go through ``citewise_client``; every failure becomes a
``CitewiseUnavailable`` with one short sentence for the person, chosen by the kind of error
(the problem's type), and the request id for the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from citewise_client import (
    ActingFor,
    Answer,
    CitewiseClient,
    CitewiseClientError,
    Filters,
    GuardrailBlocked,
    NotFound,
    RateLimited,
    SearchHit,
    Unreachable,
)


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
        self._client = CitewiseClient(self.base_url, api_key, timeout=timeout,
                                      transport=transport)

    def answer(self, question: str, *, user: str | None, groups: list[str],
               conversation_id: str | None = None, sources: list[str] | None = None) -> Answer:
        with self._apology(answering=True):
            return self._client.answer(question[:2000], conversation_id=conversation_id,
                                       filters=Filters(sources=sources or []),
                                       acting_for=ActingFor(user, groups))

    def search(self, query: str, *, user: str | None, groups: list[str], top_k: int = 3,
               sources: list[str] | None = None) -> list[SearchHit]:
        with self._apology():
            return self._client.search(query[:2000], top_k=top_k,
                                       filters=Filters(sources=sources or []),
                                       acting_for=ActingFor(user, groups)).results

    def feedback(self, answer_id: str, helpful: bool, *, user: str | None,
                 groups: list[str], right_document: str | None = None) -> None:
        with self._apology():
            self._client.feedback(answer_id, helpful=helpful, right_document=right_document,
                                  acting_for=ActingFor(user, groups))

    def close(self) -> None:
        self._client.close()

    @contextmanager
    def _apology(self, *, answering: bool = False) -> Iterator[None]:
        try:
            yield
        except Unreachable as e:
            raise CitewiseUnavailable(
                "citewise cannot be reached right now; try again in a minute.") from e
        except RateLimited as e:
            wait = f"{e.retry_after:g}" if e.retry_after is not None else "a few"
            raise CitewiseUnavailable(f"Too many questions just now: try again in {wait} s.",
                                      e.request_id, e.status) from e
        except GuardrailBlocked as e:
            raise CitewiseUnavailable(
                "That is a subject citewise does not answer here: " + (e.detail or ""),
                e.request_id, e.status) from e
        except NotFound as e:
            if not answering:
                raise self._failed(e) from e
            raise CitewiseUnavailable("That conversation has expired; ask again.",
                                      e.request_id, e.status) from e
        except CitewiseClientError as e:
            raise self._failed(e) from e

    @staticmethod
    def _failed(e: CitewiseClientError) -> CitewiseUnavailable:
        return CitewiseUnavailable(
            f"citewise could not answer (error {e.status}); the team that runs it can look up "
            f"request {e.request_id}.", e.request_id, e.status)
