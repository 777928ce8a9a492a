"""The one retriever: every registered leg, run concurrently for each query, under one read scope.

``engine.search`` runs it for one query and fuses with ``fusion.method``; ``knowledge_query`` runs
it for the question and its sub-queries and fuses every (leg, query) ranking by RRF. Both take the
legs, their weights and the names in ``matched_by`` from :mod:`context_engine.retrieval.registry`,
so a new leg is one module and one ``register`` call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.retrieval import fusion, registry
from context_engine.retrieval.registry import Leg
from context_engine.services import Services
from context_engine.storage.predicates import ReadScope


def _ms(started: float) -> float:
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
            self.timings["embed"] = _ms(started)

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


@dataclass
class Retrieval:
    """Each leg's candidates per query, in registry order, and what the legs reported."""

    legs: list[str]
    results: dict[str, list[list[tuple[int, float]]]]
    usage: dict[str, Any]
    timings: dict[str, float]
    vectors: list[list[float]] | None

    def for_query(self, index: int = 0) -> dict[str, list[tuple[int, float]]]:
        """``{leg: [(chunk_id, score)]}`` for one query."""
        return {leg: per_query[index] for leg, per_query in self.results.items()}

    def rankings(self) -> dict[str, list[tuple[int, float]]]:
        """Every (leg, query) list, keyed ``leg:index``: one ranking each in a multi-query fusion."""
        return {f"{leg}:{i}": pairs for leg, per_query in self.results.items() for i, pairs in enumerate(per_query)}

    def found_by(self) -> dict[int, list[str]]:
        """For each candidate, the legs that returned it for any query, in registry order."""
        found: dict[int, list[str]] = {}
        for leg in self.legs:
            for pairs in self.results.get(leg, []):
                for chunk_id, _ in pairs:
                    names = found.setdefault(chunk_id, [])
                    if not names or names[-1] != leg:
                        names.append(leg)
        return found


class Retriever:
    """Runs the registered legs for a set of queries under one read scope."""

    def __init__(self, services: Services):
        self.services = services

    def weights(self) -> dict[str, float]:
        """Every registered leg's fusion weight: ``fusion.weights`` where it names the leg, else the leg's default."""
        configured = self.services.config.fusion.weights
        return {leg.name: configured.get(leg.name, leg.default_weight) for leg in registry.legs()}

    def active(self, query: str) -> list[Leg]:
        """The legs that run for ``query``: weighted above 0 and applicable."""
        weights = self.weights()
        config = self.services.config
        return [leg for leg in registry.legs() if weights[leg.name] > 0 and leg.applies(query, config)]

    async def retrieve(self, queries: list[str], scope: ReadScope, limit: int, mode: str = "auto") -> Retrieval:
        """Every active leg for every query, concurrently; ``limit`` candidates per (leg, query)."""
        db = await self.services.read_db()  # a read replica when the read was given one
        search = Search(self.services, db, await self.services.reads(), list(queries), scope, limit, mode)
        active = [self.active(q) for q in queries]
        runs: list[tuple[str, int, Awaitable[list[tuple[int, float]]]]] = []
        names: list[str] = []
        for leg in registry.legs():
            indexes = [i for i in range(len(queries)) if leg in active[i]]
            if indexes:
                names.append(leg.name)
            runs.extend((leg.name, i, self._timed(search, leg, i)) for i in indexes)
        try:
            found = await asyncio.gather(*(run for _, _, run in runs))
            vectors = search.embedded()
        finally:
            search.close()
        results: dict[str, list[list[tuple[int, float]]]] = {name: [[] for _ in queries] for name in names}
        for (name, i, _), pairs in zip(runs, found, strict=True):
            results[name][i] = pairs
        return Retrieval(names, results, search.usage, search.timings, vectors)

    @staticmethod
    async def _timed(search: Search, leg: Leg, index: int) -> list[tuple[int, float]]:
        started = time.perf_counter()
        try:
            return await leg.run(search, index)
        finally:
            elapsed = _ms(started)
            search.timings[leg.name] = max(elapsed, search.timings.get(leg.name, 0.0))

    def fuse(
        self, method: str, rankings: dict[str, list[tuple[int, float]]], extra_weights: dict[str, float] | None = None
    ) -> list[tuple[int, float]]:
        """The one fusion step. A ranking keyed ``leg`` or ``leg:index`` takes that leg's weight;
        ``extra_weights`` weighs rankings that are not legs (knowledge's list-shaped candidates)."""
        weights = self.weights()
        keyed = {key: weights.get(key.split(":", 1)[0], 0.0) for key in rankings}
        keyed.update(extra_weights or {})
        by_document = {leg.name for leg in registry.legs() if getattr(leg, "scores_documents", False)}
        shared = [key for key in rankings if key.split(":", 1)[0] in by_document]
        return fusion.fuse(method, rankings, keyed, self.services.config.fusion.k, shared)
