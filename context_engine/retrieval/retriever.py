"""The one retriever: every registered leg, run concurrently for each query, under one read scope.

``engine.search`` runs it for one query and fuses with ``fusion.method``; ``knowledge_query`` runs
it for the question and its sub-queries and fuses every (leg, query) ranking by RRF. Both take the
legs, their weights and the names in ``matched_by`` from :mod:`context_engine.retrieval.registry`,
so a new leg is one module and one ``register`` call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from context_engine.retrieval import fusion, registry
from context_engine.retrieval.leg import Leg, Search, elapsed_ms
from context_engine.services import Services
from context_engine.storage.predicates import ReadScope


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
        registry.weights(services.config.fusion.weights)  # a misspelt leg is refused now, not at the first search
        self.services = services

    def weights(self) -> dict[str, float]:
        """Every registered leg's fusion weight: ``fusion.weights`` where it names the leg, else the leg's default."""
        return registry.weights(self.services.config.fusion.weights)

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
        if any(getattr(leg, "embeds_queries", False) for legs in active for leg in legs):
            # scheduled before the legs: the model starts while their statements are being sent,
            # instead of after the first leg's synchronous part (a few ms on the critical path)
            search.vectors()
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
            elapsed = elapsed_ms(started)
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
