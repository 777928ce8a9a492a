"""Session locks on a real PostgreSQL: first come first served in a process, exclusive across
processes (two pools stand for two), gone with their connection, and never leaked by a cancelled waiter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.storage.database import to_driver_url
from context_engine.storage.session_locks import SessionLocks


@pytest.fixture
async def pools(database_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    one, two = (create_async_engine(to_driver_url(database_url)) for _ in range(2))
    try:
        yield one, two
    finally:
        await one.dispose()
        await two.dispose()


async def _advisory_locks(pool: AsyncEngine) -> int:
    async with pool.connect() as conn:
        return int(await conn.scalar(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")) or 0)


async def test_turns_in_a_process_are_first_come_first_served(pools: tuple[AsyncEngine, AsyncEngine]) -> None:
    locks = SessionLocks(pools[0])
    try:
        first = await locks.acquire("doc", 1.0)
        assert first is not None
        order: list[int] = []

        async def wait_turn(i: int) -> None:
            held = await locks.acquire("doc", 30.0)
            assert held is not None
            order.append(i)
            await locks.release(held)

        waiters = [asyncio.create_task(wait_turn(i)) for i in range(3)]
        await asyncio.sleep(0.05)
        assert await locks.acquire("doc", 0.05) is None  # the wait ran out: nothing held for it
        await locks.release(first)
        await asyncio.gather(*waiters)
        assert order == [0, 1, 2]
        assert await _advisory_locks(pools[0]) == 0
    finally:
        await locks.aclose()


async def test_exclusive_across_processes_and_gone_with_the_connection(
    pools: tuple[AsyncEngine, AsyncEngine],
) -> None:
    mine, theirs = SessionLocks(pools[0]), SessionLocks(pools[1])
    try:
        held = await mine.acquire("doc", 1.0)
        assert held is not None and mine.holds("doc")
        assert await theirs.try_acquire("doc") is None
        await mine.aclose()  # the holder's connection ends (as a killed process's does)
        taken = await theirs.acquire("doc", 30.0)
        assert taken is not None
        await theirs.release(taken)
    finally:
        await mine.aclose()
        await theirs.aclose()


async def test_a_cancelled_waiter_leaves_nothing_held(pools: tuple[AsyncEngine, AsyncEngine]) -> None:
    mine, theirs = SessionLocks(pools[0]), SessionLocks(pools[1])
    try:
        blocker = await theirs.acquire("doc", 1.0)
        assert blocker is not None
        waiting = asyncio.create_task(mine.acquire("doc", 30.0))  # polls the server while the other holds it
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await theirs.release(blocker)
        for _ in range(100):  # a grant that landed as the waiter gave up is undone on its own
            if await _advisory_locks(pools[0]) == 0:
                break
            await asyncio.sleep(0.05)
        assert await _advisory_locks(pools[0]) == 0
        again = await theirs.try_acquire("doc")
        assert again is not None
        await theirs.release(again)
    finally:
        await mine.aclose()
        await theirs.aclose()
