"""The dependency direction of docs/architecture.md, checked on every import in the tree.

Imports inside functions count too: they are the ones nothing else catches. A layer may import
itself, ``core`` and the layers listed for it; ``api`` (HTTP, CLI, evaluation) may import any.
The HTTP client (``client/``, the ``citewise_client`` distribution) stands outside the layers:
it imports nothing of citewise, and of the layers only ``api`` imports it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Folder -> installed package (pyproject's package-dir); core is the bare ``citewise``.
LAYERS = ("core", "connectors", "gateway", "index", "ingest", "retrieval", "api")
ALLOWED = {
    "core": set(),
    "connectors": set(),
    "gateway": set(),
    "index": set(),
    "ingest": {"connectors", "index"},
    "retrieval": {"index", "gateway"},
    "api": {"connectors", "gateway", "index", "ingest", "retrieval"},
}


def layer_of_module(name: str) -> str | None:
    """The layer a ``citewise...`` module name belongs to (None for other packages)."""
    parts = name.split(".")
    if parts[0] != "citewise":
        return None
    if len(parts) > 1 and parts[1] in LAYERS[1:]:
        return parts[1]
    return "core"


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an ``import`` or ``from ... import`` names, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations(root: Path) -> list[str]:
    """``path:line: layer imports module (layer)`` for each import against the direction."""
    out = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, module in imported_modules(tree):
                target = layer_of_module(module)
                if target is None or target == layer or target == "core":
                    continue
                if target not in ALLOWED[layer]:
                    rel = path.relative_to(root)
                    out.append(f"{rel}:{line}: {layer} imports {module} ({target})")
    return out


def client_violations(root: Path) -> list[str]:
    """``path:line: ...`` for each import across the client's boundary."""
    out = []
    for path in sorted((root / "client" / "citewise_client").rglob("*.py")):
        for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            if layer_of_module(module) is not None:
                out.append(f"{path.relative_to(root)}:{line}: the client imports {module}")
    for layer in LAYERS:
        if layer == "api":
            continue
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
                if module.split(".")[0] == "citewise_client":
                    out.append(f"{path.relative_to(root)}:{line}: {layer} imports {module} "
                               "(the HTTP client)")
    return out


def test_every_import_follows_the_dependency_direction():
    assert violations(ROOT) == []


def test_the_client_and_the_layers_stay_apart():
    assert client_violations(ROOT) == []


@pytest.mark.parametrize(("folder", "module"), [
    ("client/citewise_client", "citewise.errors"),
    ("retrieval", "citewise_client.models"),
])
def test_a_wrong_import_of_or_by_the_client_is_caught(tmp_path, folder, module):
    for name in (*LAYERS, "client/citewise_client"):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
    (tmp_path / folder / "wrong.py").write_text(f"def later():\n    import {module}\n")
    (found,) = client_violations(tmp_path)
    assert f"imports {module}" in found


def test_core_imports_nothing_of_the_layers_above():
    for path in (ROOT / "core").rglob("*.py"):
        for line, module in imported_modules(ast.parse(path.read_text())):
            assert layer_of_module(module) in (None, "core"), f"{path.name}:{line} {module}"


@pytest.mark.parametrize(
    ("layer", "module", "inside_a_function"),
    [
        ("connectors", "citewise.index.catalog", True),
        ("index", "citewise.retrieval.search", False),
        ("ingest", "citewise.retrieval.answer", True),
        ("retrieval", "citewise.ingest.pipeline", True),
        ("retrieval", "citewise.api.composition", False),
    ],
)
def test_a_wrong_import_is_caught(tmp_path, layer, module, inside_a_function):
    for name in LAYERS:
        (tmp_path / name).mkdir()
    body = (f"def later():\n    from {module} import x\n    return x\n" if inside_a_function
            else f"import {module}\n")
    (tmp_path / layer / "wrong.py").write_text(body)
    found = violations(tmp_path)
    assert len(found) == 1 and f"{layer} imports {module}" in found[0]


def test_every_package_folder_is_installed():
    """A package missing from pyproject's list works in the editable checkout and is missing
    from a wheel: list every folder that has an ``__init__.py``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: Path(folder) for name, folder in project["package-dir"].items()}
    expected = set()
    for name, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            expected.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert set(project["packages"]) == expected


def test_every_package_folder_of_the_client_is_installed():
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["tool"]["setuptools"]
    expected = {".".join(init.parent.relative_to(ROOT / "client").parts)
                for init in (ROOT / "client" / "citewise_client").rglob("__init__.py")}
    assert set(project["packages"]) == expected
