"""The full-text leg: PostgreSQL text search picks the chunks, BM25 (by default) ranks them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.retrieval import bm25, lexical
from context_engine.storage.custom_plans import planned_per_call
from context_engine.storage.predicates import ReadScope

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig
    from context_engine.retrieval.retriever import Search


async def fts_leg(
    db: AsyncEngine,
    query: str,
    scope: ReadScope,
    *,
    limit: int,
    config: str,
    match: str,
    rank: str,
    normalization: int,
    stopwords: str | Sequence[str] | None = "english",
    bm25_k1: float = 1.2,
    bm25_b: float = 0.75,
    report: dict[str, Any] | None = None,
    strategy: str = "pruned",
) -> list[tuple[int, float]]:
    """Full-text candidates: ``match`` picks the chunks, ``rank`` orders them.

    ``report`` (BM25 only) receives how the ranking was done, and ``strategy`` (BM25 only) picks how
    the top rows are found (the answer is the same): see :func:`bm25.rank`.

    ``rank`` is ``bm25`` (Okapi BM25 in SQL over statistics the caller may see, see
    :mod:`context_engine.retrieval.bm25`), ``ts_rank_cd`` (proximity) or ``ts_rank`` (frequency);
    ``normalization`` is Postgres's length-normalisation bitmask for the latter two.

    Its statements are never prepared: a plan cached for one caller's parameters (or a generic one)
    can be ten times slower for another's (:mod:`context_engine.storage.custom_plans`).
    """
    params: dict[str, Any] = {"lx_cfg": config, "limit": limit, "norm": normalization}
    tsq = lexical.tsquery_sql(query, match=match, params=params, stopwords=stopwords)
    if tsq is None:
        return []
    if rank == "bm25":
        async with db.connect() as pooled, planned_per_call(pooled) as conn:
            return await bm25.rank(
                conn,
                tsquery=tsq,
                terms=lexical.terms_sql(params),
                chunk_predicate=scope.predicate("c", params),
                stats_scope={"principals": scope.principals, "source_ids": scope.source_ids},
                params=params,
                k1=bm25_k1,
                b=bm25_b,
                limit=limit,
                report=report,
                as_of=scope.as_of,
                strategy=strategy,
                plain=scope.groups_decide
                and lexical.plain_disjunction(query, match=match, config=config, stopwords=stopwords),
            )
    rank_fn = "ts_rank_cd" if rank == "ts_rank_cd" else "ts_rank"
    # MATERIALIZED: build the tsquery once; inlined, unaccent (only stable) re-runs per row
    statement = (
        f"WITH q AS MATERIALIZED (SELECT {tsq} AS q) SELECT c.id, {rank_fn}(c.tsv, q.q, :norm) AS r "
        "FROM ce_chunks c, q "
        f"WHERE c.tsv @@ q.q AND {scope.predicate('c', params)} "
        "ORDER BY r DESC, c.id LIMIT :limit"
    )
    async with db.connect() as pooled, planned_per_call(pooled) as conn:
        rows = (await conn.execute(text(statement), params)).all()
    return [(int(r[0]), float(r[1])) for r in rows]


class FullTextLeg:
    """``fts``: lexical matching under ``search.lexical_*`` and ``search.bm25``."""

    name = "fts"
    #: Chosen on one half of BEIR SciFact's test queries and checked on the other, both ways: each half
    #: picked 1.4 from 1.0-2.0 for documents ingested as plain text (benchmarks/README.md, "Beside the
    #: embedded peers", "How the defaults were chosen")
    default_weight = 1.4

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return True

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        cfg = search.services.config.search
        return await fts_leg(
            search.reads,
            search.queries[index],
            search.scope,
            limit=search.limit,
            config=search.services.text_search_config,
            match=cfg.lexical_match,
            rank=cfg.lexical_rank,
            normalization=cfg.lexical_normalization,
            stopwords=cfg.lexical_stopwords,
            bm25_k1=cfg.bm25.k1,
            bm25_b=cfg.bm25.b,
            report=search.usage.setdefault("lexical_pass", {}) if index == 0 else None,
        )
