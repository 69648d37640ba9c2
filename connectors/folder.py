"""A folder of Markdown, HTML and text files: runbook repositories, exported wikis, docs.

Each file is one document whose external id is its path relative to the folder. Markdown and
text files may start with YAML front matter; these keys are understood (others are kept as
metadata): ``title``, ``tags``, ``readers``, ``service``, ``owner``, ``severity``, ``alerts``.
A file's own ``readers`` replace the source's default readers.
"""

from __future__ import annotations

import fnmatch
import html
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from citewise.connectors.access import (
    AccessDeclarationError,
    check_body_for_stray_readers,
    readers_from_front_matter,
    readers_from_html,
    tags_from_html,
)
from citewise.connectors.base import required_readers
from citewise.connectors.frontmatter import FrontMatterError, split_front_matter
from citewise.connectors.textfiles import (
    NotTextError,
    decode_text,
    markdown_title,
    parse_tags,
    too_large,
)
from citewise.errors import SourceError
from citewise.types import SourceDocument

log = logging.getLogger("citewise.connectors.folder")

MEDIA_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".txt": "text/plain",
    ".text": "text/plain",
}
DEFAULT_EXCLUDE = (".*", "*/.*", "node_modules/*", "*/node_modules/*", "_build/*")

_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_HTML_H1 = re.compile(r"<h1[^>]*>(.*?)</h1>", re.I | re.S)
_TAG = re.compile(r"<[^>]+>")


@dataclass
class FolderConfig:
    path: Path
    include: list[str] = field(default_factory=lambda: ["*" + ext for ext in MEDIA_TYPES])
    exclude: list[str] = field(default_factory=list)
    # Readers of files that declare none (required: "public" is never assumed).
    readers: list[str] = field(default_factory=list)
    url_base: str | None = None  # e.g. https://git.example.com/org/runbooks/blob/main/
    max_file_bytes: int = 5 * 1024 * 1024


class FolderConnector:
    source_type: ClassVar[str] = "folder"

    def __init__(self, config: FolderConfig) -> None:
        config.readers = required_readers(self.source_type, config.readers)
        self.config = config
        self.root = Path(config.path).expanduser().resolve()

    @classmethod
    def from_options(
        cls, options: dict[str, Any], readers: list[str] | None, *, data_dir: Path | None = None
    ) -> FolderConnector:
        if "path" not in options:
            raise SourceError("a folder source needs a 'path' setting")
        known = {"path", "include", "exclude", "url_base", "max_file_bytes"}
        unknown = set(options) - known
        if unknown:
            raise SourceError(
                f"unknown setting(s) for a folder source: {sorted(unknown)}",
                hint=f"a folder source accepts {sorted(known)}",
            )
        return cls(FolderConfig(readers=list(readers or []), **options))

    # Listing -------------------------------------------------------------------------------
    def _check_root(self) -> None:
        if not self.root.is_dir():
            raise SourceError(
                f"folder {self.root} does not exist or is not a folder",
                hint="check the source's path (a missing folder never deletes what is indexed)",
            )

    def _admitted(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if not any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(rel, pat)
                   for pat in self.config.include):
            return False
        excludes = (*DEFAULT_EXCLUDE, *self.config.exclude)
        return not any(fnmatch.fnmatch(rel, pat) for pat in excludes)

    def list_ids(self) -> Iterator[str]:
        self._check_root()
        for dirpath, dirnames, filenames in os.walk(self.root, onerror=self._walk_error):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                full = Path(dirpath, name)
                rel = full.relative_to(self.root).as_posix()
                if full.suffix.lower() not in MEDIA_TYPES or not self._admitted(rel):
                    continue
                if full.is_symlink() and not self._inside(full):
                    # A link out of the folder would publish whatever it points at (another
                    # user's file, /etc/passwd) with this source's readers: never followed.
                    log.warning("%s: %s is a symbolic link to outside the folder; not indexed",
                                self.root, rel)
                    continue
                yield rel

    def count(self) -> int:
        """How many documents ``load()`` will yield (a listing: cheap for a folder)."""
        return sum(1 for _ in self.list_ids())

    @staticmethod
    def _walk_error(e: OSError) -> None:
        # A folder we cannot list would make its files look deleted: fail the listing instead.
        raise SourceError(f"cannot list {e.filename}: {e.strerror}")

    # Loading -------------------------------------------------------------------------------
    def load(self, batch_size: int = 32) -> Iterator[list[SourceDocument]]:
        batch: list[SourceDocument] = []
        for rel in self.list_ids():
            batch.append(self.read(rel))
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def _inside(self, path: Path) -> bool:
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):  # a loop of links
            return False

    def read(self, rel: str) -> SourceDocument:
        full = self.root / rel
        media_type = MEDIA_TYPES[full.suffix.lower()]
        doc = SourceDocument(
            external_id=rel,
            title=_title_from_filename(full),
            content=b"",
            media_type=media_type,
            path=rel,
            url=(self.config.url_base + rel) if self.config.url_base else None,
            readers=list(self.config.readers),
        )
        if not self._inside(full):
            doc.error = "is a symbolic link to outside the source folder; not indexed"
            return doc
        try:
            stat = full.stat()
            doc.updated_at = datetime.fromtimestamp(stat.st_mtime, UTC)
            doc.error = too_large(stat.st_size, self.config.max_file_bytes)
            if doc.error:
                return doc
            doc.content = full.read_bytes()
        except OSError as e:
            doc.error = f"cannot read file: {e.strerror or e}"
            return doc
        try:
            text = decode_text(doc.content)
        except NotTextError as e:
            doc.error = str(e)
            return doc
        try:
            self._apply_metadata(doc, text)
        except (FrontMatterError, AccessDeclarationError) as e:
            doc.error = str(e)
        return doc

    def _apply_metadata(self, doc: SourceDocument, text: str) -> None:
        meta: dict = {}
        if doc.media_type == "text/html":
            readers = readers_from_html(text)
            tags = tags_from_html(text)
            if tags is not None:
                meta["tags"] = tags
            m = _HTML_TITLE.search(text) or _HTML_H1.search(text)
            if m:
                doc.title = html.unescape(_TAG.sub("", m.group(1))).strip() or doc.title
            doc.body = text
        else:
            meta, body, offset = split_front_matter(text)
            readers = readers_from_front_matter(meta)
            if readers is None:
                check_body_for_stray_readers(body)
            doc.body = body
            doc.body_line_offset = offset
            if doc.media_type == "text/markdown" and not meta.get("title"):
                doc.title = markdown_title(body) or doc.title
        if meta.get("title"):
            doc.title = str(meta["title"]).strip()
        if readers is not None:
            doc.readers = readers
        doc.tags = parse_tags(meta.get("tags") or [])
        doc.metadata = {k: v for k, v in meta.items() if k not in ("title", "readers", "tags")}


def _title_from_filename(path: Path) -> str:
    return re.sub(r"[-_]+", " ", path.stem).strip().capitalize() or path.name
