"""Whether the graph tables exist: the one question every graph path asks first."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def graph_enabled(conn: AsyncConnection) -> bool:
    """Whether ``migrate --graph`` created the graph tables on this database."""
    return bool(await conn.scalar(text("SELECT to_regclass('ce_graph_entities') IS NOT NULL")))
