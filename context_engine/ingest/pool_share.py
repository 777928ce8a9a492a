"""The part of a connection pool ingest may use, so that searches always keep the rest.

Ingest and resume runs are bounded twice. A run waits for a *run slot* before it starts (callers
past the bound queue; they never fail for it), and for a *connection slot* before each short
transaction it opens. At most half the pool's connections (``storage.pool_size`` +
``storage.max_overflow``, at least one) are ever held by ingest at once; the other half is left to
searches and reads. A run never holds a connection slot while it waits for another one or for the
embedding model, so ingest cannot deadlock the pool however many callers arrive.

Pools are per event loop (see :mod:`context_engine.storage.database`) and so are these slots: one
share per pool, found by :func:`share_for`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.config import StorageConfig


class IngestShare:
    """Run and connection slots of ingest on one pool."""

    def __init__(self, sql: AsyncEngine, storage: StorageConfig):
        # weak, so that the share (kept per pool in a weak mapping) does not keep its pool alive
        self._sql = weakref.ref(sql)
        #: connections ingest may hold at once, and runs that may be in flight at once
        self.connections = max(1, (storage.pool_size + storage.max_overflow) // 2)
        self.runs = self.connections
        self._connection_slots = asyncio.Semaphore(self.connections)
        self._run_slots = asyncio.Semaphore(self.runs)

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """One ingest or resume run; past ``runs`` in flight, callers wait their turn."""
        async with self._run_slots:
            yield

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A pooled connection counted against ingest's share (autobegin; commit to keep writes)."""
        async with self._connection_slots, self.pool.connect() as conn:
            yield conn

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """One transaction on a connection counted against ingest's share."""
        async with self._connection_slots, self.pool.begin() as conn:
            yield conn

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A connection slot for a call that opens its one connection itself (a repository read)."""
        async with self._connection_slots:
            yield

    @property
    def pool(self) -> AsyncEngine:
        sql = self._sql()
        if sql is None:  # only reachable through a share whose engine was dropped mid-call
            raise RuntimeError("the connection pool of this ingest share is gone")
        return sql


_shares: weakref.WeakKeyDictionary[AsyncEngine, IngestShare] = weakref.WeakKeyDictionary()


def share_for(sql: AsyncEngine, storage: StorageConfig) -> IngestShare:
    """The one share of this pool (every engine view and every run on it uses the same slots)."""
    found = _shares.get(sql)
    if found is None:
        found = _shares[sql] = IngestShare(sql, storage)
    return found
