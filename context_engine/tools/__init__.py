"""Governed tool execution: http, db, mcp and function tools behind one path.

A tool is registered once (its config AES-256-GCM encrypted under ``secret_key``), seen only by
the principals its ACL names, gated by a single-use approval when it asks for one, cut to a result
budget, and audited on every call after redaction. The engine's ``register_tool``,
``register_function_tool``, ``list_tools``, ``search_tools``, ``delete_tool`` and
``execute_tool`` are thin calls into this package.

Importing this package needs only pydantic; the ``tools`` extra (``cryptography``, ``jsonschema``)
is needed to register or run http/db/mcp tools, and the ``mcp`` extra to run mcp tools.
"""

from __future__ import annotations

from typing import Any, Literal

from context_engine.errors import InvalidCursor
from context_engine.tools.errors import (
    AmbiguousToolError,
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    EgressRefused,
    FixedParameterOverride,
    SecretKeyRequired,
    ToolArgumentsInvalid,
    ToolConfigInvalid,
    ToolExecutionFailed,
    ToolNotFound,
    ToolRoleRefused,
    ToolTimeout,
)
from context_engine.tools.models import ApprovalRecord, ToolConfig, ToolKind, ToolPage
from context_engine.tools.shaping import format_result, rows_to_tsv


async def resolve_approval(
    engine: Any, approval_id: str, decision: Literal["approved", "denied"], *, approver: str | None = None
) -> ApprovalRecord:
    """Approve or deny a pending approval of ``engine``; the approved call then runs exactly once."""
    return await engine.resolve_tool_approval(approval_id, decision, approver=approver)


__all__ = [
    "AmbiguousToolError",
    "ApprovalAlreadyResolved",
    "ApprovalExpired",
    "ApprovalNotFound",
    "ApprovalRecord",
    "EgressRefused",
    "FixedParameterOverride",
    "InvalidCursor",
    "SecretKeyRequired",
    "ToolArgumentsInvalid",
    "ToolConfig",
    "ToolConfigInvalid",
    "ToolExecutionFailed",
    "ToolKind",
    "ToolNotFound",
    "ToolPage",
    "ToolRoleRefused",
    "ToolTimeout",
    "format_result",
    "resolve_approval",
    "rows_to_tsv",
]
