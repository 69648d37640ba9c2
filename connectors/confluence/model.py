"""What the connector needs from either API flavour, as plain data, and the interface to get it.

Cloud (REST v2, plus v1 where v2 has no equivalent) and Data Center (REST v1) answer in
different shapes; ``cloud.py`` and ``datacenter.py`` turn both into these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Protocol

from citewise.connectors.confluence.client import ConfluenceHttp
from citewise.connectors.confluence.permissions import ReadRestriction


@dataclass
class Space:
    id: str
    key: str
    name: str


@dataclass
class Page:
    id: str
    title: str
    space_key: str
    version: int
    modified: datetime | None
    body: str | None  # storage format
    webui: str | None  # the page's path in the web UI, relative to the site's base URL
    # Filled by the listing where the flavour can (Data Center expands them), else on demand.
    ancestors: list[tuple[str, str]] | None = None  # (id, title), top-down
    labels: list[str] | None = None
    restriction: ReadRestriction | None = None
    restriction_known: bool = False
    extra: dict = field(default_factory=dict)


@dataclass
class Attachment:
    """A file attached to a page, as listed (the bytes are downloaded separately)."""

    id: str
    title: str  # the file name
    media_type: str
    file_size: int | None
    version: int
    download: str | None  # the download link, relative to the site's base URL
    webui: str | None = None


class ConfluenceApi(Protocol):
    """One Confluence site, seen through one API flavour."""

    flavour: str
    # The zone dates in queries are written in (Data Center's CQL); the connector sets it.
    query_zone: tzinfo
    # The site's HTTP client: the connector builds download links with it and closes it.
    http: ConfluenceHttp

    def spaces(self, keys: list[str]) -> tuple[list[Space], list[str]]:
        """The spaces to index (every visible one when ``keys`` is empty), and the keys asked
        for that do not exist (or that the credentials cannot see)."""

    def space_grants(self, space: Space) -> list[tuple[str, str | None]]:
        """Who may view the space: ``(kind, name)`` with kind user, group or anonymous."""

    def list_pages(
        self, space: Space, *, since: datetime | None, cursor: str | None, limit: int
    ) -> Iterator[tuple[list[Page], str | None]]:
        """Current pages of the space, a page of results at a time with the link to the next
        (what a checkpoint keeps). With ``since``, only pages modified at or after it."""

    def page(self, page_id: str, spaces: dict[str, Space]) -> Page | None:
        """One page read fresh; None when it is gone, not current, or outside ``spaces``."""

    def labels(self, page: Page) -> list[str]: ...

    def ancestors(self, page: Page) -> list[tuple[str, str]]: ...

    def read_restriction(self, page_id: str) -> ReadRestriction: ...

    def page_url(self, page: Page) -> str: ...

    def attachments(self, page_id: str) -> list[Attachment]:
        """The page's current attachments (every one; the connector filters by type)."""

    def attachment_page(self, attachment_id: str) -> str | None:
        """The id of the page an attachment sits on; None when it is gone or on no page."""


def parse_time(value: str | None) -> datetime | None:
    """ISO 8601 times as both flavours write them (``Z`` or an offset, with milliseconds)."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)
