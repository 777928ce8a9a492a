"""The knowledge tool's public surface under one module name: its definition and its one call."""

from __future__ import annotations

from context_engine.knowledge.tool import (
    KNOWLEDGE_ACTIONS,
    TOOL_NAME,
    call_knowledge_tool,
    knowledge_tool_definition,
)

__all__ = ["KNOWLEDGE_ACTIONS", "TOOL_NAME", "call_knowledge_tool", "knowledge_tool_definition"]
