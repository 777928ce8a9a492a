"""One audit row per ``execute_tool`` call, written after redaction, each text capped at 50 KB."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

AUDIT_MAX_CHARS = 50 * 1024
_CUT_MARK = "…[cut at 50 KB]"


@dataclass
class CallRecord:
    """What one call did, as it is audited and handed to the ``on_tool_call`` hook."""

    call_name: str
    principals: list[str] | None
    started_at: datetime
    outcome: str = "error"
    tool_id: str | None = None
    kind: str | None = None
    approval_scope: str | None = None
    approval_id: str | None = None
    arguments: Any = None
    result: Any = None
    error_code: str | None = None
    error_message: str | None = None
    duration_ms: float = 0.0
    call_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def capped_json(value: Any) -> str | None:
    """``value`` as JSON text, cut to ``AUDIT_MAX_CHARS`` with a visible mark when longer."""
    if value is None:
        return None
    raw = json.dumps(value, ensure_ascii=False, default=str)
    if len(raw) <= AUDIT_MAX_CHARS:
        return raw
    return raw[: AUDIT_MAX_CHARS - len(_CUT_MARK)] + _CUT_MARK


async def write(db: AsyncEngine, record: CallRecord) -> None:
    async with db.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO ce_tool_calls (id, tool_id, call_name, kind, principals, approval_scope, approval_id, "
                "arguments, result, outcome, error_code, error_message, started_at, duration_ms) VALUES "
                "(:id, :tool_id, :call_name, :kind, :principals, :scope, :approval_id, :arguments, :result, "
                ":outcome, :error_code, :error_message, :started_at, :duration_ms)"
            ),
            {
                "id": record.call_id,
                "tool_id": record.tool_id,
                "call_name": record.call_name[:200],
                "kind": record.kind,
                "principals": record.principals,
                "scope": record.approval_scope,
                "approval_id": record.approval_id,
                "arguments": capped_json(record.arguments),
                "result": capped_json(record.result),
                "outcome": record.outcome,
                "error_code": record.error_code,
                "error_message": record.error_message,
                "started_at": record.started_at,
                "duration_ms": record.duration_ms,
            },
        )


async def recent(db: AsyncEngine, *, limit: int = 100, tool_id: str | None = None) -> list[dict[str, Any]]:
    """The latest audit rows, newest first (operators' view; rows are already redacted)."""
    async with db.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT * FROM ce_tool_calls "
                "WHERE (CAST(:tool_id AS uuid) IS NULL OR tool_id = CAST(:tool_id AS uuid)) "
                "ORDER BY started_at DESC LIMIT :limit"
            ),
            {"tool_id": tool_id, "limit": limit},
        )
        return [dict(r) for r in rows.mappings()]
