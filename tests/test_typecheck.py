"""The type checker over the whole tree, with pyproject's settings: zero errors.

``tests/typecheck.py`` lays the folders out as the installed ``citewise`` packages and runs mypy
there (``make typecheck`` runs it alone); this test is what puts it in ``make test`` and CI.
"""

from __future__ import annotations

from pathlib import Path

from tests.typecheck import ROOT, run_mypy


def test_the_tree_has_no_type_errors():
    status, report = run_mypy(ROOT)
    assert status == 0, f"mypy found type errors (make typecheck shows them):\n{report}"
    assert report.startswith("Success: no issues found"), report


def test_imports_across_the_folders_resolve_and_errors_name_the_checkout_path(tmp_path: Path):
    """``citewise.numbers`` lives in ``core/``, ``citewise.index.use`` in ``index/``: mypy sees
    the type of what the import names (no "cannot find module") and the error names the file
    as it is in the checkout."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\n'
        'package-dir = { "citewise" = "core", "citewise.index" = "index" }\n'
        '[tool.mypy]\nstrict = true\n')
    for folder in ("core", "index"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "core" / "numbers.py").write_text("def count() -> int:\n    return 1\n")
    (tmp_path / "index" / "use.py").write_text(
        "from citewise.numbers import count\n\nlabel: str = count()\n")

    status, report = run_mypy(tmp_path)

    assert status == 1, report
    assert report.splitlines()[0] == (
        'index/use.py:3: error: Incompatible types in assignment (expression has type "int", '
        'variable has type "str")  [assignment]'), report
