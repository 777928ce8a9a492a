"""No import cycle among the modules of ``context_engine``, ``routing_core`` and ``adapters``, and no
module importing from a layer above it.

The graph is read from the source with ``ast``, nothing is imported. The rule for an edge
``A -> B``: module ``A`` has an import statement naming ``B`` anywhere, at module level, inside a
function or class body, or under ``if TYPE_CHECKING:``. An import put off into a function or kept
for type checking still says that ``A`` needs ``B``; a cycle through one is two modules that each
need the other, which is a layering fault however the imports are timed. ``B`` is the most
specific module of the three packages the statement names: ``from p import x`` points at ``p.x``
when that is a module, else at ``p``. The packages a module sits in are not edges of their own
(Python initialises them first, and a package re-exporting its modules would otherwise make every
module a cycle with its package); a module naming its package in an import is.
"""

from __future__ import annotations

import ast
import re
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


def import_statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of the module, wherever it sits (see the module docstring)."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


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
        for node in import_statements(tree):
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


def test_the_graph_sees_imports_wherever_they_sit() -> None:
    graph = import_graph()
    assert graph.has_edge("adapters.fastapi", "routing_core.lifecycle")  # module level
    assert graph.has_edge("routing_core.lifecycle", "routing_core.router")
    assert graph.has_edge("context_engine.retrieval.leg", "context_engine.config")  # under TYPE_CHECKING
    assert graph.has_edge("context_engine.tools.mcp_oauth", "context_engine.tools.mcp_oauth_store")  # in a function
    # ``from package import module`` points at the module, not at the package
    assert graph.has_edge("context_engine.ingest.formats.eml", "context_engine.ingest.formats.detect")
    assert not graph.has_edge("context_engine.ingest.formats.eml", "context_engine.ingest.formats")


def test_a_cycle_is_found_and_named() -> None:
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    assert describe_cycles(graph) == ["3 modules ['a', 'b', 'c']; e.g. a -> b -> c -> a"]


def test_no_import_cycles() -> None:
    cycles = describe_cycles(import_graph())
    assert not cycles, "import cycles (imports anywhere in a module):\n" + "\n".join(cycles)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_module_imports_from_a_layer_above_it() -> None:
    graph = import_graph()
    cli = "context_engine.cli"
    # the CLI is the top: one package, and nothing outside it imports it
    named_cli = [m for m in graph if re.fullmatch(r"cli|cli_\w+|\w+_cli", m.rsplit(".", 1)[-1])]
    assert [m for m in named_cli if not _inside(m, cli)] == []
    assert [(a, b) for a, b in graph.edges if _inside(b, cli) and not _inside(a, cli)] == []
    # the library has no web imports (only the CLI's ``serve`` starts an adapter); the HTTP
    # contract imports no adapter
    web = [(a, b) for a, b in graph.edges if _inside(b, "routing_core") or _inside(b, "adapters")]
    assert [(a, b) for a, b in web if _inside(a, "context_engine") and not _inside(a, cli)] == []
    assert [(a, b) for a, b in web if _inside(a, "routing_core") and _inside(b, "adapters")] == []
    # the settings sit below what reads them: they import errors, the provider registry and redaction only
    allowed = ("context_engine.errors", "context_engine.providers", "context_engine.redaction")
    read = sorted(b for _, b in graph.out_edges("context_engine.config"))
    assert [m for m in read if not any(_inside(m, top) for top in allowed)] == [], read
