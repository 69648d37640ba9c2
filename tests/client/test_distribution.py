"""citewise-client is a light distribution: an application that uses the client or a retriever
installs httpx and pydantic (and its framework), never torch, the index or citewise itself.

The wheel is built from ``client/`` offline (``pip wheel --no-deps --no-build-isolation``, with
the setuptools already here) and installed with pip into a folder of its own. It then runs in
an interpreter that sees only the standard library, that folder and the distributions its
requirements name, followed recursively through their own metadata and linked from this
environment: no site-packages, so an import of citewise or torch anywhere in the client (or in
what it needs) fails there. In that interpreter the client and the LangChain retriever search a
real server.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "client"
# What the light distribution exists to keep out of an application.
HEAVY = {"torch", "sentence-transformers", "transformers", "qdrant-client", "qdrant-edge-py",
         "citewise", "unstructured"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("client-wheel")
    # Built from a copy: setuptools writes build/ and egg-info beside the sources it builds.
    source = shutil.copytree(CLIENT, work / "client", ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    pip(["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(work / "dist"),
         str(source)])
    (built,) = (work / "dist").glob("citewise_client-*.whl")
    return built


def pip(args: list[str]) -> None:
    run = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"pip {' '.join(args)}\n{run.stdout}\n{run.stderr}"


def requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(z.read(name).decode())
    return [Requirement(text) for text in metadata.get_all("Requires-Dist") or []]


def needed(requirement: Requirement, extras: set[str]) -> bool:
    return requirement.marker is None or any(
        requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def closure(roots: list[Requirement], extras: set[str]) -> set[str]:
    """The distributions ``roots`` need (with ``extras``), and theirs, as installed here."""
    found: set[str] = set()
    todo = [(r.name, set(r.extras)) for r in roots if needed(r, extras)]
    while todo:
        name, wanted = todo.pop()
        key = f"{canonicalize_name(name)}[{','.join(sorted(wanted))}]"
        if key in found:
            continue
        found.add(key)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if needed(requirement, wanted):
                todo.append((requirement.name, set(requirement.extras)))
    return {key.split("[")[0] for key in found}


def link_distributions(names: set[str], folder: Path) -> None:
    """Each distribution's top-level modules (and metadata), linked into ``folder``."""
    folder.mkdir()
    for name in names:
        distribution = importlib.metadata.distribution(name)
        for top in {f.parts[0] for f in distribution.files or [] if f.parts[0] != ".."}:
            target = folder / top
            if top.endswith(".pth") or top == "__pycache__" or target.exists():
                continue
            target.symlink_to(distribution.locate_file(top))


def test_the_wheel_requires_httpx_and_pydantic_and_the_frameworks_as_extras(wheel):
    needs = requirements(wheel)
    base = {canonicalize_name(r.name) for r in needs if needed(r, set())}
    assert base == {"httpx", "pydantic"}
    for extra, framework in (("langchain", "langchain-core"),
                             ("llamaindex", "llama-index-core")):
        with_extra = {canonicalize_name(r.name) for r in needs if needed(r, {extra})}
        assert with_extra == base | {framework}
    everything = closure(needs, {"langchain", "llamaindex"})
    assert not everything & HEAVY, sorted(everything & HEAVY)
    with zipfile.ZipFile(wheel) as z:
        packages = {n.split("/")[0] for n in z.namelist() if not n.split("/")[0].endswith(
            ".dist-info")}
    assert packages == {"citewise_client"}


def test_installed_alone_it_imports_and_searches_without_citewise_or_torch(wheel, server,
                                                                           tmp_path):
    site = tmp_path / "site"
    pip(["install", "--no-deps", "--no-index", "--target", str(site), str(wheel)])
    deps = tmp_path / "deps"
    link_distributions(closure(requirements(wheel), {"langchain"}), deps)
    script = textwrap.dedent(f"""
        import importlib.util, json, sys
        sys.path[:0] = [{str(site)!r}, {str(deps)!r}]
        from citewise_client import CitewiseClient
        from citewise_client.langchain import CitewiseRetriever

        key = {server.keys["reader"]!r}
        hits = CitewiseClient({server.url!r}, key).search("redis failover", top_k=1).results
        docs = CitewiseRetriever(base_url={server.url!r}, api_key=key, top_k=1).invoke(
            "redis failover")
        print(json.dumps({{
            "client": __import__("citewise_client").__file__,
            "path": hits[0].path, "citation": docs[0].metadata["citation"],
            "importable": [m for m in ("citewise", "torch", "sentence_transformers",
                                       "qdrant_client") if importlib.util.find_spec(m)],
            "loaded": sorted({{m.split(".")[0] for m in sys.modules}} & {{
                "citewise", "torch", "sentence_transformers", "qdrant_client"}}),
        }}))
    """)
    # -I: no PYTHONPATH, no user site, not the working folder; -S: no site-packages at all.
    run = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path,
                         env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["client"].startswith(str(site))
    assert out["path"] == "runbooks/redis-failover.md"
    assert out["citation"].startswith("kb/runbooks/redis-failover.md:")
    assert out["importable"] == [] and out["loaded"] == []


def test_the_llamaindex_retriever_imports_with_its_extra_alone(wheel, tmp_path):
    site = tmp_path / "site"
    pip(["install", "--no-deps", "--no-index", "--target", str(site), str(wheel)])
    deps = tmp_path / "deps"
    link_distributions(closure(requirements(wheel), {"llamaindex"}), deps)
    script = (f"import sys, importlib.util; sys.path[:0] = [{str(site)!r}, {str(deps)!r}]\n"
              "from citewise_client.llamaindex import CitewiseRetriever\n"
              "assert not importlib.util.find_spec('citewise'), 'citewise is importable'\n"
              "assert not importlib.util.find_spec('torch'), 'torch is importable'\n"
              "print(CitewiseRetriever.__module__)")
    run = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path,
                         env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "citewise_client.llamaindex"


def test_citewise_requires_this_very_client():
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert client["version"] == main["version"]
    pinned = [Requirement(r) for r in main["dependencies"]
              if canonicalize_name(Requirement(r).name) == "citewise-client"]
    assert [str(r.specifier) for r in pinned] == [f"=={client['version']}"]
    test_extra = [Requirement(r) for r in main["optional-dependencies"]["test"]]
    assert any(canonicalize_name(r.name) == "citewise-client" and
               r.extras == {"langchain", "llamaindex"} for r in test_extra)
