"""Settings of one Confluence source, from its ``[[sources]]`` table in citewise.toml.

Secrets never sit in these options (the catalog stores options as JSON): the options name the
environment variables that hold them.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from citewise.connectors.base import required_readers
from citewise.connectors.confluence.attachments import SUPPORTED_TYPES
from citewise.errors import SourceError

FLAVOURS = ("cloud", "datacenter")


@dataclass
class ConfluenceConfig:
    base_url: str  # Cloud: https://acme.atlassian.net (or .../wiki); DC: https://host[/context]
    flavour: str = ""  # "cloud" | "datacenter"; empty: cloud for *.atlassian.net, else datacenter
    spaces: list[str] = field(default_factory=list)  # space keys; empty = every space visible
    include_labels: list[str] = field(default_factory=list)  # only pages with one of these
    exclude_labels: list[str] = field(default_factory=list)  # never pages with one of these
    # Credentials: Cloud uses email + API token (Basic auth), Data Center a personal access
    # token (Bearer). These are the NAMES of the environment variables holding them.
    email_env: str = "CITEWISE_CONFLUENCE_EMAIL"
    token_env: str = "CITEWISE_CONFLUENCE_TOKEN"
    # Permissions: read each space's view permissions from the API; when false (or when the
    # credentials may not read them), the source's ``readers`` stand in for the space's.
    use_space_permissions: bool = True
    # The client.
    requests_per_second: float = 10.0
    timeout: float = 30.0
    max_retries: int = 5
    max_retry_wait: float = 60.0
    page_size: int = 50
    # Incremental sync: re-read pages modified up to this long before the last mark (clock skew,
    # CQL's minute precision); list every page id (and refresh readers) every N runs or hours.
    overlap_minutes: float = 15.0
    full_every_runs: int = 24
    full_every_hours: float = 24.0
    # Data Center: the time zone CQL dates are read in (the integration account's profile zone,
    # by default the server's), as an IANA name ("America/New_York"). Unset: learned from the
    # offsets in the server's own timestamps, with an hour's margin for a daylight-saving change.
    timezone: str | None = None
    # Where Jira lives ("https://jira.example.com"), so that a Jira issue macro becomes a link
    # to the issue; unset, the issue key is kept as text.
    jira_url: str | None = None
    # Attachments of included pages (off by default): each admitted file becomes a document of
    # its own with the page's readers. Other types are not admitted (not listed, not errors);
    # a file over the size limit is a per-document error.
    attachments: bool = False
    attachment_types: list[str] = field(default_factory=lambda: list(SUPPORTED_TYPES))
    max_attachment_bytes: int = 20 * 1024 * 1024

    # The source's readers: only read with use_space_permissions = false (then required).
    readers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if self.timezone:
            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise SourceError(
                    f"confluence timezone {self.timezone!r} is not a time zone name",
                    hint='use an IANA name such as "America/New_York" or "Asia/Kolkata"',
                ) from None
        if self.jira_url:
            self.jira_url = self.jira_url.rstrip("/")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SourceError(
                f"confluence base_url {self.base_url!r} is not an http(s) URL",
                hint="e.g. https://acme.atlassian.net or https://confluence.example.com",
            )
        if not self.flavour:
            self.flavour = "cloud" if parts.hostname and parts.hostname.endswith(
                ".atlassian.net") else "datacenter"
        if self.flavour not in FLAVOURS:
            raise SourceError(f"confluence flavour {self.flavour!r} is not one of {FLAVOURS}")
        # Cloud's API lives under /wiki; accept the site URL with or without it.
        if self.flavour == "cloud" and not parts.path.rstrip("/").endswith("/wiki"):
            self.base_url += "/wiki"
        # A settings file may name one space, or one type below, as a plain string.
        spaces: object = self.spaces
        if isinstance(spaces, str):
            self.spaces = [] if spaces.lower() in ("", "all", "*") else [spaces]
        self.spaces = [s.strip() for s in self.spaces if s.strip() and s.strip() != "*"]
        if self.page_size < 1:
            raise SourceError("confluence page_size must be at least 1")
        types: object = self.attachment_types
        if isinstance(types, str):
            self.attachment_types = [types]
        self.attachment_types = sorted({t.strip().lower().lstrip(".")
                                        for t in self.attachment_types if t.strip()})
        unsupported = set(self.attachment_types) - set(SUPPORTED_TYPES)
        if unsupported:
            raise SourceError(
                f"confluence attachment_types {sorted(unsupported)} are not supported",
                hint=f"choose among {list(SUPPORTED_TYPES)}")
        if self.max_attachment_bytes < 1:
            raise SourceError("confluence max_attachment_bytes must be at least 1")

    @property
    def api_root(self) -> str:
        return self.base_url

    def auth_headers(self) -> dict[str, str]:
        """The Authorization header from the environment. Never logged, never in a message."""
        token = os.environ.get(self.token_env, "")
        if self.flavour == "cloud":
            email = os.environ.get(self.email_env, "")
            if not email or not token:
                raise SourceError(
                    "Confluence Cloud credentials are missing",
                    hint=f"set {self.email_env} (account email) and {self.token_env} "
                         "(an API token) in the environment",
                )
            raw = f"{email}:{token}".encode()
            return {"Authorization": "Basic " + base64.b64encode(raw).decode("ascii")}
        if not token:
            raise SourceError(
                "Confluence Data Center credentials are missing",
                hint=f"set {self.token_env} to a personal access token in the environment",
            )
        return {"Authorization": f"Bearer {token}"}

    def credential_hint(self) -> str:
        if self.flavour == "cloud":
            return (f"check {self.email_env} and {self.token_env} (an Atlassian API token for "
                    "that account) and that the account can view the spaces")
        return f"check {self.token_env} (a personal access token) and its permissions"

    @property
    def anchor_style(self) -> str:
        return "confluence-cloud" if self.flavour == "cloud" else "confluence-server"

    @classmethod
    def option_names(cls) -> set[str]:
        return {f.name for f in fields(cls)} - {"readers"}

    @classmethod
    def from_options(cls, options: dict, readers: list[str] | None) -> ConfluenceConfig:
        if not options.get("base_url"):
            raise SourceError("a confluence source needs a 'base_url' setting",
                              hint="e.g. base_url = \"https://acme.atlassian.net\"")
        known = cls.option_names()
        unknown = set(options) - known
        if unknown:
            raise SourceError(
                f"unknown setting(s) for a confluence source: {sorted(unknown)}",
                hint=f"a confluence source accepts {sorted(known)}",
            )
        config = cls(readers=list(readers or []), **options)
        if not config.use_space_permissions:
            # Without space permissions the source's readers stand in: they must be said.
            config.readers = required_readers("confluence", config.readers)
        return config
