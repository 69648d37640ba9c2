"""Slack's Events API over HTTP: a small ASGI app at ``/slack/events`` whose every request is
checked against the signing secret by Bolt (HMAC-SHA256 over ``v0:{timestamp}:{body}``, five
minutes of clock skew at most) before anything reads it.

A timestamp that is not a number is refused here, with a 401 problem document: the SDK's check
would raise on it (``int(timestamp)``), a 500. Retried and replayed events are dropped after the
signature check, by ``event_id`` (``deliveries.py``)."""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from slack_bolt import App
from slack_bolt.adapter.fastapi import SlackRequestHandler

from citewise.api.problems import problem

_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")


def events_app(app: App) -> FastAPI:
    handler = SlackRequestHandler(app)
    api = FastAPI(title="citewise Slack bot", docs_url=None, redoc_url=None, openapi_url=None)

    @api.post("/slack/events")
    async def events(request: Request):
        stamp = request.headers.get("x-slack-request-timestamp")
        if stamp is not None and not _TIMESTAMP.match(stamp):
            return problem(401, "unauthorized", "X-Slack-Request-Timestamp is not a time in "
                           "seconds, so the request's signature cannot be checked",
                           "requests to this URL come from Slack, signed", path="/slack/events")
        return await handler.handle(request)

    @api.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    return api
