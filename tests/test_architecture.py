"""The app's dependencies run one way (STYLE.md "Layout"; the engine's purity has its own test in
tests/engine/test_purity.py).

Every import counts, at the top of a module or inside a function: a late import only hides a
circle from Python, not from a reader. Imports for type checkers alone (``if TYPE_CHECKING:``)
do not run and are left out. Read from the sources with ``ast``, so the test imports
nothing and runs in a fraction of a second.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("allocations", "gpugov_site")
# Core: the model, the rules and the loop. Feature packages and the entry points (views, API,
# forms, Celery tasks, management commands) sit above it and use it, never the other way.
CORE = (
    "allocations.access",
    "allocations.backends",
    "allocations.choices",
    "allocations.engine",
    "allocations.models",
    "allocations.selectors",
    "allocations.services",
    "allocations.simulation",
)
ABOVE_CORE = (
    "allocations.api",
    "allocations.forms",
    "allocations.interop",
    "allocations.management",
    "allocations.reports",
    "allocations.tasks",
    "allocations.views",
    "allocations.whatif",
)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The project modules that module ``name`` imports (a package counts as its __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            # ``from a.b import c``: c is a module of a.b or a name in it; take the longest known.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                todo.extend(child.orelse)
                continue
            if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
                todo.extend(child.orelse)
                continue
            todo.append(child)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: set(_imports(name, path, known)) for name, path in modules.items()}


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_among_the_project_modules() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_core_modules_never_import_feature_packages_or_entry_points() -> None:
    graph = _graph()
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if _in(name, CORE)
        for target in targets
        if _in(target, ABOVE_CORE)
    )
    assert upward == []


def test_late_imports_count() -> None:
    """An import inside a function is an edge like any other."""
    graph = _graph()
    assert "allocations.services.loop" in graph["allocations.tasks"]
