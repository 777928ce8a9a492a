"""The vector leg's forced HNSW scan on an autocommit connection (the search path's): its settings
last for its own statement only, and a failure inside it leaves the pooled connection idle and clean,
on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import psycopg
import pytest
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.retrieval import planner
from context_engine.retrieval.legs.vector import _forced_index_scan, index_order
from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import migrate
from context_engine.storage.vectors import vector_literal
from tests.test_acl_planner import insert_clustered as insert_rows

DIM = 32


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An autocommit pool of one connection, so every call below reuses the same server session."""
    setup = create_async_engine(to_driver_url(database_url), pool_size=1)
    try:
        await migrate(setup, dim=DIM)
    finally:
        await setup.dispose()
    insert_rows(database_url, np.ones(DIM).tolist(), crowd=60, far=5)
    db = create_async_engine(to_driver_url(database_url), pool_size=1, max_overflow=0, isolation_level="AUTOCOMMIT")
    try:
        yield db
    finally:
        await db.dispose()


def _scan(vector: list[float]) -> TextClause:
    return text(
        "SELECT c.id, 1 - (c.embedding <=> CAST(:qv AS vector)) FROM ce_chunks c WHERE c.embedding IS NOT NULL "
        f"AND c.valid_to IS NULL ORDER BY {index_order(vector, halfvec=True)} LIMIT :limit"
    )


async def _session(db: AsyncEngine) -> tuple[str, str, str, str]:
    async with db.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        status = raw.info.transaction_status.name
        await conn.execute(text("SELECT CAST('[1]' AS vector)"))  # loads pgvector, whose settings are read below
        ef = await conn.scalar(text("SELECT current_setting('hnsw.ef_search')"))
        seq = await conn.scalar(text("SELECT current_setting('enable_seqscan')"))
        open_tx = await conn.scalar(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%'")
        )
    return status, str(ef), str(seq), str(open_tx)


async def test_the_settings_last_for_the_scan_only(one_connection: AsyncEngine) -> None:
    before = await _session(one_connection)
    vector = np.ones(DIM).tolist()
    settings = planner.index_settings(123, "relaxed_order", 5_000)
    async with one_connection.connect() as conn:
        params = {"qv": vector_literal(vector), "limit": 7}
        rows = await _forced_index_scan(conn, _scan(vector), params, settings)
        exact = await conn.execute(
            text("SELECT id FROM ce_chunks ORDER BY (embedding <=> CAST(:qv AS vector)) + 0 LIMIT :limit"), params
        )
    assert {int(r[0]) for r in rows} == {int(r[0]) for r in exact}  # a search list of 123 over 65 rows is exact
    assert before[1] != "123"
    assert await _session(one_connection) == before  # idle, default settings, nothing left open


async def test_a_failed_scan_leaves_the_connection_idle_and_clean(one_connection: AsyncEngine) -> None:
    before = await _session(one_connection)
    vector = np.ones(DIM).tolist()
    params = {"qv": vector_literal(vector), "limit": 5}
    bad = planner.index_settings(0, "relaxed_order")  # ef_search 0 is outside the range the server takes
    async with one_connection.connect() as conn:
        with pytest.raises(Exception) as failed:
            await _forced_index_scan(conn, _scan(vector), params, bad)
    assert isinstance(failed.value, psycopg.Error) or isinstance(failed.value.__cause__, psycopg.Error)
    assert await _session(one_connection) == before
    async with one_connection.connect() as conn:  # and the same session serves the next scan
        rows = await _forced_index_scan(conn, _scan(vector), params, planner.index_settings(50))
    assert len(rows) == 5
    assert await _session(one_connection) == before


async def test_the_settings_are_in_force_for_the_scan(one_connection: AsyncEngine) -> None:
    """No BEGIN is sent: the settings reach the scan through the implicit transaction of one Sync."""
    settings = planner.index_settings(77, "relaxed_order", 4_321)
    seen = text(
        "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan'), "
        "current_setting('hnsw.max_scan_tuples'), current_setting('enable_seqscan')"
    )
    async with one_connection.connect() as conn:
        await conn.execute(text("SELECT CAST('[1]' AS vector)"))  # loads pgvector, whose settings are read
        rows = await _forced_index_scan(conn, seen, {}, settings)
    assert rows == [("77", "relaxed_order", "4321", "off")]
    assert (await _session(one_connection))[1] != "77"
