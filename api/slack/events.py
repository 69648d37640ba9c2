"""Slack's Events API over HTTP: a small ASGI app at ``/slack/events`` whose every request is
checked against the signing secret by Bolt (HMAC-SHA256 over ``v0:{timestamp}:{body}``, five
minutes of clock skew at most) before anything reads it."""

from __future__ import annotations

from fastapi import FastAPI, Request
from slack_bolt import App
from slack_bolt.adapter.fastapi import SlackRequestHandler


def events_app(app: App) -> FastAPI:
    handler = SlackRequestHandler(app)
    api = FastAPI(title="citewise Slack bot", docs_url=None, redoc_url=None, openapi_url=None)

    @api.post("/slack/events")
    async def events(request: Request):
        return await handler.handle(request)

    @api.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    return api
