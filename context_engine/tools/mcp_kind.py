"""The ``mcp`` tool kind: a plain call (:mod:`~context_engine.tools.mcp_tool`), or, for a server that
requires OAuth, one with the tool's stored tokens (:mod:`~context_engine.tools.mcp_oauth`).

Kept above both modules so that neither imports the other to choose.
"""

from __future__ import annotations

from typing import Any

from context_engine.tools import mcp_oauth, mcp_tool
from context_engine.tools.kinds import KindContext, ToolKindSpec


async def _call(config: dict[str, Any], arguments: dict[str, Any], context: KindContext) -> Any:
    if mcp_oauth.uses_oauth(config):
        return await mcp_oauth.call(
            context.db, context.secret_key, str(context.tool_id), config, arguments,
            resolver=context.resolver, http_client_factory=context.http_client_factory,
        )
    return await mcp_tool.call(config, arguments, resolver=context.resolver)


KIND = ToolKindSpec(
    name="mcp",
    call_prefix="mcp_",
    summary="one tools/call on a remote MCP server",
    check_config=mcp_tool.check_config,
    call=_call,
)
