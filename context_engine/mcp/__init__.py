"""The knowledge tool over MCP (the ``mcp`` extra): ``create_mcp_app`` (``context-engine mcp`` serves it).

The app is loaded on first access, so the CLI (and ``import context_engine``) work without the extra.
"""

from __future__ import annotations

from typing import Any

_APP_NAMES = ("KnowledgeMcpApp", "create_mcp_app", "current_request")


def __getattr__(name: str) -> Any:
    if name in _APP_NAMES:
        from context_engine.mcp import app

        return getattr(app, name)
    raise AttributeError(f"module 'context_engine.mcp' has no attribute {name!r}")


__all__ = ["KnowledgeMcpApp", "create_mcp_app", "current_request"]
