"""The SQLAlchemy async engine over psycopg, for a configured URL or the embedded server.

Async connections belong to the event loop that opened them, and an engine is reached from
several loops in practice (an ASGI server's loop, the background loop the Flask and Django
adapters use, a script's ``asyncio.run``). So the pool is kept per running loop: each loop gets
its own, all share one configuration and one embedded-server handle.

A database that is down or restarting is reported as ``StorageUnavailable`` (503,
``storage_unavailable``) rather than a driver error, and the pool recovers by itself once it is
back (``storage.pool_pre_ping`` replaces the connections the restart broke; by default only a
connection idle for ``storage.pool_pre_ping_idle`` seconds is pinged, see :mod:`.idle_ping`). The
embedded server is supervised: killed, it is started again (``embedded_supervisor``), and the first
request that finds it gone has the supervisor look at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
from sqlalchemy import event
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.config import ContextEngineConfig, database_url_text
from context_engine.errors import ConfigError, ContextEngineError, DatabaseRefused, StorageUnavailable
from context_engine.storage import embedded, session_locks
from context_engine.storage.idle_ping import ping_when_idle

#: the URL schemes that name PostgreSQL (psycopg 3 serves them all)
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg", "postgresql+asyncpg")


def check_database_url(url: str, setting: str = "database_url") -> None:
    """Refuse a URL that is not PostgreSQL's, naming its scheme only (the rest may hold a password)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    try:
        driver = make_url(url).drivername
    except Exception:
        driver = ""
    if driver not in POSTGRES_SCHEMES:
        shown = f"{scheme}://" if scheme and scheme.replace("+", "").replace("_", "").isalnum() else "this URL"
        raise ConfigError(
            f"{setting}: unsupported URL scheme {shown}; context-engine runs on PostgreSQL: "
            "postgresql://user:password@host:5432/dbname",
            code="unsupported_database_url",
        )


def to_driver_url(url: str) -> str:
    """Accept ``postgresql://`` / ``postgres://`` URLs and run them on psycopg 3."""
    check_database_url(url)
    parsed = make_url(url)
    if parsed.drivername in POSTGRES_SCHEMES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def server_address(url: URL | None) -> str:
    """Where a URL points, for an error message: ``host:port`` (or the socket directory), never its password."""
    if url is None:
        return "the configured server"
    query_host = url.query.get("host")
    host = url.host or (query_host if isinstance(query_host, str) else None) or "localhost"
    port = url.port or url.query.get("port") or 5432
    if host.startswith("/"):
        return f"the socket in {host} (port {port})"
    return f"{host}:{port}"


#: what libpq says when the server refused the credentials (it reports no SQLSTATE for a failed connect)
_REFUSED_CREDENTIALS = ("authentication failed", "no pg_hba.conf entry", "role \"", "password is required")


def connect_failure(exc: BaseException, url: URL | None) -> ContextEngineError:
    """A failed connect as the error that says what happened and where.

    A refused password or a missing database is the configuration's fault and says so; anything
    else (refused, timed out, unknown host) is reported as unreachable and retryable.
    """
    where = server_address(url)
    reason = str(exc).strip()
    first = reason.splitlines()[0] if reason else ""
    said = first.split("FATAL:", 1)[1].strip() if "FATAL:" in first else ""
    user = f' as user "{url.username}"' if url is not None and url.username else ""
    if any(marker in reason for marker in _REFUSED_CREDENTIALS):
        return DatabaseRefused(
            f"the database server at {where} refused the sign-in{user} (authentication failed): "
            "check the user name and password in database_url; retrying will not help",
            details={"server": where},
        )
    if said.startswith("database ") and said.endswith("does not exist"):
        return DatabaseRefused(
            f"{said} on the server at {where}: create it (CREATE DATABASE ...) or fix database_url",
            code="database_not_found",
            details={"server": where},
        )
    detail = first.rsplit("failed:", 1)[-1].strip() if "failed:" in first else ""
    because = f" ({detail})" if detail and len(detail) < 160 else ""
    return StorageUnavailable(
        f"the database at {where} could not be reached{because}; check the host and port, or retry shortly",
        details={"server": where},
    )


def _unreachable(context: ExceptionContext) -> bool:
    refused = context.connection is None and isinstance(context.original_exception, psycopg.OperationalError)
    return bool(context.is_disconnect or refused)


def report_unreachable(context: ExceptionContext) -> None:
    """A connection that was refused or lost becomes ``StorageUnavailable`` (a refused sign-in
    ``DatabaseRefused``); any other database error keeps its type. A failed pre-ping is left to
    the pool, which reconnects on its own."""
    if context.is_pre_ping:
        return
    refused = context.connection is None and isinstance(context.original_exception, psycopg.OperationalError)
    if refused:
        url = context.engine.url if context.engine is not None else None
        raise connect_failure(context.original_exception, url)
    if context.is_disconnect:
        raise StorageUnavailable("the database connection was lost; retry shortly")


def supervise_on_unreachable(pgdata: Path) -> Callable[[ExceptionContext], None]:
    """A listener that has the embedded server's supervisor look at once when a connection fails,
    so a killed server is restarted on the first failed request rather than at the next check."""

    def notice(context: ExceptionContext) -> None:
        if _unreachable(context):
            embedded.notice_unreachable(pgdata)

    return notice


class Database:
    """Owns the per-loop pools, and the embedded server handle when it started one."""

    def __init__(self, config: ContextEngineConfig):
        self._config = config
        self._engines: dict[asyncio.AbstractEventLoop, AsyncEngine] = {}
        self._url: str | None = database_url_text(config)
        if self._url is not None:
            check_database_url(self._url)  # refused when the engine is built, not on its first query
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
        if self._pgdata is not None:  # before the listener that raises, which ends the chain
            event.listen(created.sync_engine, "handle_error", supervise_on_unreachable(self._pgdata))
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
            self._pgdata, url = await asyncio.to_thread(self._acquire)
            self._url = url
            return url
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
                await _dispose(engine)
            elif loop.is_running() and not loop.is_closed():
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_dispose(engine), loop))
        if self._pgdata is not None:
            pgdata, self._pgdata = self._pgdata, None
            self._url = None
            await asyncio.to_thread(embedded.release, pgdata)


async def _dispose(engine: AsyncEngine) -> None:
    """Close the pool's lock connection (its session locks end with it), then the pool."""
    try:
        await session_locks.close_for(engine)
    finally:
        await engine.dispose()
