"""Statements planned for their own parameters on every run, never from the plan cache.

psycopg prepares a statement on the server once it has run ``prepare_threshold`` times (5) on a
connection; from then on PostgreSQL may switch it to a *generic plan*, one chosen without the
parameter values. For the full-text statements the values are what matter (how many chunks a
lexeme is in, how many of them the caller may see), and a generic plan for a caller seeing a third
of a million chunks ran about ten times slower than the custom one; loading the fused winners by id
under that caller's ACL went the same way (benchmarks/README.md, "Scale"). An unprepared statement goes
through the unnamed statement, which the server always plans for the values bound to it; the cost
is parsing and planning on every run, small beside those statements' execution.

The switch is the connection's own ``prepare_threshold``, lifted only while the statements run:
every other statement on the pooled connection keeps being prepared as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection


@asynccontextmanager
async def planned_per_call(conn: AsyncConnection) -> AsyncIterator[AsyncConnection]:
    """``conn``, whose statements inside the block are not prepared (each gets a custom plan)."""
    raw = (await conn.get_raw_connection()).driver_connection
    if raw is None or not hasattr(raw, "prepare_threshold"):  # not psycopg: nothing is prepared
        yield conn
        return
    kept = raw.prepare_threshold
    raw.prepare_threshold = None
    try:
        yield conn
    finally:
        raw.prepare_threshold = kept
