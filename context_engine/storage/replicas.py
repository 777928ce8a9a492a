"""Read replicas: lag-tolerant reads rotate over ``database.read_urls``, the writer stands behind them.

Why a module of its own: the writer's pool (``Database``) knows nothing of replicas, and the
pipelines ask for "the pool this read runs on" (``Services.read_db``) without knowing which server
that is. The choice is made once per read, by ``Services.reading``, and held in a context variable,
so every leg, the revision check and the fetch of the winners see the same server's snapshot.

A replica that cannot be reached is left out of the rotation for ``database.replica_retry_seconds``
with a logged warning, and the read goes to the writer: a caller never sees a replica's failure while
the writer is up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from pydantic import SecretStr
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.errors import ConfigError, StorageUnavailable
from context_engine.storage.database import Database
from context_engine.storage.repository import current_revision

log = logging.getLogger("context_engine.replicas")

#: how often a read that waits for a replica to replay a revision asks again
POLL_SECONDS = 0.05
#: SQLSTATEs after which a replica read is retried on the writer: a query cancelled by a conflict
#: with recovery (40001), and a schema the replica has not replayed yet (42P01 table, 42703 column,
#: 42883 an extension's function)
RETRY_ON_WRITER = frozenset({"40001", "42P01", "42703", "42883"})

#: the pool the current read runs on, and the name of its server ("primary" or "replica N")
_pinned: ContextVar[tuple[AsyncEngine, str] | None] = ContextVar("context_engine_read_pool", default=None)


def pinned() -> tuple[AsyncEngine, str] | None:
    """The pool chosen for the read in progress (``None`` outside one)."""
    return _pinned.get()


@contextmanager
def pin(db: AsyncEngine, server: str) -> Iterator[None]:
    """Every read inside (and every task it starts) runs on ``db``."""
    token = _pinned.set((db, server))
    try:
        yield
    finally:
        _pinned.reset(token)


def retry_on_writer(exc: BaseException) -> bool:
    """A replica's failure that the writer can answer instead (never a caller's error)."""
    if isinstance(exc, StorageUnavailable):
        return True
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in RETRY_ON_WRITER


def _check_url(position: int, url: str) -> None:
    """A PostgreSQL URL, or a ``ConfigError`` that names its position and never the URL (a password)."""
    try:
        driver = make_url(url).drivername
    except Exception:
        driver = ""
    if driver not in ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"):
        raise ConfigError(f"database.read_urls[{position}] is not a postgresql:// URL")


def _with_connect_timeout(url: str, seconds: int) -> str:
    """The URL with libpq's ``connect_timeout`` unless it sets one: a dead host must not hold a read."""
    parsed = make_url(url)
    if "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": str(seconds)})
    return parsed.render_as_string(hide_password=False)


@dataclass
class Replica:
    """One read URL: its pool and, after a failure, when it may be tried again."""

    #: "replica N" (1-based, in ``read_urls`` order): what logs and ``usage["read_from"]`` name
    name: str
    database: Database
    set_aside_until: float = 0.0

    async def engine(self) -> AsyncEngine:
        return await self.database.engine()

    async def revision(self) -> int:
        """The store revision this replica has replayed."""
        return await current_revision(await self.engine())


class ReadReplicas:
    """The configured replicas, in rotation (round robin over those not set aside)."""

    def __init__(self, config: ContextEngineConfig):
        settings = config.database
        #: the URLs this set was built from (the services rebuild it when the configuration changes)
        self.urls: tuple[str, ...] = tuple(url.get_secret_value() for url in settings.read_urls)
        for position, url in enumerate(self.urls, 1):
            _check_url(position, url)
        self._retry_seconds = settings.replica_retry_seconds
        self._replicas = [
            Replica(
                f"replica {position}",
                Database(
                    config.model_copy(
                        update={"database_url": SecretStr(_with_connect_timeout(url, settings.replica_connect_timeout))}
                    )
                ),
            )
            for position, url in enumerate(self.urls, 1)
        ]
        self._turn = itertools.count()

    def __len__(self) -> int:
        return len(self._replicas)

    def in_rotation(self) -> list[Replica]:
        """The replicas that may take a read now, starting from the next one's turn."""
        now = time.monotonic()
        ready = [r for r in self._replicas if r.set_aside_until <= now]
        if not ready:
            return []
        start = next(self._turn) % len(ready)
        return ready[start:] + ready[:start]

    def failed(self, replica: Replica, exc: BaseException) -> None:
        """A read on ``replica`` failed and goes to the writer: a recovery conflict cancelled one query
        (the replica stays in rotation); anything else sets the replica aside."""
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == "40001":
            log.warning("%s cancelled a read (a conflict with recovery); the writer answers it", replica.name)
        else:
            self.set_aside(replica, exc)

    def set_aside(self, replica: Replica, exc: BaseException) -> None:
        """Leave ``replica`` out of the rotation for a while; say so once, without its URL."""
        replica.set_aside_until = time.monotonic() + self._retry_seconds
        log.warning(
            "%s could not answer a read (%s); it is left out of the rotation for %.0f s (the writer answers)",
            replica.name,
            _reason(exc),
            self._retry_seconds,
        )

    async def choose(self, revision: int | None, wait: float) -> Replica | None:
        """A replica for one read: any in rotation, or, when ``revision`` is given, one that has replayed
        it, waiting up to ``wait`` seconds for one to catch up. ``None``: the writer reads."""
        deadline = time.monotonic() + wait
        while True:
            candidates = self.in_rotation()
            if revision is None:
                return candidates[0] if candidates else None
            for replica in candidates:
                try:
                    if await replica.revision() >= revision:
                        return replica
                except (StorageUnavailable, DBAPIError) as exc:  # whatever the cause, the writer can answer
                    self.set_aside(replica, exc)
            if not candidates or time.monotonic() + POLL_SECONDS > deadline:
                return None
            await asyncio.sleep(POLL_SECONDS)

    async def status(self, writer_revision: int | None) -> list[dict[str, object]]:
        """Each replica, asked concurrently: reachable or not, the revision it has replayed and how far
        behind the writer it is. A reachable replica comes back into the rotation; an unreachable one
        is set aside."""
        return list(await asyncio.gather(*(self._status(r, writer_revision) for r in self._replicas)))

    async def _status(self, replica: Replica, writer_revision: int | None) -> dict[str, object]:
        try:
            applied = await replica.revision()
        except (StorageUnavailable, DBAPIError) as exc:
            if replica.set_aside_until <= time.monotonic():
                self.set_aside(replica, exc)
            return {"name": replica.name, "up": False}
        replica.set_aside_until = 0.0
        behind = None if writer_revision is None else max(writer_revision - applied, 0)
        return {"name": replica.name, "up": True, "revision": applied, "revisions_behind": behind}

    async def aclose(self) -> None:
        for replica in self._replicas:
            await replica.database.aclose()


def _reason(exc: BaseException) -> str:
    """What went wrong, without a URL or a password: our own message, or the driver's SQLSTATE."""
    if isinstance(exc, StorageUnavailable):
        return "unreachable"
    state = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return f"SQLSTATE {state}" if state else type(exc).__name__
