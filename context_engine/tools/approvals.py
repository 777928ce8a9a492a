"""The single-use approval state machine: pending -> approved | denied | expired; approved -> consumed once.

A gated call first tries to claim an approved record for the same request (same tool, call name
and arguments) in the same ``approval_scope`` opened by the same caller or by one whose principals
overlap the caller's (a record opened by a trusted caller carries none and binds no caller). The claim is
one ``UPDATE ... WHERE status = 'approved' RETURNING``, so of any number of concurrent claimants
exactly one wins. Without a claim the call opens (or joins) the pending record for the request.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.tools.errors import ApprovalAlreadyResolved, ApprovalExpired, ApprovalNotFound
from context_engine.tools.models import ApprovalRecord

DEFAULT_TTL = timedelta(hours=1)
DECISIONS = ("approved", "denied")


def request_hash(tool_id: str | None, call_name: str, arguments: dict[str, Any]) -> str:
    """One request's identity: the tool, its call name and the canonical JSON of its arguments."""
    canonical = json.dumps(
        {"tool_id": tool_id, "call_name": call_name, "arguments": arguments},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def principals_key(caller: tuple[str, ...] | None) -> str:
    return "*trusted*" if caller is None else json.dumps(sorted(set(caller)))


async def claim(db: AsyncEngine, digest: str, scope: str, caller: tuple[str, ...] | None) -> str | None:
    """Consume one approved, unexpired record for this request; its id, or None if there is none."""
    async with db.begin() as conn:
        row = await conn.execute(
            text(
                "UPDATE ce_tool_approvals SET status = 'consumed', consumed_at = now() "
                "WHERE id = (SELECT id FROM ce_tool_approvals "
                "  WHERE request_hash = :h AND approval_scope = :s AND status = 'approved' AND expires_at > now() "
                "    AND (principals IS NULL OR CAST(:caller AS text[]) IS NULL OR principals_key = :k "
                "         OR principals && CAST(:caller AS text[])) "
                "  ORDER BY resolved_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "AND status = 'approved' RETURNING id"
            ),
            {
                "h": digest,
                "s": scope,
                "k": principals_key(caller),
                "caller": list(caller) if caller is not None else None,
            },
        )
        found = row.scalar_one_or_none()
    return str(found) if found is not None else None


async def open_pending(
    db: AsyncEngine,
    *,
    digest: str,
    scope: str,
    caller: tuple[str, ...] | None,
    tool_id: str | None,
    call_name: str,
    arguments_text: str,
    ttl: timedelta = DEFAULT_TTL,
) -> ApprovalRecord:
    """The pending record for this request in this scope, created if there is none (or it expired)."""
    key = principals_key(caller)
    async with db.begin() as conn:
        # an expired pending record must not block a fresh one
        await conn.execute(
            text(
                "UPDATE ce_tool_approvals SET status = 'expired', resolved_at = now() "
                "WHERE request_hash = :h AND approval_scope = :s AND principals_key = :k "
                "AND status = 'pending' AND expires_at <= now()"
            ),
            {"h": digest, "s": scope, "k": key},
        )
        await conn.execute(
            text(
                "INSERT INTO ce_tool_approvals (id, tool_id, call_name, request_hash, approval_scope, principals, "
                "principals_key, arguments, status, expires_at) "
                "VALUES (:id, :tool_id, :call_name, :h, :s, :p, :k, :args, 'pending', now() + :ttl) "
                "ON CONFLICT (request_hash, approval_scope, principals_key) WHERE status = 'pending' DO NOTHING"
            ),
            {
                "id": str(uuid.uuid4()),
                "tool_id": tool_id,
                "call_name": call_name,
                "h": digest,
                "s": scope,
                "p": list(caller) if caller is not None else None,
                "k": key,
                "args": arguments_text,
                "ttl": ttl,
            },
        )
        row = (
            (
                await conn.execute(
                    text(
                        "SELECT * FROM ce_tool_approvals WHERE request_hash = :h AND approval_scope = :s "
                        "AND principals_key = :k AND status = 'pending'"
                    ),
                    {"h": digest, "s": scope, "k": key},
                )
            )
            .mappings()
            .one()
        )
    return _record(row)


async def resolve(db: AsyncEngine, approval_id: str, decision: str, approver: str | None) -> ApprovalRecord:
    """Approve or deny a pending, unexpired record; anything else is refused with a precise code."""
    if decision not in DECISIONS:
        raise InvalidRequest("decision must be 'approved' or 'denied'")
    if approver is not None and (not isinstance(approver, str) or not approver.strip()):
        raise InvalidRequest("approver must be a non-empty string")
    try:
        record_id = str(uuid.UUID(str(approval_id)))
    except ValueError:
        raise ApprovalNotFound() from None
    async with db.begin() as conn:
        row = (
            (
                await conn.execute(
                    text(
                        "UPDATE ce_tool_approvals SET status = :d, approver = :a, resolved_at = now() "
                        "WHERE id = :id AND status = 'pending' AND expires_at > now() RETURNING *"
                    ),
                    {"d": decision, "a": approver, "id": record_id},
                )
            )
            .mappings()
            .one_or_none()
        )
        if row is not None:
            return _record(row)
        current = (
            (
                await conn.execute(
                    text("SELECT status, expires_at <= now() AS expired FROM ce_tool_approvals WHERE id = :id"),
                    {"id": record_id},
                )
            )
            .mappings()
            .one_or_none()
        )
    if current is None:
        raise ApprovalNotFound()
    if current["status"] == "expired" or (current["status"] == "pending" and current["expired"]):
        raise ApprovalExpired("this approval expired before it was resolved; call the tool again to ask anew")
    raise ApprovalAlreadyResolved(f"this approval was already resolved (status {current['status']})")


async def get(db: AsyncEngine, approval_id: str) -> ApprovalRecord:
    try:
        record_id = str(uuid.UUID(str(approval_id)))
    except ValueError:
        raise ApprovalNotFound() from None
    async with db.connect() as conn:
        row = (
            (await conn.execute(text("SELECT * FROM ce_tool_approvals WHERE id = :id"), {"id": record_id}))
            .mappings()
            .one_or_none()
        )
    if row is None:
        raise ApprovalNotFound()
    return _record(row)


def _record(row: Any) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=str(row["id"]),
        tool_id=str(row["tool_id"]) if row["tool_id"] is not None else None,
        call_name=row["call_name"],
        approval_scope=row["approval_scope"],
        status=row["status"],
        approver=row["approver"],
        expires_at=row["expires_at"],
        created_at=row["created_at"],
        resolved_at=row["resolved_at"],
        arguments=json.loads(row["arguments"]) if row["arguments"] else None,
        principals=list(row["principals"]) if row["principals"] is not None else None,
    )
