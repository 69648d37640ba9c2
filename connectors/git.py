"""A git repository: code, docs and config at a branch, tag or commit, synced commit by commit.

Each file tracked at the ref is one document whose external id is its path in the repository.
The connector reads git's object database through the ``git`` command line (never a working
tree), so what is indexed is exactly what is committed:

* **Remote repositories** (``url``) are fetched into ``<data dir>/git/<name>-<hash>`` (a bare
  repository) on every run; **local ones** (``path``) are read in place, at ``ref``.
* **Incremental by commit.** The state the pipeline keeps is ``{"commit", "ref"}``. The next run
  asks git for the tree diff between that commit and the new head and reads only added, modified
  and renamed files, and reports deleted (and renamed-away) paths. When the old commit is unknown
  (a fresh clone folder, garbage-collected after a force-push) or is not an ancestor of the new
  head (history was rewritten), the run is a full pass with ``live_ids``: the pipeline compares
  every file by content hash, so nothing is duplicated and only real changes are embedded.
* **Credentials** come from environment variables whose *names* are options: ``token_env``
  (an HTTPS token sent as an ``Authorization`` header through ``GIT_CONFIG_*`` variables, never
  on a command line or in a URL) and ``ssh_key_env`` / ``ssh_key_path`` for SSH. Error messages
  have URL user info and the token scrubbed.
* **Links** are pinned to the indexed commit: ``url_template`` (or ``link_style`` + ``web_url``,
  or the style inferred from a github.com / gitlab.com / bitbucket.org URL) gets ``{commit}`` and
  ``{path}`` filled in; ``{start}``/``{end}`` are left for each chunk's lines.

Skipped without a word: binary file types, symlinks, vendored and generated trees (``vendor/``,
``node_modules/``, lock files, minified assets; turn off with ``default_excludes = false``) and
whatever ``exclude`` names. Reported as a failed document with a clear message: a file over
``max_file_bytes``, a file that turns out binary or not UTF-8, a submodule, a corrupt object. A
failed file keeps whatever was indexed of it before; one that is still failing, unchanged, is not
reported again on every run.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import ClassVar
from urllib.parse import quote

from citewise.connectors.base import SyncBatch, SyncRequest
from citewise.connectors.frontmatter import FrontMatterError, split_front_matter
from citewise.errors import ConfigError, SourceError
from citewise.types import SourceDocument

log = logging.getLogger("citewise.connectors.git")

CODE = "text/x-code"
_SUBMODULE_MODE = "160000"
_SYMLINK_MODE = "120000"

LINK_STYLES = {
    "github": "{web}/blob/{commit}/{path}#L{start}-L{end}",
    "gitlab": "{web}/-/blob/{commit}/{path}#L{start}-{end}",
    "bitbucket": "{web}/src/{commit}/{path}#lines-{start}:{end}",
}
_HOST_STYLES = {"github.com": "github", "gitlab.com": "gitlab", "bitbucket.org": "bitbucket"}
_TEMPLATE_FIELDS = {"commit", "path", "start", "end", "ref", "repository"}

# Vendored and generated files: rarely what anyone asks about, often huge.
DEFAULT_EXCLUDE = (
    "vendor/", "node_modules/", "bower_components/", "third_party/", "__pycache__/", ".venv/",
    "venv/", "site-packages/", ".tox/", ".git/",
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock",
    "Pipfile.lock", "uv.lock", "Cargo.lock", "Gemfile.lock", "composer.lock", "go.sum",
    "*.lock", "*.min.js", "*.min.css", "*-min.js", "*.bundle.js", "*.map", "*_pb2.py",
    "*_pb2_grpc.py", "*.pb.go", "*.generated.*", "*_generated.*",
)
BINARY_EXTENSIONS = frozenset(
    ".png .jpg .jpeg .gif .bmp .ico .webp .tif .tiff .psd .svg .pdf .zip .gz .tgz .bz2 .xz .7z "
    ".rar .tar .jar .war .ear .class .so .dylib .dll .exe .bin .o .a .lib .obj .pyc .pyo .whl "
    ".egg .woff .woff2 .ttf .otf .eot .mp3 .mp4 .m4a .mov .avi .wav .ogg .flac .webm .mkv "
    ".sqlite .db .parquet .avro .orc .npy .npz .pkl .pickle .onnx .pt .pth .safetensors .h5 "
    ".keras .tflite .iso .dmg .deb .rpm .apk .ipa .xls .xlsx .doc .docx .ppt .pptx .key "
    ".numbers .pages .ai .sketch .fig".split()
)
MARKDOWN = frozenset({".md", ".markdown", ".mdown", ".mkd"})
HTML = frozenset({".html", ".htm", ".xhtml"})
PROSE = frozenset({".txt", ".text", ".rst", ".adoc", ".asciidoc", ".org"})
PROSE_NAMES = frozenset({"readme", "license", "licence", "copying", "notice", "authors",
                         "contributors", "changelog", "changes", "news", "history"})
LANGUAGES = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".go": "go", ".java": "java", ".kt": "kotlin", ".kts": "kotlin", ".rs": "rust",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp",
    ".hh": "cpp", ".hxx": "cpp", ".cs": "csharp", ".swift": "swift", ".scala": "scala",
    ".sc": "scala", ".php": "php", ".rb": "ruby", ".rake": "ruby", ".gemspec": "ruby",
    ".groovy": "groovy", ".gradle": "groovy", ".dart": "dart", ".lua": "lua", ".pl": "perl",
    ".pm": "perl", ".r": "r", ".jl": "julia", ".ex": "elixir", ".exs": "elixir",
    ".erl": "erlang", ".hs": "haskell", ".clj": "clojure", ".m": "objective-c",
    ".zig": "zig", ".nim": "nim", ".sol": "solidity", ".nix": "nix", ".vue": "vue",
    ".svelte": "svelte", ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".ksh": "shell",
    ".fish": "shell", ".ps1": "powershell", ".psm1": "powershell", ".bat": "batch",
    ".cmd": "batch", ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".json": "json",
    ".jsonc": "json", ".json5": "json", ".toml": "toml", ".ini": "ini", ".cfg": "ini",
    ".conf": "ini", ".properties": "ini", ".env": "ini", ".xml": "xml", ".tf": "hcl",
    ".tfvars": "hcl", ".hcl": "hcl", ".proto": "proto", ".graphql": "graphql", ".gql": "graphql",
    ".css": "css", ".scss": "scss", ".less": "less", ".mk": "make", ".cmake": "cmake",
    ".dockerfile": "dockerfile", ".j2": None, ".jinja": None, ".jinja2": None, ".tpl": None,
    ".tmpl": None, ".template": None,  # templates: the language of the name inside
}
FILE_LANGUAGES = {
    "dockerfile": "dockerfile", "containerfile": "dockerfile", "makefile": "make",
    "gnumakefile": "make", "jenkinsfile": "groovy", "vagrantfile": "ruby", "gemfile": "ruby",
    "rakefile": "ruby", "procfile": "yaml", "justfile": "make", "cmakelists.txt": "cmake",
    "codeowners": "text", ".gitignore": "text", ".dockerignore": "text",
    ".gitattributes": "text", ".editorconfig": "ini", ".env": "ini", ".npmrc": "ini",
    "build": "python", "workspace": "python", "tiltfile": "python",
}
_SHEBANG = re.compile(r"^#!\s*(?:\S*/)?(?:env\s+(?:-S\s+)?)?(?:\S*/)?([a-z]+)")
_SHEBANG_LANGUAGES = {"python": "python", "bash": "shell", "sh": "shell", "zsh": "shell",
                      "dash": "shell", "ksh": "shell", "node": "javascript", "ruby": "ruby",
                      "perl": "perl", "deno": "typescript", "pwsh": "powershell"}
_MD_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.M)
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


@dataclass
class GitConfig:
    url: str | None = None  # clone URL: https://..., ssh://..., git@host:org/repo, file://...
    path: Path | None = None  # or a repository on this machine, read in place
    ref: str | None = None  # branch, tag or commit; default: the repository's HEAD
    include: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=list)
    default_excludes: bool = True
    readers: list[str] = field(default_factory=lambda: ["public"])
    url_template: str | None = None  # https://host/org/repo/blob/{commit}/{path}#L{start}-L{end}
    link_style: str | None = None  # github | gitlab | bitbucket, with web_url
    web_url: str | None = None  # https://github.com/org/repo
    repository: str | None = None  # display name; default: org/repo from the URL, or folder
    max_file_bytes: int = 1024 * 1024
    token_env: str | None = None  # name of the env var holding an HTTPS token
    token_user: str = "x-access-token"  # user name sent with the token (GitHub's; any works)
    ssh_key_env: str | None = None  # name of the env var holding a private key's path
    ssh_key_path: str | None = None
    fetch_timeout_s: float = 600.0


@dataclass(frozen=True)
class _Entry:
    """A file in a tree: mode, object id, size (None for a submodule)."""

    mode: str
    sha: str
    size: int | None


@dataclass
class _Item:
    """One step of a pass: read ``path`` (``entry``) or report it deleted (``entry`` None)."""

    path: str
    entry: _Entry | None


class GitConnector:
    source_type: ClassVar[str] = "git"

    def __init__(self, config: GitConfig, *, data_dir: Path | None = None) -> None:
        if bool(config.url) == bool(config.path):
            raise ConfigError("a git source needs exactly one of 'url' (to clone) or 'path' "
                              "(a repository on this machine)")
        if config.url and (config.url.startswith("-") or _password_in_url(config.url)):
            raise ConfigError(
                "the git source's url must not carry a password or token",
                hint="put the token in an environment variable and name it with token_env",
            )
        if config.ref is not None and (not config.ref or config.ref.startswith("-")):
            raise ConfigError(f"git ref {config.ref!r} is not a branch, tag or commit")
        self.config = config
        self.data_dir = Path(data_dir or "data")
        self.repository = config.repository or _repository_name(config)
        self._template = _link_template(config, self.repository)
        self._token = self._read_token()
        self._git_dir: Path | None = None
        self._head: str | None = None

    @classmethod
    def from_options(cls, options: dict, readers: list[str], *,
                     data_dir: Path | None = None) -> GitConnector:
        known = set(GitConfig.__dataclass_fields__) - {"readers"}
        unknown = set(options) - known
        if unknown:
            raise ConfigError(
                f"unknown setting(s) for a git source: {sorted(unknown)}",
                hint=f"a git source accepts {sorted(known)}",
            )
        opts = dict(options)
        if opts.get("path"):
            opts["path"] = Path(opts["path"]).expanduser()
        return cls(GitConfig(readers=list(readers), **opts), data_dir=data_dir)

    # Credentials and running git --------------------------------------------------------------
    def _read_token(self) -> str | None:
        name = self.config.token_env
        if not name:
            return None
        token = os.environ.get(name)
        if not token:
            raise SourceError(
                f"the git source's token_env names {name!r}, which is not set",
                hint=f"export {name}=<token> in the environment citewise runs in",
            )
        return token

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Never wait for a password prompt; fail with a message instead.
        env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="", SSH_ASKPASS="", LC_ALL="C",
                   LANGUAGE="C")
        if self._token:
            # Through GIT_CONFIG_* variables, so the header is on no command line (ps shows
            # those) and in no config file.
            n = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
            basic = base64.b64encode(f"{self.config.token_user}:{self._token}".encode()).decode()
            env[f"GIT_CONFIG_KEY_{n}"] = "http.extraHeader"
            env[f"GIT_CONFIG_VALUE_{n}"] = f"Authorization: Basic {basic}"
            env["GIT_CONFIG_COUNT"] = str(n + 1)
        key = self.config.ssh_key_path
        if self.config.ssh_key_env:
            key = os.environ.get(self.config.ssh_key_env) or None
            if key is None:
                raise SourceError(
                    f"the git source's ssh_key_env names {self.config.ssh_key_env!r}, "
                    "which is not set",
                    hint="set it to the path of the private key the server accepts",
                )
        if key:
            env["GIT_SSH_COMMAND"] = (f"ssh -i {shlex.quote(str(Path(key).expanduser()))} "
                                      "-o IdentitiesOnly=yes -o BatchMode=yes")
        else:
            env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        return env

    def _scrub(self, text: str) -> str:
        text = _USERINFO.sub("***@", text)
        if self._token:
            basic = base64.b64encode(f"{self.config.token_user}:{self._token}".encode()).decode()
            text = text.replace(self._token, "***").replace(basic, "***")
        return text

    def _git(self, *args: str, input: bytes | None = None, check: bool = True,
             timeout: float | None = 300.0) -> subprocess.CompletedProcess[bytes]:
        cmd = ["git", "--git-dir", str(self._git_dir), *args] if self._git_dir else ["git", *args]
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, env=self._env(),
                                  timeout=timeout, check=False)
        except FileNotFoundError:
            raise SourceError("the git command is not installed",
                              hint="install git (2.30 or later) on the machine running citewise"
                              ) from None
        except subprocess.TimeoutExpired:
            raise SourceError(f"git {args[0]} on {self._where()} took over {timeout:.0f}s",
                              hint="raise fetch_timeout_s, or check the network") from None
        if check and proc.returncode != 0:
            raise SourceError(
                f"git {args[0]} failed on {self._where()}: {self._last_error(proc.stderr)}",
                hint=_hint_for(proc.stderr.decode(errors="replace")),
            )
        return proc

    def _last_error(self, stderr: bytes) -> str:
        lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
        # git puts the cause in the "fatal:" line; earlier lines are context.
        fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
        return self._scrub((fatal or lines or ["no message"])[-1])

    def _where(self) -> str:
        return self._scrub(self.config.url) if self.config.url else str(self.config.path)

    # The repository ------------------------------------------------------------------------
    def _open(self) -> str:
        """Fetch (remote) or locate (local) the repository; the commit the ref points at."""
        if self._head is not None:
            return self._head
        ref = self.config.ref or "HEAD"
        if self.config.url:
            self._git_dir = self.data_dir / "git" / _clone_name(self._where())
            if not (self._git_dir / "HEAD").exists():
                try:
                    self._git_dir.mkdir(parents=True, exist_ok=True)
                    subprocess.run(["git", "init", "--quiet", "--bare", str(self._git_dir)],
                                   check=True, capture_output=True)
                except (OSError, subprocess.CalledProcessError) as e:
                    raise SourceError(f"cannot create the clone folder {self._git_dir}: {e}",
                                      hint="check that the data folder is writable") from None
            # Into our own ref: whatever the remote calls it, this clone has one tip to read.
            self._git("fetch", "--quiet", "--no-tags", "--force", "--no-write-fetch-head",
                      "--", self.config.url, f"+{ref}:refs/citewise/tip",
                      timeout=self.config.fetch_timeout_s)
            ref = "refs/citewise/tip"
        else:
            root = Path(self.config.path).expanduser().resolve()
            if not root.exists():
                raise SourceError(f"git repository {root} does not exist",
                                  hint="check the source's path")
            probe = self._git("-C", str(root), "rev-parse", "--absolute-git-dir", check=False)
            if probe.returncode != 0:
                raise SourceError(f"{root} is not a git repository: "
                                  f"{self._last_error(probe.stderr)}",
                                  hint="point path at a clone (or use url to have one made)")
            self._git_dir = Path(probe.stdout.decode().strip())
        found = self._git("rev-parse", "--verify", "--quiet", "--end-of-options",
                          f"{ref}^{{commit}}", check=False)
        if found.returncode != 0:
            raise SourceError(f"ref {self.config.ref or 'HEAD'!r} is not a commit in "
                              f"{self._where()}",
                              hint="check the source's ref (a branch, tag or commit)")
        self._head = found.stdout.decode().strip()
        return self._head

    def _known_commit(self, sha: str | None) -> bool:
        if not sha or not re.fullmatch(r"[0-9a-f]{7,64}", sha):
            return False
        return self._git("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def _is_ancestor(self, old: str, new: str) -> bool:
        return self._git("merge-base", "--is-ancestor", old, new, check=False).returncode == 0

    def _tree(self, commit: str, paths: Iterable[str] | None = None) -> dict[str, _Entry]:
        args = ["ls-tree", "-r", "-z", "--long", "--full-tree", commit]
        if paths is not None:
            paths = list(paths)
            if not paths:
                return {}
            if len(paths) > 500:  # keep the command line short: list everything, pick after
                wanted = set(paths)
                return {p: e for p, e in self._tree(commit).items() if p in wanted}
            args += ["--", *(_literal(p) for p in paths)]
        out = self._git(*args).stdout.decode("utf-8", errors="surrogateescape")
        tree: dict[str, _Entry] = {}
        for record in out.split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, kind, sha, size = meta.split()
            tree[path] = _Entry(mode, sha, int(size) if size.isdigit() else None)
        return tree

    def _diff(self, old: str, new: str) -> tuple[dict[str, _Entry], list[str], int]:
        """Paths added or modified (with their new entries), paths gone, renames seen."""
        out = self._git("diff-tree", "-r", "-z", "-M", "--no-commit-id", "--raw", old, new)
        fields = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
        changed: dict[str, _Entry] = {}
        gone: list[str] = []
        renames = 0
        i = 0
        while i < len(fields) - 1:
            meta = fields[i]
            if not meta.startswith(":"):
                i += 1
                continue
            _, new_mode, _, new_sha, status = meta[1:].split()
            if status[0] in "RC":
                src, dst = fields[i + 1], fields[i + 2]
                i += 3
                if status[0] == "R":
                    gone.append(src)
                    renames += 1
                changed[dst] = _Entry(new_mode, new_sha, None)
                continue
            path = fields[i + 1]
            i += 2
            if status == "D":
                gone.append(path)
            else:
                changed[path] = _Entry(new_mode, new_sha, None)
        if changed:  # diff-tree gives no sizes: read them from the new tree
            sizes = self._tree(new, changed)
            changed = {p: sizes.get(p, e) for p, e in changed.items()}
        return changed, gone, renames

    def _last_commits(self, head: str, paths: set[str]) -> dict[str, dict]:
        """The newest commit touching each path, in one walk of the history that stops as soon
        as every path is found."""
        found: dict[str, dict] = {}
        if not paths:
            return found
        wanted = set(paths)
        cmd = ["git", "--git-dir", str(self._git_dir), "log", "-z", "--name-only",
               "--no-renames", "--format=%x1e%H%x1f%an%x1f%aI", head]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=self._env())
        try:
            buffer = b""
            assert proc.stdout is not None
            while wanted:
                block = proc.stdout.read(1 << 16)
                if not block:
                    records, buffer = [buffer], b""
                else:
                    buffer += block
                    *records, buffer = buffer.split(b"\x1e")
                for record in records:
                    if not record:
                        continue
                    head_part, _, names = record.partition(b"\0")
                    sha, author, date = head_part.decode(errors="replace").split("\x1f")
                    info = {"sha": sha, "author": author, "date": date.strip()}
                    for name in names.split(b"\0"):
                        path = name.strip(b"\n").decode("utf-8", errors="surrogateescape")
                        if path in wanted:
                            found[path] = info
                            wanted.discard(path)
                if not block:
                    break
        finally:
            proc.kill()
            proc.wait()
        return found

    # Admission -------------------------------------------------------------------------------
    def admitted(self, path: str, entry: _Entry) -> bool:
        """Whether ``path`` belongs to the source at all (before reading it)."""
        if entry.mode == _SYMLINK_MODE:
            return False
        name = path.rsplit("/", 1)[-1]
        if PurePosixPath(name).suffix.lower() in BINARY_EXTENSIONS:
            return False
        if not any(_matches(path, name, pat) for pat in self.config.include):
            return False
        excludes = [*self.config.exclude]
        if self.config.default_excludes:
            excludes += DEFAULT_EXCLUDE
        return not any(_matches(path, name, pat) for pat in excludes)

    # The sync protocol -----------------------------------------------------------------------
    def sync(self, request: SyncRequest, batch_size: int = 32) -> Iterator[SyncBatch]:
        head = self._open()
        ref = self.config.ref or "HEAD"
        old = request.state.get("commit")
        checkpoint = request.checkpoint or {}
        # A run that did not finish resumes its pass (same start, same target) where it stopped,
        # then catches up from that target to today's head.
        resume = (checkpoint.get("base") == old and self._known_commit(checkpoint.get("target"))
                  and isinstance(checkpoint.get("done"), int))
        target = checkpoint["target"] if resume else head
        skip = checkpoint["done"] if resume else 0
        full = request.full or (resume and checkpoint.get("full", False))
        if not full and not self._known_commit(old):
            if old:
                log.warning("%s: last indexed commit %s is unknown here: full comparison",
                            self._where(), old[:12])
            full = True
        elif not full and not self._is_ancestor(old, target):
            log.warning("%s: %s is not an ancestor of %s (history rewritten): full comparison",
                        self._where(), old[:12], target[:12])
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
            log.info("%s: %d renamed file(s) since %s", self._where(), renames,
                     (old or "")[:12] or "the start")
        last_commits = self._last_commits(
            head, {i.path for items, _ in passes for i in items if i.entry is not None}
        )
        live = self._live_ids(head) if full else None
        reader = _BlobReader(self)
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
                    checkpoint_out = {**{k: v for k, v in info.items() if k != "after"},
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
            tree = self._tree(new)
            return [_Item(p, e) for p, e in sorted(tree.items()) if self.admitted(p, e)], 0
        if old == new:
            return [], 0
        changed, gone, renames = self._diff(old, new)
        items = [_Item(p, e) for p, e in changed.items() if self.admitted(p, e)]
        # A path that stopped being admitted (now binary, say) is gone for this source too.
        items += [_Item(p, None) for p, e in changed.items() if not self.admitted(p, e)]
        items += [_Item(p, None) for p in gone if p not in changed]
        items.sort(key=lambda i: i.path)
        return items, renames

    def _retry_items(self, retry: list[str], old: str | None, head: str,
                     passes: list[tuple[list[_Item], dict]]) -> list[_Item]:
        planned = {i.path for items, _ in passes for i in items}
        wanted = sorted(p for p in retry if p not in planned)
        if not wanted:
            return []
        tree = self._tree(head, wanted)
        return [_Item(p, tree[p]) for p in wanted if p in tree and self.admitted(p, tree[p])]

    def _unchanged_since(self, old: str | None, item: _Item) -> bool:
        if not old or item.entry is None or not self._known_commit(old):
            return False
        before = self._tree(old, [item.path]).get(item.path)
        return before is not None and before.sha == item.entry.sha

    def _live_ids(self, commit: str) -> list[str]:
        return sorted(p for p, e in self._tree(commit).items() if self.admitted(p, e))

    # Reading documents -----------------------------------------------------------------------
    def _document(self, reader: _BlobReader, item: _Item, commit: str,
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
        if entry.mode == _SUBMODULE_MODE:
            doc.error = (f"is a git submodule (pinned at {entry.sha[:12]}); submodules are not "
                         "indexed: add that repository as a git source of its own")
            return doc, True
        if entry.size is not None and entry.size > self.config.max_file_bytes:
            doc.error = (f"file is {entry.size} bytes, over the limit of "
                         f"{self.config.max_file_bytes} (raise max_file_bytes for this source, "
                         "or exclude the file)")
            return doc, True
        try:
            data = reader.read(entry.sha)
        except _ObjectError as e:
            doc.error = str(e)
            return doc, False
        if b"\0" in data[:8192]:
            doc.error = "file looks binary (contains NUL bytes); only text files are indexed"
            return doc, True
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            doc.error = f"file is not UTF-8 text (byte {e.start}): re-save it as UTF-8"
            return doc, True
        doc.content = data
        doc.body = text
        if media_type == "text/plain" and language is None and _SHEBANG.match(text):
            doc.media_type, language = CODE, _shebang_language(text)
            doc.metadata["language"] = language
        if doc.media_type == "text/markdown":
            self._markdown(doc, text)
        self._links(doc, commit)
        return doc, False

    def _markdown(self, doc: SourceDocument, text: str) -> None:
        try:
            meta, body, offset = split_front_matter(text)
        except FrontMatterError:
            meta, body, offset = {}, text, 0  # not ours to judge: index it as written
        doc.body, doc.body_line_offset = body, offset
        title = meta.get("title")
        if not title:
            m = _MD_H1.search(body)
            title = m.group(1).strip() if m else None
        if title:
            doc.title = str(title).strip()
        tags = meta.get("tags") or []
        if isinstance(tags, str):
            tags = [t for t in re.split(r"[,\s]+", tags) if t]
        if isinstance(tags, list):
            doc.tags = [str(t).strip().lower() for t in tags if str(t).strip()]

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

    # The load protocol, for tools that list or read a source without syncing -----------------
    def list_ids(self) -> Iterator[str]:
        yield from self._live_ids(self._open())

    def count(self) -> int:
        return len(self._live_ids(self._open()))

    def load(self, batch_size: int = 32) -> Iterator[list[SourceDocument]]:
        head = self._open()
        items, _ = self._pass_items(None, head)
        last_commits = self._last_commits(head, {i.path for i in items})
        reader = _BlobReader(self)
        try:
            for pos in range(0, len(items), batch_size):
                yield [self._document(reader, i, head, last_commits)[0]
                       for i in items[pos : pos + batch_size]]
        finally:
            reader.close()


class _ObjectError(Exception):
    pass


class _BlobReader:
    """Object contents through one long-running ``git cat-file --batch``."""

    def __init__(self, connector: GitConnector) -> None:
        self.connector = connector
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                ["git", "--git-dir", str(self.connector._git_dir), "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=self.connector._env(),
            )
        return self.proc

    def read(self, sha: str) -> bytes:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(sha.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline().decode(errors="replace").split()
        except OSError:
            header = []
        if len(header) == 3 and header[1] == "blob":
            size = int(header[2])
            data = proc.stdout.read(size + 1)[:size]  # the object, then a newline
            if len(data) == size:
                return data
        if header[-1:] != ["missing"]:
            self.close()  # out of step with the stream: start afresh for the next object
        raise _ObjectError(
            f"git object {sha[:12]} is missing or corrupt in the repository "
            "(run `git fsck` there; a fresh clone usually fixes it)"
        )

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# Helpers ---------------------------------------------------------------------------------------
def classify(path: str) -> tuple[str, str | None]:
    """(media type, language) of a file by its name: Markdown, HTML and prose go to the spine's
    parsers; everything else is code or config with a language for the code chunker."""
    name = path.rsplit("/", 1)[-1]
    low = name.lower()
    suffix = PurePosixPath(low).suffix
    if suffix in MARKDOWN:
        return "text/markdown", None
    if suffix in HTML:
        return "text/html", None
    if suffix in PROSE:
        return "text/plain", None
    if low in FILE_LANGUAGES:
        return CODE, FILE_LANGUAGES[low]
    if low.startswith(("dockerfile.", "containerfile.")) or low.endswith(".dockerfile"):
        return CODE, "dockerfile"
    if suffix in LANGUAGES:
        language = LANGUAGES[suffix]
        if language is None:  # a template: app.yaml.j2 is YAML
            inner = PurePosixPath(low[: -len(suffix)]).suffix
            language = LANGUAGES.get(inner) or "text"
        return CODE, language
    if not suffix and (low in PROSE_NAMES or low.split(".")[0] in PROSE_NAMES):
        return "text/plain", None
    if low.split(".")[0] in PROSE_NAMES:
        return "text/plain", None
    if not suffix:
        return "text/plain", None  # may turn out a script: the shebang decides on reading
    return CODE, "text"


def _shebang_language(text: str) -> str:
    m = _SHEBANG.match(text)
    return _SHEBANG_LANGUAGES.get(m.group(1), "shell") if m else "text"


def _matches(path: str, name: str, pattern: str) -> bool:
    """A glob against the path or the file name; ``dir/`` matches that folder anywhere."""
    if pattern.endswith("/"):
        folder = pattern.rstrip("/")
        parts = path.split("/")[:-1]
        if "/" in folder:
            return any(fnmatch.fnmatchcase("/".join(parts[i : i + folder.count("/") + 1]),
                                           folder) for i in range(len(parts)))
        return any(fnmatch.fnmatchcase(part, folder) for part in parts)
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(name, pattern)


def _literal(path: str) -> str:
    # ls-tree takes pathspecs: a literal one so that names with * or ? mean themselves.
    return f":(literal){path}"


def _password_in_url(url: str) -> bool:
    m = re.match(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://([^/@]*)@", url)
    return bool(m and ":" in m.group(1))


def _web_base(url: str) -> tuple[str, str] | None:
    """(host, https://host/org/repo) for a clone URL of a known shape."""
    m = (re.match(r"^(?:https?|ssh|git)://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+?)(?:\.git)?/?$", url)
         or re.match(r"^[^@/]+@([^:/]+):(.+?)(?:\.git)?/?$", url))
    if not m:
        return None
    return m.group(1).lower(), f"https://{m.group(1).lower()}/{m.group(2)}"


def _repository_name(config: GitConfig) -> str:
    if config.url:
        web = _web_base(config.url)
        if web:
            return web[1].split("/", 3)[-1]
        return config.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return Path(config.path).expanduser().resolve().name


def _link_template(config: GitConfig, repository: str) -> str | None:
    template = config.url_template
    if template is None:
        style, web = config.link_style, config.web_url
        if not web and config.url:
            known = _web_base(config.url)
            if known and (style or known[0] in _HOST_STYLES):
                web = known[1]
                style = style or _HOST_STYLES[known[0]]
        if not (style and web):
            return None
        if style not in LINK_STYLES:
            raise ConfigError(f"link_style {style!r} is not one of {sorted(LINK_STYLES)}",
                              hint="or give the whole url_template")
        template = LINK_STYLES[style].replace("{web}", web.rstrip("/"))
    fields = set(re.findall(r"\{([^{}]*)\}", template))
    unknown = fields - _TEMPLATE_FIELDS
    if unknown:
        raise ConfigError(
            f"url_template has unknown field(s) {sorted(unknown)}",
            hint="use {commit}, {path}, {start}, {end} (and {ref}, {repository})",
        )
    if "{path}" not in template:
        raise ConfigError("url_template must contain {path}",
                          hint="e.g. https://github.com/org/repo/blob/{commit}/{path}#L{start}-L{end}")
    return template


def _clone_name(url: str) -> str:
    base = re.sub(r"[^a-z0-9._-]+", "-", url.lower().rstrip("/").rsplit("/", 1)[-1])
    base = base.removesuffix(".git").strip("-.") or "repo"
    return f"{base[:40]}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def _hint_for(stderr: str) -> str | None:
    s = stderr.lower()
    if any(k in s for k in ("authentication failed", "could not read username",
                            "could not read password", "permission denied", "403",
                            "401", "access denied", "terminal prompts disabled")):
        return ("check the credentials: the variable token_env names (HTTPS) or the key "
                "ssh_key_path / ssh_key_env points at (SSH), and that they may read the repository")
    if any(k in s for k in ("could not resolve host", "connection refused", "timed out",
                            "network is unreachable", "failed to connect", "no route to host",
                            "connection reset")):
        return "the git server cannot be reached from here: check the network, proxy and URL"
    if "couldn't find remote ref" in s or "invalid refspec" in s:
        return "check the source's ref: the branch, tag or commit does not exist on the remote"
    if any(k in s for k in ("not found", "does not appear to be a git repository",
                            "repository not found", "does not exist")):
        return "check the source's url (or path): no repository there"
    if any(k in s for k in ("corrupt", "bad object", "loose object", "fsck")):
        return "the local copy is damaged: delete the clone folder under <data dir>/git to refetch"
    return None
