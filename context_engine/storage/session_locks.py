"""Ownership that dies with its holder: session-level advisory locks on one dedicated connection.

A run that writes or embeds a document, and a request that holds an idempotency key, own it by a
session advisory lock. PostgreSQL ends a backend whose client went away (a killed process closes
its socket), and every session lock goes with it, so a dead writer lets go at once instead of when
a clock runs out. Waiters in other processes see the lock free within the time it takes the server
to notice the closed socket.

Why one connection per pool and not a pooled one per run: a run holds its lock for minutes while
the embedding model works, and the pool must never be held while a model works. All of a process's
locks live on one extra connection (outside the pool, opened on first need), so holding a thousand
documents costs one backend. Session locks are re-entrant within a session, so the same key wanted
twice in this process is queued here first (first come, first served), and only the head of the
queue asks the server.

If the dedicated connection breaks (the server restarted), its locks are gone: the next acquire
opens a new one, and runs that held a lock keep their fencing token (``lease_holder`` on the row),
which is what their writes are checked against, so nothing is written twice.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import weakref
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from context_engine.errors import StorageUnavailable

log = logging.getLogger("context_engine.storage")

#: the hash that turns a key into the server's 64-bit lock id (transaction locks of a writer use it too)
LOCK_ID_SQL = "hashtextextended(:k, 7)"
#: the first and the longest pause between two asks to the server for a lock another process holds
FIRST_PAUSE, LONGEST_PAUSE = 0.01, 0.25


@dataclass
class _Queue:
    """The in-process holder of one key and those waiting after it (FIFO)."""

    held: bool = False
    waiters: collections.deque[asyncio.Future[None]] = field(default_factory=collections.deque)


@dataclass(eq=False)
class Held:
    """One owned key; ``release`` it (or use :meth:`SessionLocks.hold`)."""

    key: str
    #: the dedicated connection the lock was taken on (its generation): a newer one means it was lost
    generation: int
    released: bool = False


class SessionLocks:
    """The session locks of one pool's process; see the module docstring."""

    def __init__(self, pool: AsyncEngine):
        self._url = pool.url
        self._engine: AsyncEngine | None = None
        self._conn: AsyncConnection | None = None
        self._io = asyncio.Lock()  # one statement at a time on the dedicated connection
        self._queues: dict[str, _Queue] = {}
        self._undoing: set[asyncio.Future[None]] = set()
        self.generation = 0

    # ------------------------------------------------------------------ acquire / release
    async def acquire(self, key: str, wait: float) -> Held | None:
        """Own ``key``, waiting at most ``wait`` seconds for this process's earlier holders and then
        for other processes'; ``None`` when the wait ran out (nothing is held then)."""
        deadline = time.monotonic() + max(0.0, wait)
        if not await self._enter(key, deadline):
            return None
        try:
            pause = FIRST_PAUSE
            while True:
                generation = await self._ask(key)
                if generation is not None:
                    return Held(key, generation)
                left = deadline - time.monotonic()
                if left <= 0:
                    self._leave(key)
                    return None
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, LONGEST_PAUSE)
        except BaseException:
            self._leave(key)
            raise

    async def try_acquire(self, key: str) -> Held | None:
        """Own ``key`` only if nobody (in this process or another) holds it now."""
        return await self.acquire(key, 0.0)

    async def release(self, held: Held) -> None:
        """Let go of ``held`` (twice is harmless); safe to await from a cancelled task's cleanup."""
        if held.released:
            return
        held.released = True
        try:
            await asyncio.shield(self._unlock(held))
        finally:
            self._leave(held.key)

    def holds(self, key: str) -> bool:
        """Whether a run of this process owns ``key`` now."""
        queue = self._queues.get(key)
        return queue is not None and queue.held

    # ------------------------------------------------------------------ in-process queue
    async def _enter(self, key: str, deadline: float) -> bool:
        queue = self._queues.setdefault(key, _Queue())
        if not queue.held and not queue.waiters:
            queue.held = True
            return True
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.waiters.append(turn)
        try:
            await asyncio.wait({turn}, timeout=max(0.0, deadline - time.monotonic()))
        except BaseException:
            self._give_up(key, turn)
            raise
        if turn.done() and not turn.cancelled():
            return True  # handed over by the previous holder: ``held`` stayed True for us
        self._give_up(key, turn)
        return False

    def _give_up(self, key: str, turn: asyncio.Future[None]) -> None:
        """A waiter leaves the queue; if it had been handed the turn meanwhile, it passes it on."""
        queue = self._queues[key]
        if turn.done() and not turn.cancelled():
            self._leave(key)
            return
        turn.cancel()
        with contextlib.suppress(ValueError):
            queue.waiters.remove(turn)
        self._forget_if_idle(key)

    def _leave(self, key: str) -> None:
        queue = self._queues.get(key)
        if queue is None:
            return
        while queue.waiters:
            turn = queue.waiters.popleft()
            if not turn.done():
                turn.set_result(None)  # the turn passes on; ``held`` stays True
                return
        queue.held = False
        self._forget_if_idle(key)

    def _forget_if_idle(self, key: str) -> None:
        queue = self._queues.get(key)
        if queue is not None and not queue.held and not queue.waiters:
            del self._queues[key]

    # ------------------------------------------------------------------ the dedicated connection
    async def _ask(self, key: str) -> int | None:
        """:meth:`_try_server_lock`, shielded: a caller cancelled while the server grants the lock
        must not leave it held on the connection, so a grant that lands after it gave up is undone."""
        asking = asyncio.ensure_future(self._try_server_lock(key))
        try:
            return await asyncio.shield(asking)
        except asyncio.CancelledError:
            asking.add_done_callback(lambda done: self._undo_late_grant(key, done))
            raise

    def _undo_late_grant(self, key: str, done: asyncio.Future[int | None]) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        generation = done.result()
        if generation is None:
            return
        # session locks count: undoing this grant leaves any later holder's own grant in place
        undo = asyncio.ensure_future(self._unlock(Held(key, generation)))
        self._undoing.add(undo)
        undo.add_done_callback(self._undoing.discard)

    async def _try_server_lock(self, key: str) -> int | None:
        """The connection's generation when the server granted the lock, else ``None``. A broken
        connection is replaced once and the ask repeated."""
        for attempt in (1, 2):
            async with self._io:
                try:
                    conn = await self._connection()
                    got = await conn.scalar(text(f"SELECT pg_try_advisory_lock({LOCK_ID_SQL})"), {"k": key})
                    return self.generation if got else None
                except Exception as exc:
                    await self._drop()
                    if attempt == 2:
                        raise StorageUnavailable("the database could not be reached; retry shortly") from exc
        return None

    async def _unlock(self, held: Held) -> None:
        async with self._io:
            if self._conn is None or held.generation != self.generation:
                return  # the connection that held it is gone, and the lock with it
            try:
                await self._conn.scalar(text(f"SELECT pg_advisory_unlock({LOCK_ID_SQL})"), {"k": held.key})
            except Exception as exc:  # the connection broke: the server let go of its locks
                log.warning("the lock connection broke while releasing a lock: %s", type(exc).__name__)
                await self._drop()

    async def _connection(self) -> AsyncConnection:
        if self._conn is not None and not self._conn.closed and not self._conn.invalidated:
            return self._conn
        await self._drop()
        if self._engine is None:
            # no pool of its own: the one connection is opened here and kept until aclose
            self._engine = create_async_engine(self._url, poolclass=NullPool)
        conn = await self._engine.connect()
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        self._conn = conn
        self.generation += 1
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # each step on its own: a broken connection may refuse one and still need the other
        with contextlib.suppress(Exception):
            await conn.invalidate()
        with contextlib.suppress(Exception):
            await conn.close()

    async def aclose(self) -> None:
        """Close the dedicated connection (its locks end with it)."""
        async with self._io:
            await self._drop()
            if self._engine is not None:
                engine, self._engine = self._engine, None
                await engine.dispose()


_registry: weakref.WeakKeyDictionary[AsyncEngine, SessionLocks] = weakref.WeakKeyDictionary()


def locks_for(pool: AsyncEngine) -> SessionLocks:
    """The one lock holder of this pool (pools are per event loop, and so are these)."""
    found = _registry.get(pool)
    if found is None:
        found = _registry[pool] = SessionLocks(pool)
    return found


async def close_for(pool: AsyncEngine) -> None:
    """Close the pool's lock connection, if one was opened (before the pool itself is disposed)."""
    found = _registry.pop(pool, None)
    if found is not None:
        await found.aclose()


def document_key(identity_key: str) -> str:
    """The lock key of a document identity: the same key a writer's transaction lock takes."""
    return identity_key


def idempotency_key(source_id: str, key: str) -> str:
    """The lock key of an idempotency key (its own namespace, apart from document identities)."""
    return f"idempotency:{len(source_id)}:{source_id}/{key}"
