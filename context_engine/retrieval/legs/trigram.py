"""The trigram leg: typo-tolerant matching by ``pg_trgm`` word similarity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.retrieval import query_shape
from context_engine.storage.predicates import ReadScope

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig
    from context_engine.retrieval.retriever import Search


async def trigram_leg(
    db: AsyncEngine, query: str, scope: ReadScope, *, limit: int, threshold: float
) -> list[tuple[int, float]]:
    params: dict[str, Any] = {"q": query, "limit": limit, "t": str(threshold)}
    statement = (
        "SELECT c.id, word_similarity(:q, c.text) AS s FROM ce_chunks c "
        f"WHERE :q <% c.text AND {scope.predicate('c', params)} "
        "ORDER BY s DESC, c.id LIMIT :limit"
    )
    async with db.begin() as conn:
        await conn.execute(text("SELECT set_config('pg_trgm.word_similarity_threshold', :t, true)"), params)
        rows = (await conn.execute(text(statement), params)).all()
    return [(int(r[0]), float(r[1])) for r in rows]


class TrigramLeg:
    """``trigram``: off by default (weight 0).

    On SciFact no weight of it raised nDCG@10 while it cost 1.3-3.2 s per query over 9,000 chunks
    (benchmarks/README.md); turn it on (e.g. 0.2) for typo-tolerant lookups on small corpora.
    """

    name = "trigram"
    default_weight = 0.0

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        most = config.search.trgm_max_query_words
        return most is None or query_shape.length_units(query) <= most

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        query = search.queries[index]
        threshold = search.services.config.search.trgm_limit or query_shape.trigram_threshold(query)
        return await trigram_leg(search.db, query, search.scope, limit=search.limit, threshold=threshold)
