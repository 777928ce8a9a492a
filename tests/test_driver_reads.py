"""A search's reads sent on the driver connection answer as ``conn.execute`` does, on a real server:
the same columns and rows, the same wrapped error for a bad statement, and for a lost connection the
retryable ``StorageUnavailable`` with the pool renewed behind it."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import StorageUnavailable
from context_engine.storage import driver_reads
from context_engine.storage.database import Database
from tests.conftest import make_config
from tests.test_idle_ping import _kill

STATEMENT = (
    "SELECT g AS n, CAST(g AS text) || :suffix AS label, CAST(:ids AS bigint[]) AS ids "
    "FROM generate_series(1, :upto) g ORDER BY g"
)
PARAMS = {"suffix": "-x", "ids": "{3,1,2}", "upto": 4}


def _database(url: str) -> Database:
    # one connection and no idle ping: the statement after a kill meets the broken connection itself
    storage = {"auto_migrate": True, "pool_size": 1, "max_overflow": 0, "pool_pre_ping_idle": 3600}
    return Database(make_config(url, storage=storage))


async def _reads(db: Database) -> AsyncEngine:
    return (await db.engine()).execution_options(isolation_level="AUTOCOMMIT")  # as services.reads()


@pytest.mark.parametrize("autocommit", [True, False], ids=["direct", "through SQLAlchemy"])
async def test_the_rows_are_what_execute_returns(database_url: str, autocommit: bool) -> None:
    db = _database(database_url)
    try:
        engine = await _reads(db) if autocommit else await db.engine()
        async with engine.connect() as conn:
            keys, rows = await driver_reads.read(conn, STATEMENT, dict(PARAMS))
            expected = await conn.execute(text(STATEMENT), dict(PARAMS))
            assert keys == list(expected.keys()) == ["n", "label", "ids"]
            assert rows == [tuple(r) for r in expected.all()]
        assert rows[1] == (2, "2-x", [3, 1, 2])
    finally:
        await db.aclose()


async def test_a_bad_statement_raises_the_error_execute_raises_and_the_connection_stays_usable(
    database_url: str,
) -> None:
    db = _database(database_url)
    try:
        async with (await _reads(db)).connect() as conn:
            with pytest.raises(DBAPIError) as raised:
                await driver_reads.read(conn, "SELECT 1 / CAST(:zero AS int)", {"zero": 0})
            assert getattr(raised.value.orig, "sqlstate", None) == "22012"  # division_by_zero
            assert (await driver_reads.read(conn, "SELECT CAST(:v AS int) + 1", {"v": 1}))[1] == [(2,)]
    finally:
        await db.aclose()


async def test_a_lost_connection_is_storage_unavailable_and_the_next_read_works(database_url: str) -> None:
    db = _database(database_url)
    try:
        reads = await _reads(db)
        async with reads.connect() as conn:
            pid = int((await driver_reads.read(conn, "SELECT pg_backend_pid()", {}))[1][0][0])
        await asyncio.to_thread(_kill, database_url, pid)
        async with reads.connect() as conn:
            with pytest.raises(StorageUnavailable):
                await driver_reads.read(conn, STATEMENT, dict(PARAMS))
        async with reads.connect() as conn:  # the broken connection was invalidated, not pooled again
            found = int((await driver_reads.read(conn, "SELECT pg_backend_pid()", {}))[1][0][0])
        assert found != pid
    finally:
        await db.aclose()
