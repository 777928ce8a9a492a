"""``knowledge_tool_definition()``: the tool as data, for a host's own agent loop and for MCP.

The description carries the decision rules once; its list of actions and the input schema come
from the action records.
Given the engine (and the host's runners), the description marks OFF exactly the actions this
deployment cannot run, so the model is never told an action is off when it runs, or on when it
refuses; without one it marks none and says an off action answers so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_engine.knowledge.tool.actions import actions, input_schema, off_actions
from context_engine.knowledge.tool.capabilities import Deployment, graph_available
from context_engine.knowledge.tool.engine_protocol import KnowledgeEngine

TOOL_NAME = "search_knowledge_base"

_RULES = """\
Read the documents this conversation may use. Pick what to do with `action`.

Rules:
- Call discover first when you do not know what is in scope; use the real document ids, sheet, column \
and section names it returns.
- document_id is a system id from discover, list or a search hit. An invoice number, SKU or other code \
written inside a document goes in a search query, sent alone (for example "2525").
- For a figure from spreadsheets (a total, an average, a count, a ranking) use compute, never a sum of \
search hits: hits are excerpts.
- To read around a search hit, call get_chunks with start set to the hit's chunk_idx.
- When an answer carries next_page or next_action, that is the next call, already filled in: make it \
rather than guessing.
- When an answer has "success": false, its "error" says what to change; follow it. An action this \
deployment has switched off answers with a sentence saying so.

Actions:
"""

#: the sentence the MCP door adds: what it serves is filtered by the caller's permissions
MCP_SCOPE_SENTENCE = "Results are limited to the documents the calling user is permitted to read."


def description(off: Mapping[str, str] | None = None) -> str:
    lines = []
    for action in actions():
        sentence = (off or {}).get(action.name)
        suffix = f" (OFF: {sentence})" if sentence else ""
        lines.append(f"- {action.name}: {action.purpose}{suffix}")
    return _RULES + "\n".join(lines)


def knowledge_tool_definition(
    engine: KnowledgeEngine | None = None, *, compute: Any = None, map_reduce: Any = None, graph: bool = False
) -> dict[str, Any]:
    """``{"name", "description", "input_schema", "annotations"}``.

    With ``engine`` (plus the host's ``compute`` / ``map_reduce`` runners, and ``graph=True`` where
    ``migrate --graph`` made the graph tables; :func:`deployment_definition` looks that up) the
    description marks OFF what this deployment cannot run. ``readOnlyHint`` is false on purpose: most
    actions only read, but ``compute`` runs generated code.
    """
    off = None if engine is None else off_actions(Deployment(engine, compute, map_reduce, graph))
    return {
        "name": TOOL_NAME,
        "description": description(off),
        "input_schema": input_schema(),
        "annotations": {"readOnlyHint": False, "openWorldHint": False},
    }


async def deployment_definition(
    engine: KnowledgeEngine, *, compute: Any = None, map_reduce: Any = None
) -> dict[str, Any]:
    """:func:`knowledge_tool_definition` for ``engine`` as it is now, the graph looked up in its database."""
    return knowledge_tool_definition(
        engine, compute=compute, map_reduce=map_reduce, graph=await graph_available(engine)
    )
