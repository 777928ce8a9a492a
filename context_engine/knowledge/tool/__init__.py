"""The knowledge tool: one tool, ``search_knowledge_base``, whose ``action`` picks what it does.

Three doors call one implementation (:func:`dispatch.run_knowledge_tool`): the engine method
``ContextEngine.search_knowledge_base``, :func:`call_knowledge_tool` for a host's own agent loop, and
the MCP tool of :func:`context_engine.mcp.create_mcp_app`. The host sets the caller's principals and
the scope ceiling; the model only ever supplies the arguments its action's record declares. A host
adds an action with :func:`context_engine.knowledge.tool.actions.register`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_engine.knowledge.tool.actions import KNOWLEDGE_ACTIONS
from context_engine.knowledge.tool.call import ComputeRunner, MapReduceRunner
from context_engine.knowledge.tool.definition import TOOL_NAME, knowledge_tool_definition
from context_engine.knowledge.tool.dispatch import run_knowledge_tool
from context_engine.knowledge.tool.engine_protocol import KnowledgeEngine
from context_engine.redaction import RedactionPolicy
from context_engine.storage.scope import UNSCOPED, Scope, narrow_to_ceiling, resolve_scope


async def call_knowledge_tool(
    engine: KnowledgeEngine,
    *,
    principals: Any,
    scope: Scope | Sequence[str] | None,
    redaction: RedactionPolicy | None = None,
    secret_key: str | bytes | None = None,
    compute: ComputeRunner | None = None,
    map_reduce: MapReduceRunner | None = None,
    **model_args: Any,
) -> dict[str, Any]:
    """Run what a model asked for. ``model_args`` are the model's arguments only (``action`` among them);
    ``principals`` is already resolved by the host and has no default, so no caller is ever invented."""
    action = model_args.pop("action", None)
    return await run_knowledge_tool(
        engine,
        action=action,
        principals=principals,
        scope=scope,
        redaction=redaction,
        secret_key=secret_key,
        compute=compute,
        map_reduce=map_reduce,
        model_args=model_args,
    )


__all__ = [
    "KNOWLEDGE_ACTIONS",
    "TOOL_NAME",
    "UNSCOPED",
    "Scope",
    "call_knowledge_tool",
    "knowledge_tool_definition",
    "narrow_to_ceiling",
    "resolve_scope",
]
