"""The built-in tool kinds, one registration line each (see :mod:`context_engine.tools.kinds`)."""

from __future__ import annotations

from context_engine.tools import db_tool, http_tool, kinds, mcp_kind

kinds.register(http_tool.KIND)
kinds.register(db_tool.KIND)
kinds.register(mcp_kind.KIND)
