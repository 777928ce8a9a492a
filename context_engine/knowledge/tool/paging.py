"""Cursors for ``discover`` and ``list``, bound to the query that made them.

A cursor carries the keyset of the last row (created_at, id) and a fingerprint of the action and
the narrowed scope, so a cursor sent back with another action or another scope is refused instead of
silently paging a different listing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from context_engine.knowledge.tool import reads
from context_engine.knowledge.tool.call import Narrowed, Refusal, ToolCall


def _fingerprint(action: str, scope: Narrowed) -> str:
    raw = json.dumps([action, scope.source_ids, scope.document_ids], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def encode(action: str, scope: Narrowed, row: dict[str, Any]) -> str:
    body = {"f": _fingerprint(action, scope), "at": row["created_at"].isoformat(), "id": str(row["id"])}
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(action: str, scope: Narrowed, cursor: str) -> tuple[str, str]:
    """The keyset to continue after, or a refusal that says how to start over."""
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        datetime.fromisoformat(body["at"])
        keyset = (str(body["at"]), str(uuid.UUID(body["id"])))
        fingerprint = str(body["f"])
    except (ValueError, TypeError, KeyError):
        raise Refusal(
            f"cursor is not one this tool gave out. Send the next_cursor of the previous {action} page unchanged, "
            f"or call {action} without cursor to start from the first page.",
            next_action={"action": action},
        ) from None
    if fingerprint != _fingerprint(action, scope):
        raise Refusal(
            f"this cursor belongs to another query (another action, source_ids or document_ids). Page with the "
            f"same arguments as the call that returned it, or call {action} without cursor to start over.",
            next_action={"action": action},
        )
    return keyset


@dataclass(frozen=True)
class DocumentPage:
    """One page of the documents a ``discover`` or ``list`` call may see, and whether more follow."""

    action: str
    scope: Narrowed
    rows: list[dict[str, Any]]
    more: bool

    def continuation(self, call: ToolCall) -> dict[str, Any]:
        """``next_cursor`` and the ``next_page`` call that reads on, when more rows follow."""
        if not (self.more and self.rows):
            return {}
        cursor = encode(self.action, self.scope, self.rows[-1])
        return {"next_cursor": cursor, "next_page": {"action": self.action, **call.paging_args(), "cursor": cursor}}


async def document_page(call: ToolCall, action: str, default_limit: int) -> DocumentPage:
    """The page of visible documents the call's ``limit`` and ``cursor`` ask for (one row more is
    read to learn whether another page follows)."""
    scope = call.narrowed()
    limit = call.args.get("limit", default_limit)
    after = decode(action, scope, call.args["cursor"]) if "cursor" in call.args else None
    db = await call.engine.database()
    rows = await reads.document_page(db, call.principals, scope, limit=limit + 1, after=after)
    return DocumentPage(action, scope, rows[:limit], len(rows) > limit)
