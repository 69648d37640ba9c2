"""The Slack bot's settings: its Web API base, its state file, and the ``[slack]`` table of the
config file (channels and user groups). Read by ``citewise slack``, a process of its own; its
tokens come from SLACK_BOT_TOKEN, SLACK_APP_TOKEN and SLACK_SIGNING_SECRET (see
``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from citewise.errors import ConfigError
from citewise.settings import ConfigTable, SettingsPart, from_table


class SlackChannelConfig(BaseModel):
    """A ``[[slack.channels]]`` entry: how the Slack bot behaves in one channel."""

    model_config = {"extra": "forbid"}

    id: str = Field(pattern=r"^[CGD][A-Z0-9]{2,}$", description="The channel id (C0123...).")
    sources: list[str] = Field(default_factory=list, description="Only these sources.")
    mention_only: bool = True
    ephemeral: bool = False
    audience: list[str] = Field(default_factory=list,
                                description="Groups every member of the channel belongs to.")
    oncall: str | None = Field(default=None, description="Slack user group id for humans.")


class SlackSettings(SettingsPart):
    slack_api_url: str = Field(
        default="https://slack.com/api/", description="Slack Web API base URL (GovSlack, an "
        "egress proxy); the bot's tokens come from SLACK_BOT_TOKEN, SLACK_APP_TOKEN and "
        "SLACK_SIGNING_SECRET.")
    slack_state: Path | None = Field(
        default=None, description="SQLite file mapping Slack threads to conversations (and "
        "the event ids the bot has taken, so none is answered twice); unset = "
        "slack-threads.db in the data folder.")
    slack_channels: list[SlackChannelConfig] = from_table("[[slack.channels]]", list)
    slack_groups: dict[str, str] = from_table("[slack.groups]", dict)


def _read_slack(table: Any, path: Path) -> dict[str, Any]:
    slack = {} if table is None else table
    if not isinstance(slack, dict) or set(slack) - {"channels", "groups"}:
        raise ConfigError(f"config file {path}: [slack] holds [[slack.channels]] and "
                          "[slack.groups]", hint="see docs/slack.md")
    return {"slack_channels": [SlackChannelConfig(**c) for c in slack.get("channels", [])],
            "slack_groups": {str(k): str(v) for k, v in slack.get("groups", {}).items()}}


SLACK_TABLE = ConfigTable("slack", "[slack]", _read_slack)
