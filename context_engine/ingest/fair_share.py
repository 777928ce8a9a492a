"""Embedding requests of every ingest in a process, served in turns across documents.

Without it a large document (tens of thousands of chunks, ``embedding.max_concurrency`` requests in
flight) keeps the provider (or the local model, which runs one batch at a time) busy, and a one-line
ingest arriving meanwhile queues behind every batch the large one has ready. Here each run asks for a
turn before each request; at most ``embedding.max_inflight`` requests are in flight (one for the
local model), and a freed turn goes to the next *run* in round-robin order, not to the next request,
so a small document waits for at most one request of each other run, however large they are.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from context_engine.embeddings.base import Embedder


class FairGate:
    """Turns for embedding requests, ``slots`` at a time, round robin across owners (runs)."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self.in_flight = 0
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}
        self._order: collections.deque[str] = collections.deque()

    @asynccontextmanager
    async def turn(self, owner: str) -> AsyncIterator[None]:
        """One request's turn for ``owner``; released when the block ends."""
        await self._acquire(owner)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, owner: str) -> None:
        if self.in_flight < self.slots and not self._order:
            self.in_flight += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(owner, collections.deque())
        queue.append(turn)
        if owner not in self._order:
            self._order.append(owner)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._release()  # granted as it was cancelled: pass the turn on
            else:
                self._forget(owner, turn)
            raise

    def _release(self) -> None:
        self.in_flight -= 1
        while self._order and self.in_flight < self.slots:
            owner = self._order.popleft()
            queue = self._waiting.get(owner)
            if not queue:
                self._waiting.pop(owner, None)
                continue
            turn = queue.popleft()
            if queue:
                self._order.append(owner)  # its next request waits for every other run's turn
            else:
                del self._waiting[owner]
            self.in_flight += 1
            turn.set_result(None)

    def _forget(self, owner: str, turn: asyncio.Future[None]) -> None:
        queue = self._waiting.get(owner)
        if queue is None:
            return
        try:
            queue.remove(turn)
        except ValueError:
            return
        if not queue:
            del self._waiting[owner]
            try:
                self._order.remove(owner)
            except ValueError:
                pass


_gates: weakref.WeakKeyDictionary[Embedder, dict[asyncio.AbstractEventLoop, FairGate]] = weakref.WeakKeyDictionary()


def gate_for(embedder: Embedder, max_inflight: int) -> FairGate:
    """The one gate of this embedder on the running loop (the local model: one request at a time)."""
    loop = asyncio.get_running_loop()
    per_loop = _gates.setdefault(embedder, {})
    for dead in [lp for lp in per_loop if lp.is_closed()]:
        per_loop.pop(dead)
    found = per_loop.get(loop)
    if found is None:
        found = per_loop[loop] = FairGate(1 if embedder.provider == "local" else max_inflight)
    return found
