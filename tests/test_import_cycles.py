"""No import cycle among the modules of ``context_engine``, ``routing_core`` and ``adapters``.

The graph is read from the source with ``ast``, nothing is imported. The rule for an edge
``A -> B``: module ``A`` imports ``B`` in code that runs when ``A`` is imported, i.e. at module
level, including inside module-level ``try``/``if``/``with`` blocks, but not inside a function or
class body that runs later, and not under ``if TYPE_CHECKING:`` (never run). ``B`` is the most
specific module of the three packages the statement names: ``from p import x`` points at
``p.x`` when that is a module, else at ``p``. The packages a module sits in are not edges of
their own (Python initialises them first, and a package re-exporting its modules would otherwise
make every module a cycle with its package).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("context_engine", "routing_core", "adapters")


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported (see the module docstring)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += import_time_statements(node.body)
            found += import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += import_time_statements(block)
        elif isinstance(node, ast.With):
            found += import_time_statements(node.body)
    return found


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> nx.DiGraph:
    modules = module_files()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in import_time_statements(tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                source = _resolve(module, path, node)
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                while target and target not in modules:  # ``import a.b.c`` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph.add_edge(module, target)
    return graph


def describe_cycles(graph: nx.DiGraph) -> list[str]:
    """One line per strongly connected group: its modules and one shortest cycle through them."""
    lines = []
    for group in sorted((sorted(g) for g in nx.strongly_connected_components(graph) if len(g) > 1), key=len):
        start = group[0]
        loop = min(
            (nx.shortest_path(graph, nxt, start) for nxt in graph.successors(start) if nxt in group),
            key=len,
        )
        lines.append(f"{len(group)} modules {group}; e.g. {' -> '.join([start, *loop])}")
    return lines


def test_the_graph_sees_module_level_imports_and_nothing_else() -> None:
    graph = import_graph()
    assert graph.has_edge("adapters.fastapi", "routing_core.lifecycle")
    assert graph.has_edge("routing_core.lifecycle", "routing_core.router")
    # imported inside a function only (lazy on purpose): not an edge
    assert not graph.has_edge("context_engine.cli", "adapters.fastapi")


def test_a_cycle_is_found_and_named() -> None:
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    assert describe_cycles(graph) == ["3 modules ['a', 'b', 'c']; e.g. a -> b -> c -> a"]


def test_no_import_cycles() -> None:
    cycles = describe_cycles(import_graph())
    assert not cycles, "import cycles (module-level imports):\n" + "\n".join(cycles)
