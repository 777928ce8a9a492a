"""The knowledge tool over MCP (the ``mcp`` extra): ``create_mcp_app`` and ``context-engine mcp``."""

from __future__ import annotations

from context_engine.mcp.app import KnowledgeMcpApp, create_mcp_app, current_request

__all__ = ["KnowledgeMcpApp", "create_mcp_app", "current_request"]
