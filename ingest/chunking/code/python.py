"""Python: the standard library's ``ast`` gives exact definitions, decorators included."""

from __future__ import annotations

import ast

from citewise.ingest.chunking.code.units import Unit, fill_gaps, join_symbol

_PY_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def python_units(lines: list[str], text: str) -> list[Unit] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # not Python 3, or NUL bytes: read it by indentation
        return None
    return _py_body(tree.body, lines, 1, len(lines), None)


def _py_is_prefix(line: str) -> bool:
    return line.lstrip().startswith("#")


def _py_body(body: list[ast.stmt], lines: list[str], lo: int, hi: int,
             prefix: str | None) -> list[Unit]:
    units = [_py_unit(node, lines, prefix) for node in body]
    return fill_gaps(units, lines, lo, hi, _py_is_prefix)


def _py_unit(node: ast.stmt, lines: list[str], prefix: str | None) -> Unit:
    start = node.lineno
    decorators = getattr(node, "decorator_list", None)
    if decorators:
        start = min(start, *(d.lineno for d in decorators))
    end = node.end_lineno or node.lineno
    if isinstance(node, _PY_DEFS):
        kind = ("class" if isinstance(node, ast.ClassDef)
                else "async def" if isinstance(node, ast.AsyncFunctionDef) else "def")
        symbol = join_symbol(prefix, f"{kind} {node.name}")
        return Unit(start, end, symbol, True,
                     lambda: _py_body(node.body, lines, start, end, symbol),
                     container=kind == "class", declared=node.lineno)
    blocks = _py_blocks(node)
    if blocks:  # if/for/while/with/try/match at this level: split along its statements
        def children() -> list[Unit]:
            inner = [_py_unit(n, lines, prefix) for block in blocks for n in block]
            return fill_gaps(inner, lines, start, end, _py_is_prefix)
        return Unit(start, end, None, False, children)
    return Unit(start, end)


def _py_blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    blocks = [getattr(node, name, None) for name in ("body", "orelse", "finalbody")]
    blocks += [h.body for h in getattr(node, "handlers", [])]
    blocks += [c.body for c in getattr(node, "cases", [])]
    return [b for b in blocks if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]


class PythonStrategy:
    languages = frozenset({"python"})

    def units(self, language: str, lines: list[str], text: str) -> list[Unit] | None:
        return python_units(lines, text)
