"""The settings of a citewise process, composed of every layer's part (see
``core/settings.py``: how a part is declared, read and loaded). The parts, by the field that
holds each, and where each is declared:

* core's own (``core/settings.py``): the config file, the data folder, logging, the default
  readers and ``[[sources]]``;
* ``ingest`` (``ingest/settings.py``): chunk size, free disk kept, paths HTTP callers may
  ingest, ``[schedule]``;
* ``index`` and ``embedding`` (``index/settings.py``): Qdrant (embedded or a server), the blob
  store (a folder or S3); the dense model (packaged, a folder or an endpoint);
* ``gateway`` (``gateway/settings.py``): the model providers (``[[llm.providers]]``), retries,
  the deadline and breakers;
* ``retrieval`` (``retrieval/settings.py``): search, fusion, synonyms, reranking, abstaining,
  the answer cache;
* ``answering`` and ``server`` (here): conversations and ``[[guardrails]]``; the bind address,
  proxies, CORS, HTTP limits and stream keep-alives;
* ``slack`` (``api/slack/settings.py``), ``identity`` (``api/identity/settings.py``, with
  ``[[groups]]``), ``metering`` (``api/metering/settings.py``).

The composition root (``api/composition.py``) hands each service its part; only the API layer
sees the whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from citewise.api.identity.settings import GROUPS_TABLE, IdentitySettings
from citewise.api.metering.settings import MeteringSettings
from citewise.api.slack.settings import SLACK_TABLE, SlackSettings
from citewise.gateway.settings import PROVIDERS_TABLE, GatewaySettings
from citewise.index.settings import EmbeddingSettings, IndexSettings
from citewise.ingest.settings import SCHEDULE_TABLE, IngestSettings
from citewise.retrieval.settings import RetrievalSettings
from citewise.settings import SOURCES_TABLE, ConfigTable, CoreSettings, SettingsPart, from_table


class GuardrailConfig(BaseModel):
    """A ``[[guardrails]]`` entry: a policy on what goes into answers and what comes out (see
    docs/guardrails.md)."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    kind: Literal["injection", "secrets", "pii", "deny"]
    action: Literal["block", "flag", "redact", "off"]
    terms: list[str] = Field(default_factory=list, description="deny: words or phrases.")
    routes: list[str] = Field(default_factory=list,
                              description="Routes it applies to (/v1/answer...); empty: all.")
    sources: list[str] = Field(default_factory=list,
                               description="injection: sources it applies to; empty: all.")

    @model_validator(mode="after")
    def _fits(self) -> GuardrailConfig:
        if self.kind == "deny" and not self.terms:
            raise ValueError(f"guardrail '{self.name}': a deny policy needs terms")
        if self.kind == "deny" and self.action == "redact":
            raise ValueError(f"guardrail '{self.name}': deny blocks or flags; it cannot redact")
        return self


class AnsweringSettings(SettingsPart):
    """What the answer service (``api/answering.py``) holds every door's answers to."""

    conversation_idle_hours: float = Field(
        default=168.0, gt=0, description="Hours without a question after which a conversation "
        "is forgotten.")
    conversation_max_turns: int = Field(
        default=100, ge=1, description="Turns one conversation may hold; a question beyond "
        "them is refused (409) with a hint to start a new conversation.")
    guardrails: list[GuardrailConfig] = from_table("[[guardrails]]", list)


def _read_guardrails(table: Any, path: Path) -> dict[str, Any]:
    return {"guardrails": [GuardrailConfig(**g) for g in table or []]}


GUARDRAILS_TABLE = ConfigTable("guardrails", "[[guardrails]]", _read_guardrails)


class ServerSettings(SettingsPart):
    """The HTTP server: where `citewise serve` binds, what it believes of proxies and browsers,
    and the limits it holds connections and requests to."""

    sse_keepalive: float = Field(
        default=15.0, gt=0, description="Seconds of quiet after which a streamed answer sends "
        "a `: ping` comment, so proxies keep the connection open.")
    host: str = Field(default="127.0.0.1", description="Address `citewise serve` binds.")
    port: int = Field(default=8000, description="Port `citewise serve` binds.")
    cors_origins: str | None = Field(
        default=None, description="Origins allowed to call the API from a browser "
        "(comma-separated); unset = CORS off."
    )
    trusted_proxies: str | None = Field(
        default=None,
        description="Addresses or networks of reverse proxies whose X-Forwarded-For is believed "
        "(comma-separated), read from the right: the first address that is not a trusted proxy "
        "is the client; * = whoever connects, and only the entry it appended (refused in local "
        "mode); unset = the client address is the socket's.",
    )
    max_request_bytes: int = Field(
        default=1_048_576, ge=1024, description="Largest request body accepted (bytes)."
    )
    http_keep_alive: float = Field(
        default=5.0, gt=0, description="Seconds an idle kept-alive connection stays open.")
    http_header_timeout: float = Field(
        default=10.0, gt=0, description="Seconds a connection has to send a request's line "
        "and headers (after opening, or after its previous response) before it is closed.")
    http_max_header_bytes: int = Field(
        default=65_536, ge=4096, description="Largest request head (request line and headers) "
        "accepted, in bytes; larger is a 431.")
    http_max_concurrency: int = Field(
        default=1000, ge=1, description="Most connections and requests served at once; "
        "more are answered 503.")


class Settings(CoreSettings):
    """Every knob, each in the part of the layer that reads it. Made from flat names, as the
    environment and the config file give them: ``Settings(data_dir=..., qdrant_url=...)``;
    ``Settings.load(config_file, **overrides)`` reads the file too."""

    # In the order errors list them ([settings] first).
    config_tables = (SCHEDULE_TABLE, SOURCES_TABLE, GROUPS_TABLE, PROVIDERS_TABLE,
                     GUARDRAILS_TABLE, SLACK_TABLE)

    ingest: IngestSettings = Field(default_factory=IngestSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    answering: AnsweringSettings = Field(default_factory=AnsweringSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    metering: MeteringSettings = Field(default_factory=MeteringSettings)
