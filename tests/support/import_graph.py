"""The import graph of a package, read from its source with ``ast`` (STYLE §3).

Counts module-level and function-level imports alike (a function-level import is
a dependency that only hides a cycle); skips ``if TYPE_CHECKING:`` blocks (no
runtime import). ``from pkg.sub import name`` depends on ``pkg.sub`` (and on
``pkg.sub.name`` when that is a module); ``from pkg import sub`` depends on
``pkg`` too, because ``pkg/__init__.py`` runs first and may import the importer
back. Imports of the package root itself (its public API) are left out, the way
``../shared/tools/archcheck.py`` does.

Reusable for any layer contract: build the graph once with :func:`import_graph`,
then ask :func:`import_cycles` or filter the edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

__all__ = ["import_cycles", "import_graph", "module_names"]


def module_names(package_dir: Path) -> dict[str, Path]:
    """Map each dotted module name under ``package_dir`` to its file.

    Args:
        package_dir: The package folder (e.g. ``<repo>/flask_geneva``).

    Returns:
        ``{"flask_geneva.admin": .../admin/__init__.py, ...}``.
    """
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement outside ``if TYPE_CHECKING:`` blocks, at any depth."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Return ``{module: modules of the package it imports}`` (see the module doc).

    Args:
        package_dir: The package folder.

    Returns:
        One entry per module of the package; self-imports and imports of the
        package root are left out.
    """
    modules = module_names(package_dir)
    package = package_dir.name

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for target in targets:
                if target != package and not target.startswith(package + "."):
                    continue
                resolved = resolve(target)
                if resolved not in (None, package, name):
                    graph[name].add(resolved)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of 2+.

    Args:
        graph: ``{module: imported modules}`` as :func:`import_graph` returns.

    Returns:
        Each cycle's modules, sorted; the cycles sorted by their first module.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)
