"""Ping a pooled connection before use only when it has sat idle: the pre-ping without its round trip.

SQLAlchemy's ``pool_pre_ping`` sends ``SELECT 1`` on every checkout. A search checks out three to
five connections, so under load that was as many extra round trips (each a wake-up of both
processes) for connections that had answered a moment before. What the ping is for is the
connection a restart or failover broke while it waited in the pool; that connection has waited at
least as long as the outage lasted. So a connection is pinged when it has been back in the pool
for ``idle_seconds`` or more, and handed out as it is otherwise. A broken connection found by the
ping is replaced at once and every older pooled connection is renewed, as SQLAlchemy's own
pre-ping does; one that broke within the window fails its request as ``StorageUnavailable``
(retryable), and that disconnect renews the pool the same way.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine

_RETURNED = "ce_returned_at"


def ping_when_idle(engine: AsyncEngine, idle_seconds: float) -> None:
    """Install the idle-only pre-ping on ``engine``'s pool (create the engine without ``pool_pre_ping``)."""
    sync = engine.sync_engine
    dialect = sync.dialect

    def returned(dbapi_connection: Any, record: Any) -> None:
        record.info[_RETURNED] = time.monotonic()

    def taken(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        at = record.info.get(_RETURNED)
        if at is None or time.monotonic() - at < idle_seconds:
            return  # fresh from connect(), or back from a request a moment ago
        try:
            alive = dialect.do_ping(dbapi_connection)
            dbapi_connection.rollback()  # the ping opened a transaction unless the connection autocommits
        except dialect.loaded_dbapi.Error as error:
            if dialect.is_disconnect(error, dbapi_connection, None):
                raise exc.InvalidatePoolError() from error  # the pool reconnects and renews older connections
            raise
        if not alive:
            raise exc.InvalidatePoolError()

    event.listen(sync, "checkin", returned)
    event.listen(sync, "checkout", taken)
