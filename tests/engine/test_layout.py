"""The engine's layout (docs/engine.md, Modules): one cycle in the product, its oracle in the
tests, and functions short enough to read, or saying why not."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

ENGINE = REPO / "allocations" / "engine"


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _says_why(lines: list[str], fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the comment block just above the function (and its decorators) has a line
    ``# Long: <why>``."""
    at = min([fn.lineno, *(d.lineno for d in fn.decorator_list)]) - 2
    while at >= 0 and lines[at].lstrip().startswith("#"):
        if lines[at].lstrip().startswith(("# Long:", "# Long,")):
            return True
        at -= 1
    return False


def test_no_function_over_80_lines_without_a_comment_saying_why() -> None:
    """The whole app, not only the engine (migrations are generated, so they are left out)."""
    long: list[str] = []
    for path in sorted((REPO / "allocations").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        lines = path.read_text().splitlines()
        for fn in _functions(path):
            assert fn.end_lineno is not None
            if fn.end_lineno - fn.lineno + 1 > 80 and not _says_why(lines, fn):
                long.append(f"{path.relative_to(REPO)}:{fn.lineno} {fn.name}")
    assert long == []


def test_the_reference_cycle_lives_in_the_tests_only() -> None:
    """``allocate`` is the one cycle under allocations/; the reference it is compared with is
    never imported by product code."""
    importers = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "allocations").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom | ast.Import)
        and any(
            name.startswith("tests")
            for name in (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            )
        )
    ]
    assert importers == []
    cycles = [
        f"{path.name}:{node.name}"
        for path in sorted(ENGINE.glob("*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("allocate")
    ]
    assert cycles == ["cycle.py:allocate"]
