"""Settings: 12-factor environment variables (``CITEWISE_*``) over an optional TOML config file.

Precedence, highest first: environment, the config file's ``[settings]`` table, defaults. The
config file also declares the sources that ``citewise ingest --all`` (the nightly cron) runs::

    [settings]
    data_dir = "/var/lib/citewise"

    [[sources]]
    name = "runbooks"
    type = "folder"
    path = "/srv/runbooks"
    readers = ["group:engineering"]
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from citewise.errors import ConfigError, NotFoundError
from citewise.types import normalise_readers

SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class SourceConfig(BaseModel):
    """One source: a name, a connector type and that connector's own settings."""

    model_config = {"extra": "allow", "populate_by_name": True}

    name: str
    type: str
    # When `citewise serve` ingests it: a cron expression, "off", or None for [schedule]'s.
    schedule: str | None = None
    # Who may read the source's documents when a document does not say so itself (front matter,
    # an HTML meta, Confluence restrictions). None: the settings' ``default_readers``; a folder
    # or git source with neither is refused, since "public" must always be said explicitly.
    readers: list[str] | None = Field(
        default=None, validation_alias=AliasChoices("readers", "default_readers")
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not SOURCE_NAME.match(v):
            raise ValueError(
                f"source name {v!r} must be lowercase letters, digits, '.', '_' or '-' "
                "(at most 63 characters), e.g. 'runbooks' or 'eng-wiki'"
            )
        return v

    @field_validator("readers")
    @classmethod
    def _valid_readers(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else normalise_readers(v)

    def options(self) -> dict[str, Any]:
        """The connector-specific settings (everything but name, type and readers)."""
        return dict(self.model_extra or {})


class GroupConfig(BaseModel):
    """A ``[[groups]]`` entry: who belongs to a group, for identity providers whose tokens carry
    no groups (Cloudflare Access by default). Members are emails; ``email_domains`` admits a
    whole domain."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
    members: list[str] = Field(default_factory=list)
    email_domains: list[str] = Field(default_factory=list)

    @field_validator("members", "email_domains")
    @classmethod
    def _lower(cls, v: list[str]) -> list[str]:
        return [x.strip().lower().lstrip("@") for x in v if x.strip()]


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


class ProviderConfig(BaseModel):
    """A ``[[llm.providers]]`` entry: one OpenAI-compatible endpoint in the model gateway's
    chain. The key is never in the file: ``api_key_env`` names the variable that holds it."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    base_url: str = Field(description="e.g. http://vllm:8000/v1 or http://localhost:11434/v1")
    model: str
    api_key_env: str | None = Field(default=None, description="Env variable with the key.")
    input_price: float = Field(default=0.0, ge=0, description="Per million prompt tokens.")
    output_price: float = Field(default=0.0, ge=0, description="Per million output tokens.")
    timeout: float = Field(default=30.0, gt=0, description="Seconds for one call.")
    max_concurrency: int = Field(default=8, ge=1, description="Calls in flight at once.")
    stream_usage: bool = Field(
        default=True, description="Ask for usage on the last streamed chunk "
        "(stream_options.include_usage); turn off for servers that reject the field.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL ending in /v1")
        return v.rstrip("/")


@dataclass(frozen=True)
class ConfigStamp:
    """The config file as it was read: when, and the digest of the bytes parsed. A long-running
    process (``citewise serve``) compares it with the file now to say that its config is older
    than the file, rather than answering from the old one as if it were all there is."""

    path: Path
    digest: str
    read_at: datetime

    @classmethod
    def of(cls, path: Path, data: bytes) -> ConfigStamp:
        return cls(path, hashlib.sha256(data).hexdigest(), datetime.now(UTC))

    def changed(self) -> bool:
        """Whether the file now holds other bytes (or is gone) than the ones read."""
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest() != self.digest
        except OSError:
            return True


class Settings(BaseSettings):
    """Every knob, with the environment variable that sets it (prefix ``CITEWISE_``)."""

    model_config = SettingsConfigDict(env_prefix="CITEWISE_", extra="ignore")
    # Set by ``load_settings``: the file as read, and the overrides given beside it, so that
    # ``reread`` gives the settings the same file, environment and overrides give now.
    _config_stamp: ConfigStamp | None = PrivateAttr(default=None)
    _overrides: dict[str, Any] | None = PrivateAttr(default=None)

    config_file: Path | None = Field(
        default=None, description="TOML file with [settings] and [[sources]] (citewise.toml)."
    )
    data_dir: Path = Field(default=Path("data"), description="Folder that holds all state.")
    min_free_mb: int = Field(
        default=100, ge=0, description="Megabytes an ingest run (and a reindex, a repair, a "
        "restore) keeps free on the data folder's disk: below that it stops with an error "
        "(the embedded index crashes when its disk fills); 0 = no check.")
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR.")
    log_format: Literal["text", "json"] = Field(default="text", description="text or json.")

    # The schedule `citewise serve` runs ingests on ([schedule] in the config file)
    schedule_ingest: str | None = Field(
        default=None, description="Cron expression for every source's ingest (e.g. "
        "'30 2 * * *'); a source's own `schedule` wins; unset = no schedule.")
    schedule_timezone: str = Field(default="UTC", description="Time zone of the schedule.")
    schedule_catch_up: bool = Field(
        default=True, description="At start, run sources whose due time passed while the "
        "server was down.")

    # Vector index
    qdrant_url: str | None = Field(
        default=None,
        description="Qdrant server URL; unset = embedded Qdrant in the data folder "
        "(`local:<folder>` = qdrant-client's local mode, as the tests use).",
    )
    qdrant_api_key: str | None = Field(default=None, description="API key for the Qdrant server.")
    qdrant_collection: str = Field(default="citewise", description="Collection on the server.")
    qdrant_timeout: float = Field(default=10.0, description="Seconds per Qdrant request.")

    # Blob store
    blob_store: Literal["local", "s3"] = Field(
        default="local", description="local (a folder in the data dir) or s3 (any S3 API)."
    )
    s3_bucket: str | None = Field(default=None, description="Bucket for raw source bytes.")
    s3_prefix: str = Field(default="citewise/", description="Key prefix inside the bucket.")
    s3_endpoint_url: str | None = Field(
        default=None, description="Endpoint for R2/MinIO/etc.; unset = AWS S3."
    )
    s3_region: str | None = Field(default=None, description="Region (R2: 'auto').")
    s3_access_key_id: str | None = Field(default=None, description="Access key id.")
    s3_secret_access_key: str | None = Field(default=None, description="Secret access key.")

    # Models
    embedding_model_path: Path | None = Field(
        default=None,
        description="Folder of a sentence-transformers model; unset = packaged all-MiniLM-L6-v2.",
    )
    embedding_batch_size: int = Field(default=32, description="Chunks per embedding batch.")
    embedding_url: str | None = Field(
        default=None, description="OpenAI-compatible embeddings API (`.../v1`: TEI, vLLM, "
        "Workers AI, OpenAI) instead of the local model; changing it needs a re-ingest.")
    embedding_model: str | None = Field(default=None, description="Model name for that API.")
    embedding_api_key: str | None = Field(default=None, description="Bearer token for it.")
    embedding_dim: int | None = Field(
        default=None, ge=1, description="Its vector size; unset = asked of the API once.")
    embedding_timeout: float = Field(default=30.0, gt=0, description="Seconds per batch.")
    embedding_concurrency: int = Field(default=4, ge=1, description="Batches in flight at once.")
    chunk_max_tokens: int = Field(
        default=200, description="Word-pieces per chunk (the model truncates at 256)."
    )
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API base (vLLM, Ollama, Workers AI); unset = extractive.",
    )
    llm_model: str | None = Field(default=None, description="Model name for the LLM endpoint.")
    llm_api_key: str | None = Field(default=None, description="Bearer token for the LLM endpoint.")
    llm_timeout: float = Field(
        default=60.0, gt=0, description="Seconds one model call may take (the one-provider "
        "shortcut; [[llm.providers]] set their own).")
    llm_input_price: float = Field(
        default=0.0, ge=0, description="Price per million prompt tokens (one-provider shortcut).")
    llm_output_price: float = Field(
        default=0.0, ge=0, description="Price per million output tokens (one-provider shortcut).")
    llm_deadline: float = Field(
        default=90.0, gt=0, description="Seconds an answer may spend on models, retries and "
        "failovers included; then the extractive answer is returned.")
    llm_max_attempts: int = Field(
        default=4, ge=1, le=20, description="Model calls per answer, over all providers.")
    llm_breaker_failures: int = Field(
        default=5, ge=1, description="Consecutive failures that open a provider's breaker.")
    llm_breaker_reset: float = Field(
        default=30.0, gt=0, description="Seconds an open breaker waits before a probe call.")
    answer_cache: bool = Field(
        default=True, description="Serve answers to questions close to one asked before, by a "
        "caller of the same readable scope, from the semantic cache.")
    answer_cache_threshold: float = Field(
        default=0.95, gt=0, le=1, description="Cosine similarity at which a question counts as "
        "one asked before.")
    answer_cache_ttl: float = Field(default=86400.0, gt=0, description="Seconds an answer stays "
                                    "in the cache.")
    answer_cache_size: int = Field(default=5000, ge=1, description="Answers the cache holds "
                                   "(least recently used out first).")
    conversation_idle_hours: float = Field(
        default=168.0, gt=0, description="Hours without a question after which a conversation "
        "is forgotten.")
    conversation_max_turns: int = Field(
        default=100, ge=1, description="Turns one conversation may hold; a question beyond "
        "them is refused (409) with a hint to start a new conversation.")
    slack_api_url: str = Field(
        default="https://slack.com/api/", description="Slack Web API base URL (GovSlack, an "
        "egress proxy); the bot's tokens come from SLACK_BOT_TOKEN, SLACK_APP_TOKEN and "
        "SLACK_SIGNING_SECRET.")
    slack_state: Path | None = Field(
        default=None, description="SQLite file mapping Slack threads to conversations (and "
        "the event ids the bot has taken, so none is answered twice); unset = "
        "slack-threads.db in the data folder.")
    sse_keepalive: float = Field(
        default=15.0, gt=0, description="Seconds of quiet after which a streamed answer sends "
        "a `: ping` comment, so proxies keep the connection open.")

    # Retrieval
    search_prefetch: int = Field(default=50, description="Candidates per method before fusion.")
    search_fusion: Literal["convex", "rrf"] = Field(
        default="convex",
        description="How dense and BM25 candidates are fused: convex (weighted sum of scores "
        "divided by each list's best) or rrf (reciprocal rank fusion).",
    )
    search_dense_weight: float = Field(
        default=0.6, ge=0.0, le=1.0,
        description="Share of the dense score in the fused one (0..1); BM25 gets the rest.",
    )
    synonyms_file: Path | None = Field(
        default=None,
        description="Your organisation's shorthand, one group per line (`dotcom, "
        "sourcegraph.com`), added to the built-in on-call synonyms (pg, prom, bounce...).",
    )
    rerank_url: str | None = Field(
        default=None,
        description="Rerank HTTP API (Cohere/Jina/vLLM shape); unset = no reranking.",
    )
    rerank_model: str | None = Field(default=None, description="Model name for the rerank API.")
    rerank_api_key: str | None = Field(default=None, description="Bearer token for the rerank API.")
    rerank_model_path: Path | None = Field(
        default=None,
        description="Folder of a local sentence-transformers cross-encoder; unset = none.",
    )
    rerank_candidates: int = Field(
        default=20, ge=1, le=200, description="Fused chunks the reranker reorders."
    )
    rerank_timeout: float = Field(default=10.0, description="Seconds per rerank request.")
    answer_min_score: float = Field(
        default=0.32, description="Below this evidence score /v1/answer abstains "
        "(calibrated on the golden sets' tune split, see docs/quality.md)."
    )

    # API
    host: str = Field(default="127.0.0.1", description="Address `citewise serve` binds.")
    port: int = Field(default=8000, description="Port `citewise serve` binds.")
    api_keys: str | None = Field(
        default=None, exclude=True,
        description="Removed: API keys now live in the catalog (`citewise keys create`).",
    )

    # Identity (see docs/identity.md): who is calling, decided in one place (api/identity).
    require_auth: bool | None = Field(
        default=None,
        description="Refuse requests without a key or token; unset = required unless the "
        "server binds only to loopback.",
    )
    insecure_trust_identity_headers: bool = Field(
        default=False,
        description="Believe X-Citewise-User/Groups from anyone: only behind a proxy that sets "
        "them and that nothing can bypass. Logged loudly at start.",
    )
    access_team_domain: str | None = Field(
        default=None,
        description="Cloudflare Access team domain (https://<team>.cloudflareaccess.com); "
        "set with access_aud to accept Cf-Access-Jwt-Assertion tokens.",
    )
    access_aud: str | None = Field(
        default=None, description="The Access application's AUD tag (comma-separated for several)."
    )
    access_jwks_url: str | None = Field(
        default=None, description="JWKS URL; unset = <team domain>/cdn-cgi/access/certs."
    )
    access_groups_claim: str | None = Field(
        default=None,
        description="Claim holding the user's groups; unset = the [[groups]] mapping only."
    )
    oidc_issuer: str | None = Field(
        default=None, description="OIDC issuer (iss) whose bearer JWTs are accepted."
    )
    oidc_audience: str | None = Field(
        default=None, description="Expected aud of OIDC tokens (comma-separated for several)."
    )
    oidc_jwks_url: str | None = Field(default=None, description="The issuer's JWKS URL.")
    oidc_jwks_file: Path | None = Field(
        default=None, description="A JWKS file instead of the URL (air-gapped installs)."
    )
    oidc_user_claim: str = Field(
        default="email", description="Claim naming the user (falls back to sub)."
    )
    oidc_groups_claim: str = Field(default="groups", description="Claim holding the groups.")
    jwt_leeway: float = Field(
        default=60.0, ge=0, le=600, description="Seconds of clock skew allowed on exp/nbf/iat."
    )
    jwks_timeout: float = Field(default=5.0, description="Seconds to fetch a JWKS.")
    sso_scopes: str = Field(
        default="search,answer", description="Scopes of people signed in through Access/OIDC."
    )
    admin_groups: str | None = Field(
        default=None,
        description="Groups (comma-separated) whose signed-in members also get the ingest and "
        "admin scopes.",
    )

    # Metering: token buckets per principal and per key, per route class.
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
    cors_origins: str | None = Field(
        default=None, description="Origins allowed to call the API from a browser "
        "(comma-separated); unset = CORS off."
    )

    default_readers: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Readers of documents that name none, for sources that name none either "
        "(comma-separated: group:eng,user:dana); unset = such sources are refused.",
    )
    ingest_allowed_paths: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Folders under which POST /v1/ingest/jobs may ingest a path "
        "(comma-separated); unset = no path ingest over HTTP.",
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
    max_asserted_groups: int = Field(
        default=256, ge=1, description="Most groups X-Citewise-Groups may name; more is a 400.")
    max_group_name: int = Field(
        default=128, ge=1, le=1024, description="Longest group name X-Citewise-Groups may "
        "hold (characters); longer is a 400.")

    @field_validator("default_readers", mode="before")
    @classmethod
    def _split_readers(cls, v):
        if isinstance(v, str):
            v = [r for r in v.split(",") if r.strip()]
        return None if v is None else normalise_readers(v)

    @field_validator("ingest_allowed_paths", mode="before")
    @classmethod
    def _split_paths(cls, v):
        if isinstance(v, str):
            v = [p for p in v.split(",") if p.strip()]
        return [Path(p).expanduser().resolve() for p in v or []]

    # Set from the config file, not from the environment.
    sources: list[SourceConfig] = Field(default_factory=list, exclude=True)
    groups: list[GroupConfig] = Field(default_factory=list, exclude=True)
    llm_providers: list[ProviderConfig] = Field(default_factory=list, exclude=True)
    guardrails: list[GuardrailConfig] = Field(default_factory=list, exclude=True)
    slack_channels: list[SlackChannelConfig] = Field(default_factory=list, exclude=True)
    slack_groups: dict[str, str] = Field(default_factory=dict, exclude=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)

    # Derived locations inside the data folder ------------------------------------------------
    @property
    def catalog_path(self) -> Path:
        return self.data_dir / "catalog.db"

    @property
    def embedding_cache_path(self) -> Path:
        return self.data_dir / "embeddings.db"

    @property
    def qdrant_path(self) -> Path:
        return self.data_dir / "qdrant"

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def run_lock_path(self) -> Path:
        """The ingest run lock (``ingest/runlock.py``): one run at a time, any process."""
        return self.data_dir / "ingest.lock"

    @property
    def server_file(self) -> Path:
        """Written by `citewise serve` so that other processes can find it."""
        return self.data_dir / "server.json"

    @staticmethod
    def csv(value: str | None) -> list[str]:
        """A comma-separated setting as a list, blanks dropped."""
        return [v.strip() for v in (value or "").split(",") if v.strip()]

    @property
    def config_stamp(self) -> ConfigStamp | None:
        """The config file these settings were read from, as it was then (None: no file)."""
        return self._config_stamp

    def reread(self) -> Settings:
        """The settings as the same config file, the environment and the same overrides give
        them now (what ``citewise serve`` reloads). Settings not made by ``load_settings``
        read no file, and neither do these."""
        if self._overrides is None:
            raise ConfigError("these settings were not read from a config file",
                              hint="start the server with --config or CITEWISE_CONFIG_FILE")
        return load_settings(self.config_file, **self._overrides)

    def source(self, name: str) -> SourceConfig:
        for s in self.sources:
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.sources) or "none declared"
        raise NotFoundError(
            f"no source named {name!r} in the config file (known: {known})",
            hint="declare it under [[sources]] in citewise.toml, or pass a folder path",
        )


def _read_config_file(path: Path) -> tuple[dict[str, Any], ConfigStamp]:
    """The file's tables and its stamp, from one read (the digest is of the bytes parsed)."""
    try:
        data = path.read_bytes()
        return tomllib.loads(data.decode("utf-8")), ConfigStamp.of(path, data)
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text: {e}") from e
    except FileNotFoundError as e:
        raise ConfigError(
            f"config file {path} does not exist",
            hint="create it (see citewise.example.toml) or unset CITEWISE_CONFIG_FILE",
        ) from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Build settings from the environment, the config file and explicit overrides.

    The config file is, in order: the argument, ``CITEWISE_CONFIG_FILE``, ``./citewise.toml``
    when it exists. Relative paths in the file are taken relative to the file's folder, so the
    same file works from any working directory.
    """
    path = config_file or os.environ.get("CITEWISE_CONFIG_FILE")
    if path is None and Path("citewise.toml").exists():
        path = "citewise.toml"
    file_values: dict[str, Any] = {}
    sources: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    providers: list[dict[str, Any]] = []
    guardrails: list[dict[str, Any]] = []
    slack: dict[str, Any] = {}
    stamp: ConfigStamp | None = None
    if path is not None:
        path = Path(path).resolve()
        raw, stamp = _read_config_file(path)
        unknown = set(raw) - {"settings", "sources", "groups", "llm", "guardrails", "slack",
                              "schedule"}
        if unknown:
            raise ConfigError(
                f"config file {path} has unknown top-level keys: {sorted(unknown)}",
                hint="only [settings], [schedule], [[sources]], [[groups]], "
                     "[[llm.providers]], [[guardrails]] and [slack] are read",
            )
        groups = list(raw.get("groups", []))
        llm = raw.get("llm", {})
        if not isinstance(llm, dict) or set(llm) - {"providers"}:
            raise ConfigError(f"config file {path}: [llm] only holds [[llm.providers]]",
                              hint="see citewise.example.toml")
        providers = list(llm.get("providers", []))
        guardrails = list(raw.get("guardrails", []))
        slack = raw.get("slack", {})
        if not isinstance(slack, dict) or set(slack) - {"channels", "groups"}:
            raise ConfigError(f"config file {path}: [slack] holds [[slack.channels]] and "
                              "[slack.groups]", hint="see docs/slack.md")
        file_values = dict(raw.get("settings", {}))
        schedule = raw.get("schedule", {})
        if not isinstance(schedule, dict) or set(schedule) - {"ingest", "timezone",
                                                              "catch_up"}:
            raise ConfigError(f"config file {path}: [schedule] holds ingest, timezone and "
                              "catch_up", hint='e.g. [schedule] ingest = "30 2 * * *"')
        file_values.update({f"schedule_{k}": v for k, v in schedule.items()})
        for key in ("data_dir", "synonyms_file"):
            if key in file_values:
                file_values[key] = path.parent / file_values[key]
        for s in raw.get("sources", []):
            s = dict(s)
            # A local path is relative to the file; a URL (a git remote) is left alone.
            if isinstance(s.get("path"), str) and "://" not in s["path"]:
                s["path"] = str(path.parent / s["path"])
            sources.append(s)
        file_values["config_file"] = path
    # Environment beats the file: drop file values that the environment sets.
    for key in list(file_values):
        if f"CITEWISE_{key.upper()}" in os.environ:
            file_values.pop(key)
    try:
        settings = Settings(**{**file_values, **overrides})
        settings.sources = [SourceConfig(**s) for s in sources]
        settings.groups = [GroupConfig(**g) for g in groups]
        settings.llm_providers = [ProviderConfig(**p) for p in providers]
        settings.guardrails = [GuardrailConfig(**g) for g in guardrails]
        settings.slack_channels = [SlackChannelConfig(**c) for c in slack.get("channels", [])]
        settings.slack_groups = {str(k): str(v) for k, v in slack.get("groups", {}).items()}
        for source in settings.sources:
            if source.readers is None:
                source.readers = settings.default_readers
    except ValidationError as e:
        raise ConfigError(f"invalid settings: {_describe(e)}") from e
    if settings.api_keys:
        raise ConfigError(
            "CITEWISE_API_KEYS is no longer read: keys live in the catalog, hashed, with scopes",
            hint="create one per client with `citewise keys create NAME --scopes search,answer` "
                 "and unset CITEWISE_API_KEYS",
        )
    names = [s.name for s in settings.sources]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ConfigError(f"source names must be unique; repeated: {sorted(dupes)}")
    settings._config_stamp = stamp
    settings._overrides = dict(overrides)
    return settings


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
