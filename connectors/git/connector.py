"""The ``git`` connector: a repository's files at a branch, tag or commit, synced commit by commit.

Each file tracked at the ref is one document whose external id is its path in the repository
(``files.py`` decides which files, and as what; ``repo.py`` runs git).

* **Incremental by commit.** The state the pipeline keeps is ``{"commit", "ref"}``. The next run
  asks git for the tree diff between that commit and the new head and reads only added, modified
  and renamed files, and reports deleted (and renamed-away) paths. When the old commit is unknown
  (a fresh clone folder, garbage-collected after a force-push) or is not an ancestor of the new
  head (history was rewritten), the run is a full pass with ``live_ids``: the pipeline compares
  every file by content hash, so nothing is duplicated and only real changes are embedded.
* **Failures per file.** Reported as a failed document with a clear message: a file over
  ``max_file_bytes``, a file that turns out binary or not UTF-8, a submodule, a corrupt object.
  A failed file keeps whatever was indexed of it before; one that is still failing, unchanged,
  is not reported again on every run.
* **Links** are pinned to the indexed commit (``config.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar
from urllib.parse import quote

from citewise.connectors.base import SyncBatch, SyncRequest, required_readers
from citewise.connectors.frontmatter import FrontMatterError, split_front_matter
from citewise.connectors.git.config import GitConfig, link_template, repository_name
from citewise.connectors.git.files import SUBMODULE_MODE, admitted, classify, shebang_language
from citewise.connectors.git.repo import BlobReader, ObjectError, Repository, TreeEntry
from citewise.connectors.textfiles import (
    NotTextError,
    decode_text,
    markdown_title,
    parse_tags,
    too_large,
)
from citewise.types import CODE_MEDIA_TYPE, SourceDocument

log = logging.getLogger("citewise.connectors.git")


@dataclass
class _Item:
    """One step of a pass: read ``path`` (``entry``) or report it deleted (``entry`` None)."""

    path: str
    entry: TreeEntry | None


class GitConnector:
    source_type: ClassVar[str] = "git"
    # How the repository is reached; every other setting decides what is indexed, and a change
    # to it makes the next run a full pass (``connectors/base.py``).
    reach_options: ClassVar[frozenset[str]] = frozenset(
        {"token_env", "token_user", "ssh_key_env", "ssh_key_path", "fetch_timeout_s"})

    def __init__(self, config: GitConfig, *, data_dir: Path | None = None) -> None:
        config.check()
        config.readers = required_readers(self.source_type, config.readers)
        self.config = config
        self.repository = config.repository or repository_name(config)
        self._template = link_template(config, self.repository)
        self.repo = Repository(config, Path(data_dir or "data"))

    @classmethod
    def from_options(cls, options: dict[str, Any], readers: list[str] | None, *,
                     data_dir: Path | None = None) -> GitConnector:
        return cls(GitConfig.from_options(options, readers), data_dir=data_dir)

    def _admitted(self, path: str, entry: TreeEntry) -> bool:
        c = self.config
        return admitted(path, entry.mode, c.include, c.exclude, c.default_excludes)

    # The sync protocol -----------------------------------------------------------------------
    def sync(self, request: SyncRequest, batch_size: int = 32) -> Iterator[SyncBatch]:
        head = self.repo.open()
        ref = self.config.ref or "HEAD"
        old = request.state.get("commit")
        checkpoint = request.checkpoint or {}
        # A run that did not finish resumes its pass (same start, same target) where it stopped,
        # then catches up from that target to today's head.
        resume = (checkpoint.get("base") == old and self.repo.known_commit(checkpoint.get("target"))
                  and isinstance(checkpoint.get("done"), int))
        target = checkpoint["target"] if resume else head
        skip = checkpoint["done"] if resume else 0
        full = request.full or (resume and checkpoint.get("full", False))
        if not full and not self.repo.known_commit(old):
            if old:
                log.warning("%s: last indexed commit %s is unknown here: full comparison",
                            self.repo.where(), old[:12])
            full = True
        elif not full and old and not self.repo.is_ancestor(old, target):  # old: known here
            log.warning("%s: %s is not an ancestor of %s (history rewritten): full comparison",
                        self.repo.where(), old[:12], target[:12])
            full = True

        passes: list[tuple[list[_Item], dict]] = []
        first, renames = self._pass_items(None if full else old, target)
        passes.append((first, {"base": old, "target": target, "full": full}))
        if target != head:
            later, more = self._pass_items(target, head)
            renames += more
            passes.append((later, {"base": target, "target": head, "full": False,
                                   "after": target}))
        retry = self._retry_items(request.retry, old, head, passes)
        if retry:
            passes[-1][0].extend(retry)
        total = sum(len(items) for items, _ in passes) - skip
        if renames:
            log.info("%s: %d renamed file(s) since %s", self.repo.where(), renames,
                     (old or "")[:12] or "the start")
        last_commits = self.repo.last_commits(
            head, {i.path for items, _ in passes for i in items if i.entry is not None}
        )
        live = self._live_ids(head) if full else None
        reader = self.repo.blob_reader()
        yielded_total = False
        try:
            for index, (items, info) in enumerate(passes):
                start = skip if index == 0 else 0
                # Deletions are applied when the run ends, so a resumed pass repeats those of
                # the part already done: they were never applied if the run died.
                deleted = [i.path for i in items[:start] if i.entry is None]
                commit = info["target"]
                for pos in range(start, max(len(items), start + 1), batch_size):
                    chunk = items[pos : pos + batch_size]
                    documents = []
                    for item in chunk:
                        if item.entry is None:
                            deleted.append(item.path)
                            continue
                        doc, permanent = self._document(reader, item, commit, last_commits)
                        if permanent and item.path in request.retry and \
                                self._unchanged_since(old, item):
                            continue  # reported last run; nothing new to say about it
                        documents.append(doc)
                    checkpoint_out: dict | None = {
                        **{k: v for k, v in info.items() if k != "after"},
                        "done": pos + len(chunk)}
                    if index > 0:
                        # Phase two belongs to the run after phase one: the next run resumes it
                        # from phase one's target.
                        checkpoint_out = None
                    yield SyncBatch(
                        documents=documents,
                        deleted=deleted,
                        checkpoint=checkpoint_out,
                        total=None if yielded_total else max(total, 0),
                    )
                    yielded_total = True
                    deleted = []
        finally:
            reader.close()
        yield SyncBatch(live_ids=live, state={"commit": head, "ref": ref})

    def _pass_items(self, old: str | None, new: str) -> tuple[list[_Item], int]:
        """What a pass from ``old`` (None: nothing, i.e. a full pass) to ``new`` must do."""
        if old is None:
            tree = self.repo.tree(new)
            return [_Item(p, e) for p, e in sorted(tree.items()) if self._admitted(p, e)], 0
        if old == new:
            return [], 0
        changed, gone, renames = self.repo.diff(old, new)
        items = [_Item(p, e) for p, e in changed.items() if self._admitted(p, e)]
        # A path that stopped being admitted (now binary, say) is gone for this source too.
        items += [_Item(p, None) for p, e in changed.items() if not self._admitted(p, e)]
        items += [_Item(p, None) for p in gone if p not in changed]
        items.sort(key=lambda i: i.path)
        return items, renames

    def _retry_items(self, retry: list[str], old: str | None, head: str,
                     passes: list[tuple[list[_Item], dict]]) -> list[_Item]:
        planned = {i.path for items, _ in passes for i in items}
        wanted = sorted(p for p in retry if p not in planned)
        if not wanted:
            return []
        tree = self.repo.tree(head, wanted)
        return [_Item(p, tree[p]) for p in wanted if p in tree and self._admitted(p, tree[p])]

    def _unchanged_since(self, old: str | None, item: _Item) -> bool:
        if not old or item.entry is None or not self.repo.known_commit(old):
            return False
        before = self.repo.tree(old, [item.path]).get(item.path)
        return before is not None and before.sha == item.entry.sha

    def _live_ids(self, commit: str) -> list[str]:
        return sorted(p for p, e in self.repo.tree(commit).items() if self._admitted(p, e))

    # Reading documents -----------------------------------------------------------------------
    def _document(self, reader: BlobReader, item: _Item, commit: str,
                  last_commits: dict[str, dict]) -> tuple[SourceDocument, bool]:
        """The document at ``item``, and whether a failure to read it is permanent for this
        version of the file (too big, binary, a submodule), not worth repeating."""
        path, entry = item.path, item.entry
        assert entry is not None
        media_type, language = classify(path)
        doc = SourceDocument(
            external_id=path, title=path, content=b"", media_type=media_type, path=path,
            readers=list(self.config.readers),
        )
        last = last_commits.get(path)
        doc.metadata = {"repository": self.repository}
        if language:
            doc.metadata["language"] = language
        if last:
            doc.metadata["last_commit"] = last
            try:
                doc.updated_at = datetime.fromisoformat(last["date"])
            except ValueError:
                pass
        if entry.mode == SUBMODULE_MODE:
            doc.error = (f"is a git submodule (pinned at {entry.sha[:12]}); submodules are not "
                         "indexed: add that repository as a git source of its own")
            return doc, True
        if entry.size is not None and (error := too_large(entry.size, self.config.max_file_bytes)):
            doc.error = error
            return doc, True
        try:
            data = reader.read(entry.sha)
        except ObjectError as e:
            doc.error = str(e)
            return doc, False
        try:
            text = decode_text(data)
        except NotTextError as e:
            doc.error = str(e)
            return doc, True
        doc.content = data
        doc.body = text
        script = shebang_language(text) if media_type == "text/plain" and not language else None
        if script:
            doc.media_type, doc.metadata["language"] = CODE_MEDIA_TYPE, script
        if doc.media_type == "text/markdown":
            _markdown(doc, text)
        self._links(doc, commit)
        return doc, False

    def _links(self, doc: SourceDocument, commit: str) -> None:
        if not self._template:
            return
        filled = (self._template.replace("{commit}", commit)
                  .replace("{path}", quote(doc.path or "", safe="/"))
                  .replace("{ref}", quote(self.config.ref or "HEAD", safe="/"))
                  .replace("{repository}", self.repository))
        file_url = filled.split("#", 1)[0] if "#" in filled else filled
        doc.url = file_url if "{start}" not in file_url else None
        suffix = PurePosixPath(doc.path or "").suffix.lower()
        if doc.media_type == "text/markdown" and doc.url:
            doc.link_template = doc.url + "#{anchor}"  # rendered: headings, not lines
        elif suffix in (".rst", ".adoc", ".asciidoc", ".org"):
            doc.link_template = None  # rendered as well, with anchors we cannot predict
        else:
            doc.link_template = filled


def _markdown(doc: SourceDocument, text: str) -> None:
    """Title and tags from a Markdown file's front matter (or its H1)."""
    try:
        meta, body, offset = split_front_matter(text)
    except FrontMatterError:
        meta, body, offset = {}, text, 0  # not ours to judge: index it as written
    doc.body, doc.body_line_offset = body, offset
    title = meta.get("title") or markdown_title(body)
    if title:
        doc.title = str(title).strip()
    doc.tags = parse_tags(meta.get("tags") or [])
