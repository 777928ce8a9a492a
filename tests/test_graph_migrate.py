"""The graph tables exist only after ``migrate(..., graph=True)``; a plain migrate never creates them."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import OPTIONAL_REVISIONS, migrate, revision_files

GRAPH_TABLES = {
    "ce_graph_entities",
    "ce_graph_mentions",
    "ce_graph_relationships",
    "ce_graph_communities",
    "ce_graph_community_entities",
    "ce_graph_community_chunks",
}


async def _state(db: AsyncEngine) -> tuple[set[str], set[str]]:
    async with db.connect() as conn:
        tables = set((await conn.execute(text("SELECT tablename FROM pg_tables"))).scalars())
        applied = set((await conn.execute(text("SELECT id FROM ce_schema_migrations"))).scalars())
    return tables & GRAPH_TABLES, applied


async def test_graph_revision_is_applied_only_on_request(database_url: str) -> None:
    assert "0011_graph" in {p.stem for p in revision_files()} and OPTIONAL_REVISIONS["0011_graph"] == "graph"
    db = create_async_engine(to_driver_url(database_url))
    try:
        plain = await migrate(db, dim=8, announce=lambda _line: None)
        assert "0011_graph" not in plain.applied
        assert await _state(db) == (set(), set(plain.applied))

        lines: list[str] = []
        graph = await migrate(db, dim=8, announce=lines.append, graph=True)
        assert graph.applied == ["0011_graph"]
        assert graph.indexes_built and all(name.startswith("ix_ce_graph_") for name in graph.indexes_built)
        tables, applied = await _state(db)
        assert tables == GRAPH_TABLES and "0011_graph" in applied

        # applied once, then kept (and repaired) by every later run, with or without the flag
        assert (await migrate(db, dim=8, announce=lines.append, graph=True)).applied == []
        again = await migrate(db, dim=8, announce=lines.append)
        assert again.applied == [] and again.indexes_built == []
        assert (await _state(db))[0] == GRAPH_TABLES
    finally:
        await db.dispose()
