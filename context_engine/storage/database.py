"""The SQLAlchemy async engine over psycopg, for a configured URL or the embedded server.

Async connections belong to the event loop that opened them, and an engine is reached from
several loops in practice (an ASGI server's loop, the background loop the Flask and Django
adapters use, a script's ``asyncio.run``). So the pool is kept per running loop: each loop gets
its own, all share one configuration and one embedded-server handle.

A database that is down or restarting is reported as ``StorageUnavailable`` (503,
``storage_unavailable``) rather than a driver error, and the pool recovers by itself once it is
back (``storage.pool_pre_ping`` replaces the connections the restart broke; by default only a
connection idle for ``storage.pool_pre_ping_idle`` seconds is pinged, see :mod:`.idle_ping`).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import psycopg
from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.config import ContextEngineConfig, database_url_text
from context_engine.errors import StorageUnavailable
from context_engine.storage import embedded
from context_engine.storage.idle_ping import ping_when_idle


def to_driver_url(url: str) -> str:
    """Accept ``postgresql://`` / ``postgres://`` URLs and run them on psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def report_unreachable(context: ExceptionContext) -> None:
    """A connection that was refused or lost becomes ``StorageUnavailable``; any other database
    error keeps its type. A failed pre-ping is left to the pool, which reconnects on its own."""
    if context.is_pre_ping:
        return
    refused = context.connection is None and isinstance(context.original_exception, psycopg.OperationalError)
    if context.is_disconnect or refused:
        raise StorageUnavailable("the database could not be reached; retry shortly")


class Database:
    """Owns the per-loop pools, and the embedded server handle when it started one."""

    def __init__(self, config: ContextEngineConfig):
        self._config = config
        self._engines: dict[asyncio.AbstractEventLoop, AsyncEngine] = {}
        self._url: str | None = database_url_text(config)
        self._pgdata: Path | None = None
        self._lock = threading.Lock()
        self.embedded = self._url is None

    async def engine(self) -> AsyncEngine:
        loop = asyncio.get_running_loop()
        found = self._engines.get(loop)
        if found is not None:
            return found
        url = await self.url()
        storage = self._config.storage
        created = create_async_engine(
            to_driver_url(url),
            pool_size=storage.pool_size,
            max_overflow=storage.max_overflow,
            pool_timeout=storage.pool_timeout,
            pool_recycle=storage.pool_recycle,
            # the ping is installed below when it may skip connections that were just in use
            pool_pre_ping=storage.pool_pre_ping and storage.pool_pre_ping_idle <= 0,
        )
        if storage.pool_pre_ping and storage.pool_pre_ping_idle > 0:
            ping_when_idle(created, storage.pool_pre_ping_idle)
        event.listen(created.sync_engine, "handle_error", report_unreachable)
        with self._lock:
            # forget pools of loops that have since closed
            for dead in [lp for lp in self._engines if lp.is_closed()]:
                self._engines.pop(dead)
            return self._engines.setdefault(loop, created)

    async def url(self) -> str:
        """The server URL, starting the embedded server on first need."""
        if self._url is None:
            self._pgdata, self._url = await asyncio.to_thread(self._acquire)
        return self._url

    def _acquire(self) -> tuple[Path, str]:
        with self._lock:
            if self._pgdata is not None and self._url is not None:
                return self._pgdata, self._url
            return embedded.acquire(self._config.storage.data_dir)

    async def aclose(self) -> None:
        current = asyncio.get_running_loop()
        with self._lock:
            engines, self._engines = self._engines, {}
        for loop, engine in engines.items():
            if loop is current:
                await engine.dispose()
            elif loop.is_running() and not loop.is_closed():
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(engine.dispose(), loop))
        if self._pgdata is not None:
            pgdata, self._pgdata = self._pgdata, None
            self._url = None
            await asyncio.to_thread(embedded.release, pgdata)
