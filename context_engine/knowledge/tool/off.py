"""Which actions this call can run, decided per call, and the fixed sentence an OFF action answers.

An action is on when its check in :data:`AVAILABLE` says so. ``query_meta`` and ``map_reduce`` need a
configured ``llm``; ``compute`` also needs ``compute.enable_code_execution``, since it runs generated code.
A host runner turns ``compute`` or ``map_reduce`` on whatever the settings. The graph actions are on
where ``migrate --graph`` created the graph tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from context_engine.graph.schema import graph_enabled

if TYPE_CHECKING:
    from context_engine.engine import ContextEngine


class Capabilities(Protocol):
    """What decides whether an action can run: the engine's settings, the host's runners, the graph."""

    @property
    def engine(self) -> ContextEngine: ...
    @property
    def compute(self) -> Any: ...
    @property
    def map_reduce(self) -> Any: ...
    @property
    def graph_enabled(self) -> bool: ...


@dataclass(frozen=True)
class Deployment:
    """The capabilities of a deployment as a whole (a call's are the same, see ``ToolCall``)."""

    engine: ContextEngine
    compute: Any = None
    map_reduce: Any = None
    graph_enabled: bool = False

OFF_SENTENCES: dict[str, str] = {
    "query_meta": (
        "query_meta is off: no model is configured on this deployment to read structured fields. "
        "Use search for the passages, or discover for the fields documents carry."
    ),
    "compute": (
        "compute is off: code execution is not enabled on this deployment (or no model is configured). "
        "Quote the rows search finds instead of adding them up yourself."
    ),
    "map_reduce": (
        "map_reduce is off: no per-document model is available on this deployment. "
        "Use search, or read the documents with get_docs."
    ),
    "get_neighbors": "get_neighbors is off: this deployment has no knowledge graph. Use search for passages naming it.",
    "traverse": "traverse is off: this deployment has no knowledge graph. Use search for passages naming it.",
    "find_related": "find_related is off: this deployment has no knowledge graph. Use search instead.",
    "community_summary": "community_summary is off: this deployment has no knowledge graph. Use discover instead.",
}


def _has_llm(call: Capabilities) -> bool:
    return call.engine.config.llm is not None


def _compute_on(call: Capabilities) -> bool:
    """A host runner, or a model plus somewhere to run its code: the engine's ``code_runner`` or the
    built-in worker switched on (``compute.enable_code_execution``)."""
    runs_code = call.engine.code_runner is not None or call.engine.config.compute.enable_code_execution
    return call.compute is not None or (runs_code and _has_llm(call))


#: per action that can be off: whether this call can run it. An action missing here is always on;
#: turning one on is a check here plus its handler in ``dispatch.HANDLERS``.
AVAILABLE: dict[str, Callable[[Capabilities], bool]] = {
    "query_meta": _has_llm,
    "compute": _compute_on,
    "map_reduce": lambda call: call.map_reduce is not None or _has_llm(call),
    "get_neighbors": lambda call: call.graph_enabled,
    "traverse": lambda call: call.graph_enabled,
    "find_related": lambda call: call.graph_enabled,
    "community_summary": lambda call: call.graph_enabled,
}

#: the actions that read the knowledge graph (graph mode)
GRAPH_ACTIONS = frozenset({"get_neighbors", "traverse", "find_related", "community_summary"})


def off_reason(action: str, call: Capabilities) -> str | None:
    """The OFF sentence for ``action`` on this call (or deployment), or None when it can run."""
    check = AVAILABLE.get(action)
    if check is None or check(call):
        return None
    return OFF_SENTENCES[action]


def off_actions(capabilities: Capabilities) -> dict[str, str]:
    """Every action that cannot run here, with the sentence it answers."""
    return {action: sentence for action in AVAILABLE if (sentence := off_reason(action, capabilities)) is not None}


async def graph_available(engine: ContextEngine) -> bool:
    """Whether ``migrate --graph`` made the graph tables in this engine's database."""
    async with (await engine.database()).connect() as conn:
        return await graph_enabled(conn)
