"""Metering's settings: token buckets per principal and per key, per route class, and how long
usage is kept (see ``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pydantic import Field

from citewise.settings import SettingsPart


class MeteringSettings(SettingsPart):
    rate_search_per_minute: int = Field(default=120, ge=0, description="0 = unlimited.")
    rate_answer_per_minute: int = Field(default=30, ge=0, description="0 = unlimited.")
    rate_ingest_per_minute: int = Field(default=10, ge=0, description="0 = unlimited.")
    quota_search_per_day: int = Field(default=0, ge=0, description="0 = unlimited.")
    quota_answer_per_day: int = Field(default=0, ge=0, description="0 = unlimited.")
    quota_ingest_per_day: int = Field(default=0, ge=0, description="0 = unlimited.")
    identity_key_limits: str = Field(
        default="search_per_minute=1200,answer_per_minute=300,ingest_per_minute=100",
        description="Limits a key that may assert identity (the Slack bot's) has as a whole, "
        "over everyone it names in X-Citewise-User, unless it was created with its own "
        "(--limit); without them, naming a new user each request would be a new allowance. "
        "Comma-separated NAME=N as for --limit; empty = none.")
    usage_raw_days: int = Field(
        default=7, ge=1, description="Days each request is kept row by row; then per hour."
    )
    usage_retention_days: int = Field(
        default=400, ge=1, description="Days usage is kept at all (hourly rows after raw_days)."
    )
