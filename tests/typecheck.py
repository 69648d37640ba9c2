"""mypy over the installed packages of this checkout, with the settings of pyproject.toml.

The folders are packages only through pyproject's ``package-dir`` (``core/`` is ``citewise``,
``index/`` is ``citewise.index``, ...), which the editable install maps with an import hook
that mypy does not run (nor for ``client/``'s ``citewise_client``). So this lays the installed
tree out under ``build/typecheck/`` as symbolic links to the folders (always the files of the
checkout, never copies), runs mypy on its top-level packages there, and writes the paths it
reports back as the checkout's paths (``citewise/index/catalog.py`` -> ``index/catalog.py``).

``make typecheck`` runs this file; ``tests/test_typecheck.py`` runs it in ``make test``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The distributions built from this checkout (the Makefile installs both): citewise, and the
# light citewise-client in client/.
DISTRIBUTIONS = (".", "client")


def package_dirs(root: Path) -> dict[str, Path]:
    """Package -> folder for each distribution: from its ``[tool.setuptools] package-dir``, or
    its listed packages at its root where it maps none."""
    found = {}
    for where in DISTRIBUTIONS:
        project = root / where / "pyproject.toml"
        if not project.exists():
            continue
        setuptools = tomllib.loads(project.read_text())["tool"]["setuptools"]
        mapped = setuptools.get("package-dir") or {
            name: name.replace(".", "/") for name in setuptools["packages"]}
        found.update({name: root / where / folder for name, folder in mapped.items()})
    return found


def lay_out(root: Path, tree: Path) -> dict[str, Path]:
    """Build the installed layout under ``tree`` as links into ``root``; return the prefix of
    each package's paths in mypy's output (relative to ``tree``) -> its folder."""
    if tree.exists():
        shutil.rmtree(tree)
    dirs = package_dirs(root)
    prefixes = {}
    # Shallow packages first: a package's folder is linked whole unless another package is
    # mapped inside it, in which case it is a real folder holding a link per entry.
    for name in sorted(dirs, key=lambda n: n.count(".")):
        target = tree.joinpath(*name.split("."))
        nested = {other.split(".")[name.count(".") + 1]
                  for other in dirs if other.startswith(name + ".")}
        if nested:
            target.mkdir(parents=True)
            for entry in dirs[name].iterdir():
                if entry.name in nested:
                    raise SystemExit(f"{entry} hides package {name}.{entry.name}: rename one")
                if entry.name != "__pycache__":
                    (target / entry.name).symlink_to(entry)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(dirs[name], target_is_directory=True)
        prefixes[target.relative_to(tree).as_posix() + "/"] = dirs[name]
    return prefixes


def to_checkout(output: str, prefixes: dict[str, Path], root: Path) -> str:
    """mypy's output with each ``citewise/...`` path replaced by the checkout's path."""
    # Longest prefix first, so that citewise/index/ wins over citewise/.
    ordered = sorted(prefixes, key=len, reverse=True)
    pattern = re.compile("^(" + "|".join(re.escape(p) for p in ordered) + ")", re.MULTILINE)

    def local(match: re.Match[str]) -> str:
        folder = prefixes[match.group(1)]
        return folder.relative_to(root).as_posix() + "/"

    return pattern.sub(local, output)


def run_mypy(root: Path = ROOT, *, build: Path | None = None) -> tuple[int, str]:
    """mypy's exit status and its report, with the checkout's paths. The tree and mypy's cache
    stay in ``build/typecheck/`` so that a second run only checks what changed."""
    build = build or root / "build" / "typecheck"
    tree = build / "tree"
    prefixes = lay_out(root, tree)
    packages = [arg for name in package_dirs(root) if "." not in name for arg in ("-p", name)]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"),
         "--cache-dir", str(build / "mypy_cache"), *packages],
        cwd=tree, capture_output=True, text=True,
        # No MYPYPATH from the caller's shell: the tree is the one place citewise comes from.
        env={k: v for k, v in os.environ.items() if k != "MYPYPATH"},
    )
    return done.returncode, to_checkout(done.stdout + done.stderr, prefixes, root)


if __name__ == "__main__":
    status, report = run_mypy()
    print(report, end="")
    sys.exit(status)
