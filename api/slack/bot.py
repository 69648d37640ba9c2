"""The Bolt app: where questions come from, who is asking, and what goes back.

Triggers: ``@citewise question`` in a channel (answered in its thread), a direct message, the
``/ask`` slash command (answered ephemerally, with a "Share in channel" button), and any
message in a thread the bot has answered (a follow-up, same conversation).

Who an answer may draw on. In a direct message and for ``/ask``, the asker: their email as the
citewise user, their groups from the mapped Slack user groups. In a channel, the people who
will read the answer are the channel's members, not the asker, so the bot asks as the
channel's configured audience (``audience`` groups; by default none, which means documents
readable by everyone) and never as the asker: a member of ``security`` asking in a general
channel gets only what the channel may see, and is told to ask in a DM for the rest. A channel
whose members all belong to a group (``#sec-incidents``) is configured with that audience.

Slack delivers events at least once (retries, replays within the signature's five minutes): an
``event_id`` already taken is acknowledged and not answered again (``deliveries.py``).

Within Slack's three seconds the request is acknowledged (Bolt answers the HTTP request or the
Socket Mode envelope before the listener runs) and a 👀 reaction shows it is being worked on;
the answer follows in the thread.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from slack_bolt import App, BoltResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from citewise.api.slack.api import CitewiseAPI, CitewiseUnavailable
from citewise.api.slack.deliveries import Deliveries
from citewise.api.slack.people import People, UnknownPerson
from citewise.api.slack.render import RIGHT_DOCUMENT, escape, render, right_document_block
from citewise.api.slack.settings import SlackChannelConfig
from citewise.api.slack.threads import Threads

log = logging.getLogger("citewise.slack")
_MENTION = re.compile(r"<@[A-Z0-9]+>")


@dataclass
class Asked:
    """Where a question came from and who the answer is for."""

    channel: str
    thread_ts: str
    message_ts: str | None
    slack_user: str
    text: str
    direct: bool  # a DM or /ask: the asker's own identity


class Bot:
    def __init__(self, api: CitewiseAPI, client: WebClient, *, server_url: str,
                 people: People | None = None, threads: Threads | None = None,
                 channels: dict[str, SlackChannelConfig] | None = None,
                 deliveries: Deliveries | None = None) -> None:
        self.api = api
        self.client = client
        self.server_url = server_url
        self.people = people or People(client)
        self.threads = threads or Threads()
        self.channels = channels or {}
        self.deliveries = deliveries or Deliveries()
        self.ack_seconds: list[float] = []  # event received -> 👀 (for the tests and logs)

    def channel(self, channel_id: str) -> SlackChannelConfig:
        # A channel without an entry behaves by the defaults (Slack's own id, so not validated).
        return self.channels.get(channel_id) or SlackChannelConfig.model_construct(id=channel_id)

    def identity(self, asked: Asked) -> tuple[str | None, list[str]]:
        if asked.direct or self.channel(asked.channel).ephemeral:
            person = self.people.lookup(asked.slack_user)
            return person.email, list(person.groups)
        return None, list(self.channel(asked.channel).audience)

    # Answering ------------------------------------------------------------------------------
    def handle(self, asked: Asked, received: float, *, respond=None) -> None:
        question = _MENTION.sub("", asked.text).strip()
        if asked.message_ts:
            try:
                self.client.reactions_add(channel=asked.channel, timestamp=asked.message_ts,
                                          name="eyes")
                self.ack_seconds.append(time.monotonic() - received)
            except SlackApiError as e:
                log.warning("could not add the 👀 reaction: %s", e.response.get("error"))
        if not question:
            self._say(asked, "Ask me a question after the mention, e.g. "
                             "`@citewise how do I fail over the redis cache?`", respond)
            return
        config = self.channel(asked.channel)
        try:
            user, groups = self.identity(asked)
            conversation = (self.threads.get(asked.channel, asked.thread_ts)
                            if asked.thread_ts else None)
            answer = self.api.answer(question, user=user, groups=groups,
                                     conversation_id=conversation, sources=config.sources)
            if asked.thread_ts:
                self.threads.put(asked.channel, asked.thread_ts, answer.conversation_id)
            closest = None
            if answer.abstained:
                closest = [hit.model_dump() for hit in self.api.search(
                    question, user=user, groups=groups, sources=config.sources)]
        except UnknownPerson:
            self._say(asked, "I cannot tell who you are (your Slack profile has no email "
                             "citewise knows), so I cannot answer from documents you may "
                             "read.", respond)
            return
        except CitewiseUnavailable as e:
            log.warning("answer failed for %s in %s: %s (request %s)", asked.slack_user,
                        asked.channel, e.message, e.request_id)
            if e.status == 404 and conversation:
                self.threads.forget(asked.channel, asked.thread_ts)
            self._say(asked, e.message, respond)
            return
        share = None
        if respond is not None and not asked.channel.startswith("D"):
            share = [{"type": "actions", "block_id": "citewise_share", "elements": [
                {"type": "button", "action_id": "citewise_share", "value": question[:1900],
                 "text": {"type": "plain_text", "text": "Share in channel"}}]}]
        rendered = render(answer.model_dump(), self.server_url, closest=closest, extra=share)
        if not asked.direct and not config.ephemeral and not config.audience and \
                not answer.abstained:
            rendered.messages[-1]["blocks"].append({"type": "context", "elements": [{
                "type": "mrkdwn", "text": "Answered from documents everyone may read; ask me "
                "in a DM for what only you may read."}]})
        self._post(asked, rendered, respond)
        if asked.message_ts:
            try:
                self.client.reactions_remove(channel=asked.channel,
                                             timestamp=asked.message_ts, name="eyes")
            except SlackApiError:
                pass

    def _post(self, asked: Asked, rendered, respond) -> None:
        ephemeral = respond is not None or self.channel(asked.channel).ephemeral
        for message in rendered.messages:
            if respond is not None:
                respond(text=message["text"], blocks=message["blocks"],
                        response_type="ephemeral", replace_original=False)
            elif ephemeral and not asked.direct:
                self.client.chat_postEphemeral(channel=asked.channel, user=asked.slack_user,
                                               thread_ts=asked.thread_ts or None, **message)
            else:
                self.client.chat_postMessage(channel=asked.channel,
                                             thread_ts=asked.thread_ts or None, **message)
        for snippet in rendered.snippets:
            self.client.files_upload_v2(channel=asked.channel, thread_ts=asked.thread_ts or None,
                                        content=snippet["content"], title=snippet["title"],
                                        filename=f"{snippet['title']}.{snippet['filetype']}")

    def _say(self, asked: Asked, text: str, respond) -> None:
        if respond is not None:
            respond(text=text, response_type="ephemeral", replace_original=False)
        else:
            self.client.chat_postMessage(channel=asked.channel,
                                         thread_ts=asked.thread_ts or None, text=text)

    # Feedback ---------------------------------------------------------------------------------
    def feedback(self, body: dict, helpful: bool) -> None:
        action = body["actions"][0]
        channel = (body.get("channel") or {}).get("id", "")
        direct = channel.startswith("D")
        asked = Asked(channel, (body.get("message") or {}).get("thread_ts")
                      or (body.get("message") or {}).get("ts", ""), None,
                      body["user"]["id"], "", direct)
        try:
            user, groups = self.identity(asked)
            self.api.feedback(action["value"], helpful, user=user, groups=groups)
        except (CitewiseUnavailable, UnknownPerson) as e:
            log.warning("feedback not recorded: %s", e)
            return
        if not helpful:
            oncall = self.channel(channel).oncall
            human = f"<!subteam^{oncall}>" if oncall else "the on-call engineer"
            text = f"Thanks, noted. If you need a person: {human} can help."
            self.client.chat_postMessage(
                channel=channel, thread_ts=asked.thread_ts, text=text,
                blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": text}},
                        right_document_block(action["value"])])

    def right_document(self, body: dict) -> None:
        """"The right document was ...", typed under a "Not helpful": recorded as not helpful
        with that document, what `citewise feedback export --golden` learns from."""
        action = body["actions"][0]
        answer_id = str(action.get("block_id", "")).partition(":")[2]
        value = (action.get("value") or "").strip()
        if not answer_id or not value:
            return
        channel = (body.get("channel") or {}).get("id", "")
        message = body.get("message") or {}
        asked = Asked(channel, message.get("thread_ts") or message.get("ts", ""), None,
                      body["user"]["id"], "", channel.startswith("D"))
        try:
            user, groups = self.identity(asked)
            self.api.feedback(answer_id, False, user=user, groups=groups,
                              right_document=value[:1000])
        except (CitewiseUnavailable, UnknownPerson) as e:
            log.warning("right document not recorded: %s", e)
            return
        self.client.chat_postMessage(
            channel=channel, thread_ts=asked.thread_ts or None,
            text=f"Thanks: noted that the right document was {escape(value)}.")


def build_app(bot: Bot, *, signing_secret: str | None) -> App:
    app = App(client=bot.client, signing_secret=signing_secret,
              token_verification_enabled=False, process_before_response=False,
              request_verification_enabled=signing_secret is not None)

    # After Bolt's signature check (an unsigned request must not take an event id), before any
    # listener: a retried or replayed event is acknowledged, and not answered again.
    @app.middleware
    def once_per_event(req, body, next):
        event_id = body.get("event_id") if isinstance(body, dict) else None
        if event_id and not bot.deliveries.first(str(event_id)):
            retry = (req.headers.get("x-slack-retry-num") or [None])[0]
            log.info("event %s delivered again (retry %s, %s): acknowledged, not answered",
                     event_id, retry or "none",
                     (req.headers.get("x-slack-retry-reason") or ["a replay"])[0])
            return BoltResponse(status=200, body="")
        return next()

    @app.event("app_mention")
    def on_mention(event, logger):
        received = time.monotonic()
        bot.handle(Asked(event["channel"], event.get("thread_ts") or event["ts"], event["ts"],
                         event["user"], event.get("text", ""), False), received)

    @app.event("message")
    def on_message(event, logger):
        received = time.monotonic()
        if event.get("bot_id") or event.get("subtype") or "user" not in event:
            return
        if event.get("channel_type") == "im":
            bot.handle(Asked(event["channel"], event.get("thread_ts") or event["ts"],
                             event["ts"], event["user"], event.get("text", ""), True), received)
            return
        thread = event.get("thread_ts")
        text = event.get("text", "")
        if _MENTION.search(text):
            return  # app_mention handles it
        if thread and bot.threads.get(event["channel"], thread):
            bot.handle(Asked(event["channel"], thread, event["ts"], event["user"], text,
                             False), received)
        elif not thread and not bot.channel(event["channel"]).mention_only:
            bot.handle(Asked(event["channel"], event["ts"], event["ts"], event["user"], text,
                             False), received)

    @app.command("/ask")
    def on_ask(ack, command, respond):
        ack()
        received = time.monotonic()
        bot.handle(Asked(command["channel_id"], "", None, command["user_id"],
                         command.get("text", ""), True), received, respond=respond)

    @app.action("citewise_share")
    def on_share(ack, body):
        ack()
        channel = body["channel"]["id"]
        bot.handle(Asked(channel, "", None, body["user"]["id"], body["actions"][0]["value"],
                         False), time.monotonic())

    @app.action("citewise_helpful")
    def on_helpful(ack, body):
        ack()
        bot.feedback(body, True)

    @app.action("citewise_not_helpful")
    def on_not_helpful(ack, body):
        ack()
        bot.feedback(body, False)

    @app.action(RIGHT_DOCUMENT)
    def on_right_document(ack, body):
        ack()
        bot.right_document(body)

    return app
