"""Which actions this call can run, decided per call, and the fixed sentence an OFF action answers.

An action is on when its check in :data:`AVAILABLE` says so. ``query_meta`` and ``map_reduce`` need a
configured ``llm``; ``compute`` also needs ``compute.enable_code_execution``, since it runs generated code.
A host runner turns ``compute`` or ``map_reduce`` on whatever the settings. The graph actions are on
where ``migrate --graph`` created the graph tables.
"""

from __future__ import annotations

from collections.abc import Callable

from context_engine.knowledge.tool.call import ToolCall

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


def _has_llm(call: ToolCall) -> bool:
    return call.engine.config.llm is not None


def _compute_on(call: ToolCall) -> bool:
    """A host runner, or the built-in worker switched on (``compute.enable_code_execution``) with a model."""
    return call.compute is not None or (call.engine.config.compute.enable_code_execution and _has_llm(call))


#: per action that can be off: whether this call can run it. An action missing here is always on;
#: turning one on is a check here plus its handler in ``dispatch.HANDLERS``.
AVAILABLE: dict[str, Callable[[ToolCall], bool]] = {
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


def off_reason(action: str, call: ToolCall) -> str | None:
    """The OFF sentence for ``action`` on this call, or None when it can run."""
    check = AVAILABLE.get(action)
    if check is None or check(call):
        return None
    return OFF_SENTENCES[action]
