"""`citewise slack`: the Slack bot, as its own process, talking to a citewise server."""

from __future__ import annotations

import os
import textwrap

import click

from citewise.api.cli.base import Context, cli
from citewise.errors import ConfigError


def _env(name: str, why: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise click.UsageError(f"${name} is not set: {why}")
    return value


def build_bot(obj: Context, *, http: bool):
    """The bot and its Bolt app from the environment and the config file's [slack] table."""
    from slack_sdk import WebClient
    from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

    from citewise.api.slack.api import CitewiseAPI
    from citewise.api.slack.bot import Bot, build_app
    from citewise.api.slack.deliveries import Deliveries
    from citewise.api.slack.people import People
    from citewise.api.slack.threads import Threads

    settings = obj.settings.slack
    server = _env("CITEWISE_URL", "the citewise server the bot asks, e.g. http://127.0.0.1:8000")
    token = _env("SLACK_BOT_TOKEN", "the bot token (xoxb-...) from the Slack app's OAuth page")
    secret = _env("SLACK_SIGNING_SECRET", "HTTP mode checks every request's signature with it") \
        if http else None
    client = WebClient(token=token, base_url=settings.slack_api_url,
                       retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=3)])
    api = CitewiseAPI(server, os.environ.get("CITEWISE_API_KEY"))
    channels = {c.id: c for c in settings.slack_channels}
    state = settings.slack_state or obj.settings.data_dir / "slack-threads.db"
    bot = Bot(api, client, server_url=server, people=People(client, settings.slack_groups),
              threads=Threads(state), channels=channels, deliveries=Deliveries(state))
    return bot, build_app(bot, signing_secret=secret)


@cli.command(
    epilog=textwrap.dedent(
        """
        \b
        Examples:
          citewise slack                        Socket Mode (needs SLACK_APP_TOKEN)
          citewise slack --http --port 3000     Events over HTTP at /slack/events

        \b
        Environment:
          CITEWISE_URL          the citewise server, e.g. http://127.0.0.1:8000
          CITEWISE_API_KEY      the bot's key (scopes search,answer; --assert-identity)
          SLACK_BOT_TOKEN       xoxb-... (the app's bot token)
          SLACK_APP_TOKEN       xapp-... (Socket Mode, connections:write)
          SLACK_SIGNING_SECRET  (HTTP mode)
          CITEWISE_SLACK_API_URL  another Slack API base (GovSlack, a proxy)

        Channels and Slack user groups are configured under [slack] in the config file; see
        docs/slack.md for the app manifest and who an answer may draw on.
        """
    )
)
@click.option("--http", is_flag=True, help="Receive events over HTTP instead of Socket Mode.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP mode: address.")
@click.option("--port", default=3000, show_default=True, help="HTTP mode: port.")
@click.pass_obj
def slack(obj: Context, http: bool, host: str, port: int) -> None:
    """Run the Slack bot: answers mentions, DMs, /ask and thread follow-ups from citewise."""
    try:
        bot, app = build_bot(obj, http=http)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    if http:
        import uvicorn

        from citewise.api.slack.events import events_app

        uvicorn.run(events_app(app), host=host, port=port, log_level="info")
        return
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    app_token = _env("SLACK_APP_TOKEN", "Socket Mode connects with the app-level token (xapp-)")
    SocketModeHandler(app, app_token).start()  # reconnects by itself when Slack drops it
