"""A search's read statements sent on the pooled connection's psycopg connection itself.

SQLAlchemy's execution context and result objects cost about 0.4 ms of CPU a statement here, and a
search sends several; these reads need none of what they add. The statement text is SQLAlchemy's
own compiled form of ``text(sql)`` (so ``:name`` parameters bind exactly as through
``conn.execute``), it is never prepared (each run is planned for its own values, see
:mod:`context_engine.storage.custom_plans`), and it goes direct only on an autocommit connection,
where a failed statement leaves no transaction behind.

On a driver error the statement is run once more through ``conn.execute``: SQLAlchemy's error
handling is the one that knows a lost connection (it invalidates it, wakes the embedded server's
supervisor and answers ``StorageUnavailable``, see :mod:`context_engine.storage.database`) and wraps
every other error as the ``DBAPIError`` callers catch. A read has nothing to undo, so running it
again is safe; if it now succeeds, its rows are the answer.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.interfaces import Compiled
from sqlalchemy.ext.asyncio import AsyncConnection


@lru_cache(maxsize=512)
def _compiled(sql: str, dialect: Dialect) -> Compiled:
    return text(sql).compile(dialect=dialect)


async def read(conn: AsyncConnection, sql: str, params: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """``(column names, rows)`` of ``text(sql)`` with ``params``, as ``conn.execute`` would return them."""
    raw = (await conn.get_raw_connection()).driver_connection
    if isinstance(raw, psycopg.AsyncConnection) and raw.autocommit:
        compiled = _compiled(sql, conn.dialect)
        try:
            cursor = await raw.execute(compiled.string, compiled.construct_params(params), prepare=False)
            rows = await cursor.fetchall()
            return [column.name for column in cursor.description or []], rows
        except psycopg.Error:
            pass  # answered below, through SQLAlchemy's error handling
    result = await conn.execute(text(sql), params)
    return list(result.keys()), [tuple(row) for row in result.all()]
