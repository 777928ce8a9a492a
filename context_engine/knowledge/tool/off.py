"""Which actions this call can run, decided per call, and the fixed sentence an OFF action answers.

An action is on when its check in :data:`AVAILABLE` says so. The model-driven actions (``query_meta``, and
``compute`` / ``map_reduce`` without a host runner) and the graph actions are off until the engine
grows what they need; a host runner turns ``compute`` or ``map_reduce`` on whatever the settings.
"""

from __future__ import annotations

from collections.abc import Callable

from context_engine.knowledge.tool.call import ToolCall

OFF_SENTENCES: dict[str, str] = {
    "query_meta": (
        "query_meta is off: structured field extraction is not enabled on this deployment. "
        "Use search for the passages, or discover for the fields documents carry."
    ),
    "compute": (
        "compute is off: code execution is not enabled on this deployment. "
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


def _never(call: ToolCall) -> bool:
    return False


#: per action that can be off: whether this call can run it. An action missing here is always on;
#: turning one on is a check here plus its handler in ``dispatch.HANDLERS``.
AVAILABLE: dict[str, Callable[[ToolCall], bool]] = {
    "query_meta": _never,
    "compute": lambda call: call.compute is not None,
    "map_reduce": lambda call: call.map_reduce is not None,
    "get_neighbors": _never,
    "traverse": _never,
    "find_related": _never,
    "community_summary": _never,
}


def off_reason(action: str, call: ToolCall) -> str | None:
    """The OFF sentence for ``action`` on this call, or None when it can run."""
    check = AVAILABLE.get(action)
    if check is None or check(call):
        return None
    return OFF_SENTENCES[action]
