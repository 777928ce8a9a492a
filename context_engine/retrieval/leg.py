"""What a search leg is, and the :class:`Search` every leg reads while one retrieval runs.

Kept below both the registry (which holds legs) and the retriever (which runs them), so that
each can name a leg's type without importing the other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.services import Services
from context_engine.storage.predicates import ReadScope

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig


class Leg(Protocol):
    name: str
    default_weight: float

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        """Whether this leg runs for ``query`` (its weight is checked by the retriever)."""
        ...

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        """Candidates for ``search.queries[index]``: ``(chunk_id, score)``, higher is better, best first."""
        ...


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


@dataclass
class Search:
    """One retrieval in flight: what every leg reads, and what they share.

    The queries are embedded in one call, at most once, by whichever leg asks first; ``once`` does
    the same for any other per-search value (the vector plan). Legs report into ``usage``.
    """

    services: Services
    db: AsyncEngine
    #: ``db`` in autocommit: a leg's plain reads, without a BEGIN and a ROLLBACK round trip each
    reads: AsyncEngine
    queries: list[str]
    scope: ReadScope
    limit: int
    #: ``auto``, ``hybrid`` or ``graph`` (see the graph leg)
    mode: str = "auto"
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _shared: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    def once(self, key: str, factory: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        """``factory()``'s result, computed by the first caller and shared with the rest."""
        task = self._shared.get(key)
        if task is None:
            task = self._shared[key] = asyncio.ensure_future(factory())
        return task

    def vectors(self) -> Awaitable[list[list[float]]]:
        """The queries' embeddings, one provider call for all of them."""
        return self.once("vectors", self._embed)

    async def _embed(self) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await self.services.embedder.embed(list(self.queries), kind="query")
        finally:
            self.timings["embed"] = elapsed_ms(started)

    def embedded(self) -> list[list[float]] | None:
        """The query vectors if a leg computed them, without computing them."""
        task = self._shared.get("vectors")
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()

    def close(self) -> None:
        for task in self._shared.values():
            if not task.done():
                task.cancel()
