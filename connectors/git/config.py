"""A git source's settings, and how its citations link to the code host.

Links are pinned to the indexed commit: ``url_template`` (or ``link_style`` + ``web_url``, or the
style inferred from a github.com / gitlab.com / bitbucket.org URL) gets ``{commit}`` and ``{path}``
filled in per file; ``{start}``/``{end}`` are left for each chunk's lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from citewise.errors import ConfigError

LINK_STYLES = {
    "github": "{web}/blob/{commit}/{path}#L{start}-L{end}",
    "gitlab": "{web}/-/blob/{commit}/{path}#L{start}-{end}",
    "bitbucket": "{web}/src/{commit}/{path}#lines-{start}:{end}",
}
_HOST_STYLES = {"github.com": "github", "gitlab.com": "gitlab", "bitbucket.org": "bitbucket"}
_TEMPLATE_FIELDS = {"commit", "path", "start", "end", "ref", "repository"}


@dataclass
class GitConfig:
    url: str | None = None  # clone URL: https://..., ssh://..., git@host:org/repo, file://...
    path: Path | None = None  # or a repository on this machine, read in place
    ref: str | None = None  # branch, tag or commit; default: the repository's HEAD
    include: list[str] = field(default_factory=lambda: ["*"])
    exclude: list[str] = field(default_factory=list)
    default_excludes: bool = True
    readers: list[str] = field(default_factory=list)  # required: never assumed public
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



    def check(self) -> None:
        """Refuse settings that cannot work, before anything runs."""
        if bool(self.url) == bool(self.path):
            raise ConfigError("a git source needs exactly one of 'url' (to clone) or 'path' "
                              "(a repository on this machine)")
        if self.url and (self.url.startswith("-") or password_in_url(self.url)):
            raise ConfigError(
                "the git source's url must not carry a password or token",
                hint="put the token in an environment variable and name it with token_env",
            )
        if self.ref is not None and (not self.ref or self.ref.startswith("-")):
            raise ConfigError(f"git ref {self.ref!r} is not a branch, tag or commit")

    def local_root(self) -> Path:
        """The repository read in place: a source without a ``url`` has a ``path`` (``check``)."""
        if self.path is None:
            raise ConfigError("a git source needs exactly one of 'url' (to clone) or 'path' "
                              "(a repository on this machine)")
        return self.path.expanduser().resolve()

    @classmethod
    def from_options(cls, options: dict, readers: list[str] | None) -> GitConfig:
        known = set(cls.__dataclass_fields__) - {"readers"}
        unknown = set(options) - known
        if unknown:
            raise ConfigError(
                f"unknown setting(s) for a git source: {sorted(unknown)}",
                hint=f"a git source accepts {sorted(known)}",
            )
        opts = dict(options)
        if opts.get("path"):
            opts["path"] = Path(opts["path"]).expanduser()
        return cls(readers=list(readers or []), **opts)


def password_in_url(url: str) -> bool:
    m = re.match(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://([^/@]*)@", url)
    return bool(m and ":" in m.group(1))


def web_base(url: str) -> tuple[str, str] | None:
    """(host, https://host/org/repo) for a clone URL of a known shape."""
    m = (re.match(r"^(?:https?|ssh|git)://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+?)(?:\.git)?/?$", url)
         or re.match(r"^[^@/]+@([^:/]+):(.+?)(?:\.git)?/?$", url))
    if not m:
        return None
    return m.group(1).lower(), f"https://{m.group(1).lower()}/{m.group(2)}"


def repository_name(config: GitConfig) -> str:
    if config.url:
        web = web_base(config.url)
        if web:
            return web[1].split("/", 3)[-1]
        return config.url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    return config.local_root().name


def link_template(config: GitConfig, repository: str) -> str | None:
    template = config.url_template
    if template is None:
        style, web = config.link_style, config.web_url
        if not web and config.url:
            known = web_base(config.url)
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
