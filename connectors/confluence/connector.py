"""The ``confluence`` connector: pages of chosen spaces, with readers, breadcrumbs and deep links.

A run is one of two kinds (the pipeline's sync contract, ``citewise.connectors.base``):

* **incremental**: per space, the pages modified since that space's mark (the newest
  modification seen so far, a server time) minus an overlap window. Cheap when nothing changed:
  one request per space for Cloud (newest first, it stops at the first old page), one CQL query
  per space for Data Center.
* **full listing** (``--force``, the first run, every ``full_every_runs`` runs or
  ``full_every_hours``): every page, read fresh, with its readers recomputed, and the complete
  list of ids. The pipeline deletes what is no longer listed (deleted, moved out of the included
  spaces, restricted away from our credentials, relabelled out) and writes permission-only
  changes without re-embedding (same content, new readers). Restriction changes do not change a
  page's version in Confluence, so this pass is also what catches them.

A listing that failed anywhere (a missing space, a space whose listing kept failing) gives no id
list: nothing is deleted on partial evidence, and that space's mark does not move. After each
results page the connector hands back a checkpoint (space, next-page link, marks so far), so an
interrupted run resumes where it stopped.

**Attachments** (``attachments = true``): whenever a page is yielded (changed, retried, or in a
full listing), its admitted attachments are listed, downloaded, turned into text
(``attachments.py``) and yielded as documents of their own (``attachment:<id>``) with exactly the
page's readers. A full listing includes their ids in the live list, so attachments deleted on
the server, and those of pages that are gone, restricted away or labelled out, are pruned then.
Confluence does not give a page a new version when a file is attached, so an incremental run
does not see an attachment added to an unchanged page: the next full listing does.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import httpx

from citewise.connectors.base import SyncBatch, SyncError, SyncRequest
from citewise.connectors.confluence.attachments import (
    TEXT_MEDIA_TYPES,
    AttachmentError,
    attachment_kind,
    extract,
)
from citewise.connectors.confluence.client import (
    ClientSettings,
    ConfluenceAuthError,
    ConfluenceHttp,
    ConfluenceNotFound,
    ConfluencePermissionsRefused,
    ConfluenceTooLarge,
)
from citewise.connectors.confluence.cloud import CloudApi
from citewise.connectors.confluence.config import ConfluenceConfig
from citewise.connectors.confluence.datacenter import DataCenterApi
from citewise.connectors.confluence.model import (
    Attachment,
    ConfluenceApi,
    Page,
    Space,
    parse_time,
)
from citewise.connectors.confluence.permissions import (
    NO_READERS,
    ReadRestriction,
    page_readers,
    space_readers,
    unnamed_grants,
)
from citewise.connectors.confluence.storage_format import StorageFormatError, storage_to_html
from citewise.errors import SourceError
from citewise.types import SourceDocument, normalise_readers

log = logging.getLogger("citewise.connectors.confluence")

STATE_VERSION = 1
ATTACHMENT_PREFIX = "attachment:"  # an attachment's document: attachment:<attachment id>
# Retry ids that earlier versions stored for run errors (a space; a page's attachment listing).
_LEGACY_SPACE_RETRY = "space:"
_LEGACY_ATTACHMENTS_RETRY = "attachments:"


class _Gone(Exception):
    """The page disappeared between the listing and a follow-up request."""


@dataclass
class _Run:
    """What one run learns once and reuses: spaces' readers, restrictions by page id."""

    api: ConfluenceApi
    spaces: dict[str, Space]
    readers: dict[str, list[str] | None] = field(default_factory=dict)
    restrictions: dict[str, ReadRestriction | None] = field(default_factory=dict)
    errors: list[SyncError] = field(default_factory=list)  # to report with the next batch
    newest: datetime | None = None  # the newest modification seen, with the server's offset
    # Pages whose attachments could not be listed: the live id list would miss them, so this
    # run must not give one (nothing is pruned on partial evidence).
    unlisted: set[str] = field(default_factory=set)

    @property
    def incomplete(self) -> bool:
        return bool(self.unlisted)

    def take_errors(self) -> list[SyncError]:
        errors, self.errors = self.errors, []
        return errors


class ConfluenceConnector:
    source_type: ClassVar[str] = "confluence"
    # How the site is reached and how often it is listed whole; every other setting decides
    # what is indexed, and a change to it makes the next run a full pass (``connectors/base.py``).
    reach_options: ClassVar[frozenset[str]] = frozenset(
        {"email_env", "token_env", "requests_per_second", "timeout", "max_retries",
         "max_retry_wait", "page_size", "overlap_minutes", "full_every_runs",
         "full_every_hours"})

    def __init__(
        self,
        config: ConfluenceConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.transport = transport
        self.sleep = sleep
        self.clock = clock
        self.last_http: ConfluenceHttp | None = None  # the last run's client, for its counters

    @classmethod
    def from_options(
        cls, options: dict[str, Any], readers: list[str] | None, *, data_dir: Path | None = None
    ) -> ConfluenceConnector:
        return cls(ConfluenceConfig.from_options(options, readers))

    # Plumbing ---------------------------------------------------------------------------------
    def _open(self) -> ConfluenceApi:
        cfg = self.config
        http = ConfluenceHttp(
            cfg.api_root,
            cfg.auth_headers(),
            ClientSettings(requests_per_second=cfg.requests_per_second, timeout=cfg.timeout,
                           max_retries=cfg.max_retries, max_retry_wait=cfg.max_retry_wait),
            credential_hint=cfg.credential_hint(),
            sleep=self.sleep,
            transport=self.transport,
        )
        self.last_http = http
        return CloudApi(http) if cfg.flavour == "cloud" else DataCenterApi(http)

    def _scope(self) -> str:
        """What the state is valid for: change the site, spaces or labels, start afresh."""
        c = self.config
        parts = [c.flavour, c.base_url, sorted(c.spaces), sorted(c.include_labels),
                 sorted(c.exclude_labels), c.use_space_permissions, sorted(c.readers)]
        if c.attachments:  # turning them on must list every page once, to find their files
            parts.append(["attachments", c.attachment_types])
        key = json.dumps(parts)
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def _full_due(self, state: dict, now: datetime) -> bool:
        last = parse_time(state.get("last_full"))
        if last is None:
            return True
        if int(state.get("runs_since_full", 0)) + 1 >= self.config.full_every_runs:
            return True
        return now - last >= timedelta(hours=self.config.full_every_hours)

    # The run ----------------------------------------------------------------------------------
    def sync(self, request: SyncRequest, batch_size: int = 32) -> Iterator[SyncBatch]:
        api = self._open()
        try:
            yield from self._sync(api, request, batch_size)
        finally:
            api.http.close()

    def _sync(self, api: ConfluenceApi, request: SyncRequest, batch_size: int
              ) -> Iterator[SyncBatch]:
        cfg = self.config
        now = self.clock()
        scope = self._scope()
        state = request.state if request.state.get("scope") == scope else {}
        ckpt = request.checkpoint if (request.checkpoint or {}).get("scope") == scope else None
        full = bool(ckpt["full"]) if ckpt else (request.full or self._full_due(state, now))

        found, missing = api.spaces(cfg.spaces)
        if not found and not missing:
            raise SourceError(
                "these Confluence credentials can see no spaces",
                hint="check the account's space permissions, or name spaces in 'spaces'",
            )
        run = _Run(api, {s.key: s for s in found})
        for key in missing:
            run.errors.append(SyncError(
                f"space {key}", f"space {key!r} does not exist or these credentials cannot see "
                "it (its pages stay indexed; fix 'spaces' or the account's permissions)"))
        complete = not missing and not (ckpt or {}).get("incomplete")
        marks: dict[str, str] = dict((ckpt or state).get("marks") or {})
        done: set[str] = set((ckpt or {}).get("done") or [])
        live: set[str] = set((ckpt or {}).get("live") or [])
        limit = max(1, min(cfg.page_size, batch_size))
        overlap = timedelta(minutes=cfg.overlap_minutes)
        api.query_zone, margin = self._query_zone(state)

        def checkpoint(space: str | None, cursor: str | None, space_mark: str | None) -> dict:
            return {"scope": scope, "full": full, "done": sorted(done), "marks": dict(marks),
                    "space": space, "cursor": cursor, "space_mark": space_mark,
                    "incomplete": not complete or run.incomplete,
                    "live": sorted(live) if full else []}

        # Documents that failed last time are read again first, whatever changed.
        retry = [r.removeprefix(_LEGACY_ATTACHMENTS_RETRY) for r in request.retry
                 if not r.startswith(_LEGACY_SPACE_RETRY)]
        for start in range(0, len(retry), limit):
            docs, gone = self._retry(run, retry[start:start + limit])
            yield SyncBatch(documents=docs, deleted=gone)

        for space in sorted(found, key=lambda s: s.key):
            if space.key in done:
                continue
            resumed = ckpt if ckpt is not None and ckpt.get("space") == space.key else None
            resume = resumed is not None
            cursor = resumed.get("cursor") if resumed is not None else None
            space_mark = parse_time(resumed.get("space_mark")) if resumed is not None else None
            previous = parse_time(marks.get(space.key))
            since = None if full or previous is None else previous - overlap - margin
            if resume and not cursor:  # the interruption came after its last results page
                best = max(filter(None, [space_mark, previous]), default=None)
                if best is not None:
                    marks[space.key] = best.isoformat()
                done.add(space.key)
                continue
            try:
                self._space_readers(run, space)
                for pages, next_link in api.list_pages(space, since=since, cursor=cursor,
                                                       limit=limit):
                    docs, gone = [], []
                    for page in pages:
                        if page.modified and (space_mark is None or page.modified > space_mark):
                            space_mark = page.modified
                        if page.modified and (run.newest is None or page.modified > run.newest):
                            run.newest = page.modified
                        outcome = self._document(run, space, page)
                        if outcome is None:  # gone since the listing, or labelled out
                            gone.append(page.id)
                            continue
                        docs.extend(outcome)
                        live.update(d.external_id for d in outcome)
                    mark = space_mark.isoformat() if space_mark else None
                    yield SyncBatch(documents=docs, deleted=gone, errors=run.take_errors(),
                                    checkpoint=checkpoint(space.key, next_link, mark))
            except SourceError as e:
                # Bad credentials already failed the run at the spaces call; this is one space
                # that cannot be listed now. The others go on; nothing is deleted this run.
                complete = False
                run.errors.append(SyncError(
                    f"space {space.key}", f"space {space.key!r} could not be listed: {e} (its "
                    "pages stay indexed; the next run tries again)"))
                yield SyncBatch(errors=run.take_errors())
                continue
            best = max(filter(None, [space_mark, previous]), default=None)
            if best is not None:
                marks[space.key] = best.isoformat()
            done.add(space.key)
        full_done = full and complete and not run.incomplete
        offset = run.newest.utcoffset() if run.newest else None
        new_state = {
            "scope": scope,
            "marks": marks,
            # The server's UTC offset, from its newest timestamp: the zone of the next run's CQL.
            "server_offset_minutes": int(offset.total_seconds() // 60) if offset is not None
            else state.get("server_offset_minutes"),
            "last_full": now.isoformat() if full_done else state.get("last_full"),
            "runs_since_full": 0 if full_done else int(state.get("runs_since_full", 0)) + 1,
        }
        yield SyncBatch(errors=run.take_errors(), live_ids=sorted(live) if full_done else None,
                        state=new_state)

    def _query_zone(self, state: dict) -> tuple[tzinfo, timedelta]:
        """The zone Data Center reads CQL dates in, and how much earlier to start because of
        what is not known about it.

        Configured (``timezone``): exact, daylight-saving changes included. Learned from the
        server's own timestamps in the last run: right unless a daylight-saving change happened
        since, hence an hour's margin. Unknown (a source synced before this was learned): the
        widest offsets in use are 14 hours, so start that much earlier once.
        """
        if self.config.flavour == "cloud":  # v2 lists by UTC timestamps: no zone involved
            return UTC, timedelta(0)
        if self.config.timezone:
            return ZoneInfo(self.config.timezone), timedelta(0)
        minutes = state.get("server_offset_minutes")
        if isinstance(minutes, int):
            return timezone(timedelta(minutes=minutes)), timedelta(hours=1)
        return UTC, timedelta(hours=14)

    # One space, one page ----------------------------------------------------------------------
    def _space_readers(self, run: _Run, space: Space) -> list[str] | None:
        if space.key in run.readers:
            return run.readers[space.key]
        if not self.config.use_space_permissions:
            readers: list[str] | None = normalise_readers(self.config.readers)
        else:
            try:
                grants = run.api.space_grants(space)
                readers = space_readers(grants)
            except (ConfluenceAuthError, ConfluenceNotFound, ConfluencePermissionsRefused) as e:
                readers = None
                hint = e.hint or ("give the account permission to read space permissions, or "
                                  "set use_space_permissions = false to use the source's "
                                  "readers")
                run.errors.append(SyncError(
                    f"space {space.key}",
                    f"cannot read the view permissions of space {space.key!r} ({e.message}); "
                    f"its unrestricted pages are indexed as readable by nobody ({hint})"))
            else:
                unnamed = unnamed_grants(grants)
                if unnamed:
                    run.errors.append(SyncError(
                        f"space {space.key}",
                        f"{unnamed} of the users and groups who may view space {space.key!r} "
                        "could not be named (a user key or group id the API would not resolve)"
                        " and were left out of its readers; the others keep their access",
                        warning=True))
                if readers is None:
                    log.warning("confluence: space %s grants view to no user or group we can "
                                "name; its unrestricted pages are readable by nobody", space.key)
        run.readers[space.key] = readers
        return readers

    def _restriction(self, run: _Run, page_id: str, *, own: bool) -> ReadRestriction | None:
        if page_id not in run.restrictions:
            try:
                run.restrictions[page_id] = run.api.read_restriction(page_id)
            except ConfluenceNotFound:
                if own:
                    raise _Gone() from None
                run.restrictions[page_id] = None  # an ancestor we cannot see: undeterminable
            except (ConfluenceAuthError, ValueError):
                run.restrictions[page_id] = None
        return run.restrictions[page_id]

    def _retry(self, run: _Run, ids: list[str]) -> tuple[list[SourceDocument], list[str]]:
        """Documents that failed last run, read fresh: pages by id; an attachment (or a page's
        attachment listing) by reading its page again with all its attachments."""
        docs: list[SourceDocument] = []
        gone: list[str] = []
        read: dict[str, list[SourceDocument] | None] = {}  # page id -> what reading it gave
        for ext_id in ids:
            if ext_id.startswith(ATTACHMENT_PREFIX):
                try:
                    page_id = run.api.attachment_page(ext_id[len(ATTACHMENT_PREFIX):])
                except SourceError as e:
                    docs.append(_page_error(ext_id, f"could not read the attachment again: {e}"))
                    continue
                if page_id is None:
                    gone.append(ext_id)
                    continue
            else:
                page_id = ext_id
            if page_id not in read:
                read[page_id] = self._fresh(run, page_id)
                docs.extend(read[page_id] or [])
            outcome = read[page_id]
            if outcome is None:  # the page is gone or out of scope, and so are its files
                gone.append(ext_id)
                continue
            if not ext_id.startswith(ATTACHMENT_PREFIX) or any(
                    d.external_id == ext_id for d in outcome):
                continue
            if page_id in run.unlisted or any(d.error and d.external_id == page_id
                                               for d in outcome):
                # The page or its attachment list could not be read: no evidence it is gone.
                docs.append(_page_error(ext_id, "could not read its page again; see the page's "
                                                "error"))
            else:  # no longer on its page, or no longer of an admitted type
                gone.append(ext_id)
        return docs, gone

    def _fresh(self, run: _Run, page_id: str) -> list[SourceDocument] | None:
        """One page (and its attachments) read again by id; None when it is gone or out of
        scope."""
        try:
            page = run.api.page(page_id, run.spaces)
        except SourceError as e:
            return [_page_error(page_id, f"could not read the page again: {e}")]
        if page is None:
            return None
        space = run.spaces[page.space_key]
        try:
            self._space_readers(run, space)
        except SourceError as e:
            return [_page_error(page_id, f"could not read the space's permissions: {e}")]
        return self._document(run, space, page)

    def _document(self, run: _Run, space: Space, page: Page) -> list[SourceDocument] | None:
        """The page as a document (``error`` set if it cannot be read) followed by its
        attachments' documents when they are on, or None when it is gone or excluded by
        labels."""
        cfg, api = self.config, run.api
        try:
            labels = api.labels(page)
            if cfg.include_labels and not set(labels) & set(cfg.include_labels):
                return None
            if set(labels) & set(cfg.exclude_labels):
                return None
            ancestors = api.ancestors(page)
            path = [self._restriction(run, aid, own=False) for aid, _ in ancestors]
            if page.restriction_known:
                run.restrictions[page.id] = page.restriction
                path.append(page.restriction)
            else:
                path.append(self._restriction(run, page.id, own=True))
        except (_Gone, ConfluenceNotFound):
            return None
        except SourceError as e:
            message = f"could not read the page's labels, ancestors or restrictions: {e}"
            # Its attachments fail with it: without the page's readers they cannot be written,
            # and listing them as failed keeps their indexed versions live.
            return [_page_error(page.id, message, title=page.title),
                    *self._attachment_errors(run, page, message)]
        readers = page_readers(run.readers.get(space.key), path)
        crumbs = [space.name, *(title for _, title in ancestors if title), page.title]
        breadcrumb = " > ".join(c for c in crumbs if c)
        doc = SourceDocument(
            external_id=page.id,
            title=page.title or f"Page {page.id}",
            content=b"",
            media_type="text/html",
            url=api.page_url(page),
            readers=readers,
            metadata={
                "breadcrumb": breadcrumb,
                "space": space.key,
                "anchor_style": cfg.anchor_style,
                "confluence_version": page.version,
                **({"restricted": True} if readers == [NO_READERS] else {}),
            },
            tags=list(labels),
            updated_at=page.modified,
        )
        if page.body is None:
            doc.error = "the page came without a storage-format body"
        else:
            try:
                doc.content = storage_to_html(page.body, title=page.title,
                                              breadcrumb=breadcrumb,
                                              jira_url=cfg.jira_url).encode("utf-8")
            except StorageFormatError as e:
                doc.error = e.message
        return [doc, *self._attachments(run, page, doc)]

    # Attachments ------------------------------------------------------------------------------
    def _admitted(self, run: _Run, page: Page) -> list[tuple[Attachment, str]]:
        """The page's attachments of an admitted type, with their kind; none, a run error and
        the page in ``run.unlisted`` when they cannot be listed."""
        try:
            listed = run.api.attachments(page.id)
        except ConfluenceNotFound:
            return []  # the page went away since it was read: nothing of it stays live
        except SourceError as e:
            run.unlisted.add(page.id)
            run.errors.append(SyncError(
                f"attachments of page {page.id}",
                f"could not list the attachments of page {page.id} ({page.title}): {e} (they "
                "stay indexed as they were; the next run tries again)", retry=page.id))
            return []
        out = []
        for att in listed:
            kind = attachment_kind(att.title, att.media_type)
            if kind is not None and kind in self.config.attachment_types:
                out.append((att, kind))
        return out

    def _attachment_errors(self, run: _Run, page: Page, message: str) -> list[SourceDocument]:
        if not self.config.attachments:
            return []
        return [_page_error(f"{ATTACHMENT_PREFIX}{att.id}", message, title=att.title)
                for att, _ in self._admitted(run, page)]

    def _attachments(self, run: _Run, page: Page, page_doc: SourceDocument
                     ) -> list[SourceDocument]:
        if not self.config.attachments:
            return []
        return [self._attachment(run, page, page_doc, att, kind)
                for att, kind in self._admitted(run, page)]

    def _attachment(self, run: _Run, page: Page, page_doc: SourceDocument, att: Attachment,
                    kind: str) -> SourceDocument:
        """One attachment as a document of its own, readable by exactly the page's readers."""
        cfg, http = self.config, run.api.http
        url = http.url(att.download) if att.download else page_doc.url
        breadcrumb = f"{page_doc.metadata.get('breadcrumb') or page.title} > {att.title}"
        doc = SourceDocument(
            external_id=f"{ATTACHMENT_PREFIX}{att.id}",
            title=f"{att.title} (attachment of {page.title or page.id})",
            content=b"",
            media_type=TEXT_MEDIA_TYPES[kind],
            url=url,
            # Citations link to the file itself: a heading anchor means nothing on a download.
            link_template=url,
            readers=list(page_doc.readers),
            metadata={
                "attachment_of": page.id,
                "page_url": page_doc.url,
                "breadcrumb": breadcrumb,
                "space": page_doc.metadata.get("space"),
                "media_type": att.media_type,
                "file_size": att.file_size,
                "confluence_version": att.version,
                **({"restricted": True} if page_doc.readers == [NO_READERS] else {}),
            },
            tags=list(page_doc.tags),
            updated_at=page.modified,
        )
        limit = (f"over the size limit, max_attachment_bytes = {cfg.max_attachment_bytes} "
                 "(raise max_attachment_bytes to index it)")
        if att.file_size is not None and att.file_size > cfg.max_attachment_bytes:
            doc.error = f"{att.title} is {att.file_size} bytes, {limit}"
            return doc
        if not att.download:
            doc.error = "the attachment came without a download link"
            return doc
        try:
            data = http.get_bytes(att.download, cfg.max_attachment_bytes)
        except ConfluenceTooLarge:
            doc.error = f"{att.title} is {limit}"
            return doc
        except SourceError as e:
            doc.error = f"could not download the attachment: {e}"
            return doc
        try:
            text = extract(kind, data, title=doc.title)
        except AttachmentError as e:
            doc.error = f"{att.title}: {e}"
            return doc
        if kind in ("pdf", "docx"):
            # Like a page, the body opens with where the file sits (see storage_to_html).
            crumb = f"<p>{html.escape(breadcrumb, quote=False)}</p>\n"
            text = text.replace("<body>\n", "<body>\n" + crumb, 1)
        doc.content = text.encode("utf-8")
        return doc


def _page_error(page_id: str, message: str, title: str = "") -> SourceDocument:
    return SourceDocument(external_id=page_id, title=title or page_id, content=b"",
                          media_type="text/html", error=message)
