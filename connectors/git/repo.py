"""Running git: fetching or locating a repository, reading its trees, diffs, history and blobs.

Everything goes through the ``git`` command line against the object database (never a working
tree), so what is indexed is exactly what is committed. **Remote repositories** (``url``) are
fetched into ``<data dir>/git/<name>-<hash>`` (a bare repository); **local ones** (``path``) are
read in place.

**Credentials** come from environment variables whose *names* are options: ``token_env`` (an
HTTPS token sent as an ``Authorization`` header through ``GIT_CONFIG_*`` variables, never on a
command line or in a URL) and ``ssh_key_env`` / ``ssh_key_path`` for SSH. Every message that
leaves this module has URL user info and the token scrubbed.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from citewise.connectors.git.config import GitConfig
from citewise.errors import SourceError

_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


@dataclass(frozen=True)
class TreeEntry:
    """A file in a tree: mode, object id, size (None for a submodule)."""

    mode: str
    sha: str
    size: int | None



class Repository:
    """One source's repository: ``open()`` it, then read trees, diffs and blobs at commits."""

    def __init__(self, config: GitConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self._token = self._read_token()
        self.git_dir: Path | None = None
        self._head: str | None = None

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

    def env(self) -> dict[str, str]:
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

    def scrub(self, text: str) -> str:
        text = _USERINFO.sub("***@", text)
        if self._token:
            basic = base64.b64encode(f"{self.config.token_user}:{self._token}".encode()).decode()
            text = text.replace(self._token, "***").replace(basic, "***")
        return text

    def run(self, *args: str, input: bytes | None = None, check: bool = True,
             timeout: float | None = 300.0) -> subprocess.CompletedProcess[bytes]:
        cmd = ["git", "--git-dir", str(self.git_dir), *args] if self.git_dir else ["git", *args]
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, env=self.env(),
                                  timeout=timeout, check=False)
        except FileNotFoundError:
            raise SourceError("the git command is not installed",
                              hint="install git (2.30 or later) on the machine running citewise"
                              ) from None
        except subprocess.TimeoutExpired:
            raise SourceError(f"git {args[0]} on {self.where()} took over {timeout:.0f}s",
                              hint="raise fetch_timeout_s, or check the network") from None
        if check and proc.returncode != 0:
            raise SourceError(
                f"git {args[0]} failed on {self.where()}: {self.last_error(proc.stderr)}",
                hint=hint_for(proc.stderr.decode(errors="replace")),
            )
        return proc

    def last_error(self, stderr: bytes) -> str:
        lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
        # git puts the cause in the "fatal:" line; earlier lines are context.
        fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
        return self.scrub((fatal or lines or ["no message"])[-1])

    def where(self) -> str:
        return self.scrub(self.config.url) if self.config.url else str(self.config.path)

    # The repository ------------------------------------------------------------------------
    def open(self) -> str:
        """Fetch (remote) or locate (local) the repository; the commit the ref points at."""
        if self._head is not None:
            return self._head
        ref = self.config.ref or "HEAD"
        if self.config.url:
            self.git_dir = self.data_dir / "git" / clone_name(self.where())
            if not (self.git_dir / "HEAD").exists():
                try:
                    self.git_dir.mkdir(parents=True, exist_ok=True)
                    subprocess.run(["git", "init", "--quiet", "--bare", str(self.git_dir)],
                                   check=True, capture_output=True)
                except (OSError, subprocess.CalledProcessError) as e:
                    raise SourceError(f"cannot create the clone folder {self.git_dir}: {e}",
                                      hint="check that the data folder is writable") from None
            # Into our own ref: whatever the remote calls it, this clone has one tip to read.
            self.run("fetch", "--quiet", "--no-tags", "--force", "--no-write-fetch-head",
                      "--", self.config.url, f"+{ref}:refs/citewise/tip",
                      timeout=self.config.fetch_timeout_s)
            ref = "refs/citewise/tip"
        else:
            root = self.config.local_root()
            if not root.exists():
                raise SourceError(f"git repository {root} does not exist",
                                  hint="check the source's path")
            probe = self.run("-C", str(root), "rev-parse", "--absolute-git-dir", check=False)
            if probe.returncode != 0:
                raise SourceError(f"{root} is not a git repository: "
                                  f"{self.last_error(probe.stderr)}",
                                  hint="point path at a clone (or use url to have one made)")
            self.git_dir = Path(probe.stdout.decode().strip())
        found = self.run("rev-parse", "--verify", "--quiet", "--end-of-options",
                          f"{ref}^{{commit}}", check=False)
        if found.returncode != 0:
            raise SourceError(f"ref {self.config.ref or 'HEAD'!r} is not a commit in "
                              f"{self.where()}",
                              hint="check the source's ref (a branch, tag or commit)")
        self._head = found.stdout.decode().strip()
        return self._head

    def known_commit(self, sha: str | None) -> bool:
        if not sha or not re.fullmatch(r"[0-9a-f]{7,64}", sha):
            return False
        return self.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def is_ancestor(self, old: str, new: str) -> bool:
        return self.run("merge-base", "--is-ancestor", old, new, check=False).returncode == 0

    def tree(self, commit: str, paths: Iterable[str] | None = None) -> dict[str, TreeEntry]:
        args = ["ls-tree", "-r", "-z", "--long", "--full-tree", commit]
        if paths is not None:
            paths = list(paths)
            if not paths:
                return {}
            if len(paths) > 500:  # keep the command line short: list everything, pick after
                wanted = set(paths)
                return {p: e for p, e in self.tree(commit).items() if p in wanted}
            args += ["--", *(literal(p) for p in paths)]
        out = self.run(*args).stdout.decode("utf-8", errors="surrogateescape")
        tree: dict[str, TreeEntry] = {}
        for record in out.split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, kind, sha, size = meta.split()
            tree[path] = TreeEntry(mode, sha, int(size) if size.isdigit() else None)
        return tree

    def diff(self, old: str, new: str) -> tuple[dict[str, TreeEntry], list[str], int]:
        """Paths added or modified (with their new entries), paths gone, renames seen."""
        out = self.run("diff-tree", "-r", "-z", "-M", "--no-commit-id", "--raw", old, new)
        fields = out.stdout.decode("utf-8", errors="surrogateescape").split("\0")
        changed: dict[str, TreeEntry] = {}
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
                changed[dst] = TreeEntry(new_mode, new_sha, None)
                continue
            path = fields[i + 1]
            i += 2
            if status == "D":
                gone.append(path)
            else:
                changed[path] = TreeEntry(new_mode, new_sha, None)
        if changed:  # diff-tree gives no sizes: read them from the new tree
            sizes = self.tree(new, changed)
            changed = {p: sizes.get(p, e) for p, e in changed.items()}
        return changed, gone, renames

    def last_commits(self, head: str, paths: set[str]) -> dict[str, dict]:
        """The newest commit touching each path, in one walk of the history that stops as soon
        as every path is found."""
        found: dict[str, dict] = {}
        if not paths:
            return found
        wanted = set(paths)
        cmd = ["git", "--git-dir", str(self.git_dir), "log", "-z", "--name-only",
               "--no-renames", "--format=%x1e%H%x1f%an%x1f%aI", head]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=self.env())
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


    def blob_reader(self) -> BlobReader:
        return BlobReader(self)


class ObjectError(Exception):
    pass


class BlobReader:
    """Object contents through one long-running ``git cat-file --batch``."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                ["git", "--git-dir", str(self.repo.git_dir), "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=self.repo.env(),
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
        raise ObjectError(
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


def literal(path: str) -> str:
    # ls-tree takes pathspecs: a literal one so that names with * or ? mean themselves.
    return f":(literal){path}"


def clone_name(url: str) -> str:
    base = re.sub(r"[^a-z0-9._-]+", "-", url.lower().rstrip("/").rsplit("/", 1)[-1])
    base = base.removesuffix(".git").strip("-.") or "repo"
    return f"{base[:40]}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def hint_for(stderr: str) -> str | None:
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
