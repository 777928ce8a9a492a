"""The pool pings a connection only when it sat idle (``storage.pool_pre_ping_idle``), against a real server.

A backend killed under a pooled connection stands in for a restart: found by the ping when the
connection was idle long enough, and otherwise met by the next request as a retryable
``StorageUnavailable``, after which the pool is renewed.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from sqlalchemy import text

from context_engine.errors import StorageUnavailable
from context_engine.storage.database import Database
from tests.conftest import make_config

DEADLINE = 60.0


def _database(url: str, idle: float) -> Database:
    storage = {"auto_migrate": True, "pool_size": 1, "max_overflow": 0, "pool_pre_ping_idle": idle}
    return Database(make_config(url, storage=storage))


async def _pid(db: Database) -> int:
    engine = await db.engine()
    async with engine.connect() as conn:
        return int(await conn.scalar(text("SELECT pg_backend_pid()")))


def _kill(url: str, pid: int) -> None:
    """Terminate one backend and wait until the server no longer lists it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + DEADLINE
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the backend did not go away"
            time.sleep(0.05)


async def test_a_connection_idle_past_the_window_is_pinged_and_replaced(database_url: str) -> None:
    db = _database(database_url, idle=0.2)
    try:
        first = await _pid(db)
        returned = time.monotonic()
        await asyncio.to_thread(_kill, database_url, first)
        await asyncio.sleep(max(0.0, 0.3 - (time.monotonic() - returned)))  # idle past the window
        second = await _pid(db)  # no error: the ping found the broken connection and replaced it
        assert second != first
    finally:
        await db.aclose()


async def test_a_connection_back_a_moment_ago_is_not_pinged_and_a_break_renews_the_pool(database_url: str) -> None:
    db = _database(database_url, idle=3600)
    try:
        first = await _pid(db)
        await asyncio.to_thread(_kill, database_url, first)
        with pytest.raises(StorageUnavailable):  # not pinged: the request meets the break, retryable
            await _pid(db)
        second = await _pid(db)  # the break renewed the pool
        assert second != first
    finally:
        await db.aclose()
