"""Stored tools (every registered kind): registration with the config encrypted, lookups filtered by ACL in SQL."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.tools import kinds
from context_engine.tools.crypto import ConfigCipher
from context_engine.tools.errors import ToolConfigInvalid
from context_engine.tools.functions import FunctionTool
from context_engine.tools.models import ToolConfig

_VISIBLE = "(CAST(:caller AS text[]) IS NULL OR acl = '{}' OR acl && CAST(:caller AS text[]))"


@dataclass(frozen=True)
class ToolEntry:
    """A tool as listed: stored or function, without its config."""

    tool_id: str | None
    name: str
    kind: str
    call_name: str
    description: str
    parameters: dict[str, Any]
    acl: tuple[str, ...]
    requires_approval: bool
    created_at: datetime | None = None

    def public(self, *, trusted: bool) -> dict[str, Any]:
        """The listing a caller sees (the ACL only for a trusted caller)."""
        out: dict[str, Any] = {
            "tool_id": self.tool_id,
            "name": self.call_name,
            "tool_name": self.name,
            "kind": self.kind,
            "description": self.description,
            "parameters": self.parameters,
            "requires_approval": self.requires_approval,
        }
        if trusted:
            out["acl"] = list(self.acl)
        return out

    @classmethod
    def of_function(cls, tool: FunctionTool) -> ToolEntry:
        return cls(
            tool_id=None,
            name=tool.name,
            kind=kinds.FUNCTION,
            call_name=tool.call_name,
            description=tool.description,
            parameters=tool.parameters,
            acl=tool.acl,
            requires_approval=tool.requires_approval,
        )


async def insert(db: AsyncEngine, tool: ToolConfig, cipher: ConfigCipher) -> ToolEntry:
    """Check the config for its kind, encrypt it and store the tool; returns its entry."""
    if tool.kind == kinds.FUNCTION:
        raise ToolConfigInvalid("function tools are registered with register_function_tool(fn)")
    spec = kinds.get(tool.kind)
    if spec is None:  # unregistered since the ToolConfig was checked
        raise ToolConfigInvalid(f"invalid tool: kind: must be one of {', '.join(kinds.listed())}")
    parameters = spec.check_config(tool.config)
    if spec.check_registration is not None:
        await spec.check_registration(tool.config)  # its own connection, before a pooled one is taken
    tool_id = str(uuid.uuid4())
    blob = cipher.encrypt(tool.config, tool_id)
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "INSERT INTO ce_tools (id, name, kind, call_name, description, parameters, config, acl, "
                    "requires_approval) VALUES (:id, :name, :kind, :call_name, :description, "
                    "CAST(:parameters AS jsonb), :config, :acl, :requires_approval) RETURNING created_at"
                ),
                {
                    "id": tool_id,
                    "name": tool.name,
                    "kind": tool.kind,
                    "call_name": tool.call_name,
                    "description": tool.description,
                    "parameters": json.dumps(parameters),
                    "config": blob,
                    "acl": tool.acl,
                    "requires_approval": tool.requires_approval,
                },
            )
        ).one()
    return ToolEntry(
        tool_id=tool_id,
        name=tool.name,
        kind=tool.kind,
        call_name=tool.call_name,
        description=tool.description,
        parameters=parameters,
        acl=tuple(tool.acl),
        requires_approval=tool.requires_approval,
        created_at=row[0],
    )


async def visible(db: AsyncEngine, caller: tuple[str, ...] | None) -> list[ToolEntry]:
    """The stored tools ``caller`` may see (all for trusted), oldest first."""
    return [entry for entry, _ in await _select(db, caller, None)]


async def named(db: AsyncEngine, caller: tuple[str, ...] | None, call_name: str) -> list[tuple[ToolEntry, bytes]]:
    """The visible tools called ``call_name``, each with its encrypted config (one round trip)."""
    return await _select(db, caller, call_name)


async def _select(
    db: AsyncEngine, caller: tuple[str, ...] | None, call_name: str | None
) -> list[tuple[ToolEntry, bytes]]:
    config = "config" if call_name is not None else "NULL AS config"
    async with db.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id, name, kind, call_name, description, parameters, acl, requires_approval, created_at, "
                f"{config} FROM ce_tools WHERE {_VISIBLE} "
                "AND (CAST(:call_name AS text) IS NULL OR call_name = :call_name) ORDER BY created_at, id"
            ),
            {"caller": list(caller) if caller is not None else None, "call_name": call_name},
        )
        return [(_entry(r), bytes(r["config"] or b"")) for r in rows.mappings()]


async def sealed_mcp_config(db: AsyncEngine, tool_id: str) -> bytes | None:
    """The encrypted config of stored mcp tool ``tool_id`` (``None``: no such mcp tool)."""
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT config FROM ce_tools WHERE id = CAST(:id AS uuid) AND kind = 'mcp'"), {"id": tool_id}
            )
        ).first()
    return bytes(row.config) if row is not None else None


async def delete(db: AsyncEngine, tool_id: str, caller: tuple[str, ...] | None) -> bool:
    async with db.begin() as conn:
        gone = await conn.execute(
            text(f"DELETE FROM ce_tools WHERE id = :id AND {_VISIBLE} RETURNING id"),
            {"id": tool_id, "caller": list(caller) if caller is not None else None},
        )
        return gone.first() is not None


def _entry(row: Any) -> ToolEntry:
    return ToolEntry(
        tool_id=str(row["id"]),
        name=row["name"],
        kind=row["kind"],
        call_name=row["call_name"],
        description=row["description"],
        parameters=row["parameters"] or {},
        acl=tuple(row["acl"]),
        requires_approval=row["requires_approval"],
        created_at=row["created_at"],
    )
