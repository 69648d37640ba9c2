"""A real git repository in a temporary folder, edited and committed the way people do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Lovelace", "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


class GitRepo:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.git("init", "--quiet", "--initial-branch=main")

    def git(self, *args: str, input: bytes | None = None) -> str:
        proc = subprocess.run(["git", *args], cwd=self.root, input=input, capture_output=True,
                              env={**os.environ, **_ENV}, check=True)
        return proc.stdout.decode().strip()

    def write(self, path: str, content: str | bytes) -> Path:
        full = self.root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            full.write_bytes(content)
        else:
            full.write_text(content)
        return full

    def remove(self, path: str) -> None:
        self.git("rm", "--quiet", path)

    def move(self, src: str, dst: str) -> None:
        (self.root / dst).parent.mkdir(parents=True, exist_ok=True)
        self.git("mv", src, dst)

    def commit(self, message: str, add_all: bool = True) -> str:
        if add_all:
            self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def lines_of(self, path: str, needle: str) -> int:
        """1-based number of the first line of ``path`` containing ``needle``."""
        for n, line in enumerate((self.root / path).read_text().split("\n"), start=1):
            if needle in line:
                return n
        raise AssertionError(f"{needle!r} not in {path}")
