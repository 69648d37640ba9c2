"""Which files of a repository a git source indexes, and as what.

Skipped without a word: binary file types, symlinks, vendored and generated trees (``vendor/``,
``node_modules/``, lock files, minified assets; turn off with ``default_excludes = false``) and
whatever ``exclude`` names. Everything else is classified by name: Markdown, HTML and prose go to
the prose parsers; code and config get a language for the code chunker.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath

from citewise.types import CODE_MEDIA_TYPE

SUBMODULE_MODE = "160000"
SYMLINK_MODE = "120000"

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
        return CODE_MEDIA_TYPE, FILE_LANGUAGES[low]
    if low.startswith(("dockerfile.", "containerfile.")) or low.endswith(".dockerfile"):
        return CODE_MEDIA_TYPE, "dockerfile"
    if suffix in LANGUAGES:
        language = LANGUAGES[suffix]
        if language is None:  # a template: app.yaml.j2 is YAML
            inner = PurePosixPath(low[: -len(suffix)]).suffix
            language = LANGUAGES.get(inner) or "text"
        return CODE_MEDIA_TYPE, language
    if not suffix and (low in PROSE_NAMES or low.split(".")[0] in PROSE_NAMES):
        return "text/plain", None
    if low.split(".")[0] in PROSE_NAMES:
        return "text/plain", None
    if not suffix:
        return "text/plain", None  # may turn out a script: the shebang decides on reading
    return CODE_MEDIA_TYPE, "text"


def shebang_language(text: str) -> str | None:
    """The language a script's ``#!`` line names, or None when it has none."""
    m = _SHEBANG.match(text)
    return _SHEBANG_LANGUAGES.get(m.group(1), "shell") if m else None


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




def admitted(path: str, mode: str, include: list[str], exclude: list[str],
             default_excludes: bool = True) -> bool:
    """Whether the file at ``path`` (with its git ``mode``) belongs to the source at all,
    decided before reading it."""
    if mode == SYMLINK_MODE:
        return False
    name = path.rsplit("/", 1)[-1]
    if PurePosixPath(name).suffix.lower() in BINARY_EXTENSIONS:
        return False
    if not any(_matches(path, name, pat) for pat in include):
        return False
    excludes = [*exclude, *(DEFAULT_EXCLUDE if default_excludes else ())]
    return not any(_matches(path, name, pat) for pat in excludes)
