"""The search legs. Each returns ``[(chunk_id, leg_score)]`` best first, under the shared
visibility predicate, with the query text bound as a parameter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.retrieval import bm25, lexical, planner
from context_engine.retrieval.planner import VectorPlan
from context_engine.storage.predicates import visibility


@dataclass
class Scope:
    """Who asks and what they narrowed to; turned into the shared SQL predicate."""

    principals: tuple[str, ...] | None
    source_ids: Sequence[str] | None = None
    document_ids: Sequence[str] | None = None

    def predicate(self, alias: str, params: dict[str, Any]) -> str:
        return visibility(
            alias,
            params,
            principals=self.principals,
            source_ids=self.source_ids,
            document_ids=self.document_ids,
        )


def vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


async def fts_leg(
    db: AsyncEngine,
    query: str,
    scope: Scope,
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
) -> list[tuple[int, float]]:
    """Full-text candidates: ``match`` picks the chunks, ``rank`` orders them.

    ``report`` (BM25 only) receives how the ranking was done: see :func:`bm25.rank`.

    ``rank`` is ``bm25`` (Okapi BM25 in SQL over statistics the caller may see, see
    :mod:`context_engine.retrieval.bm25`), ``ts_rank_cd`` (proximity) or ``ts_rank`` (frequency);
    ``normalization`` is Postgres's length-normalisation bitmask for the latter two.
    """
    params: dict[str, Any] = {"lx_cfg": config, "limit": limit, "norm": normalization}
    tsq = lexical.tsquery_sql(query, match=match, params=params, stopwords=stopwords)
    if tsq is None:
        return []
    if rank == "bm25":
        async with db.connect() as conn:
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
            )
    rank_fn = "ts_rank_cd" if rank == "ts_rank_cd" else "ts_rank"
    # MATERIALIZED: build the tsquery once; inlined, unaccent (only stable) re-runs per row
    sql = (
        f"WITH q AS MATERIALIZED (SELECT {tsq} AS q) SELECT c.id, {rank_fn}(c.tsv, q.q, :norm) AS r "
        "FROM ce_chunks c, q "
        f"WHERE c.valid_to IS NULL AND c.tsv @@ q.q AND {scope.predicate('c', params)} "
        "ORDER BY r DESC, c.id LIMIT :limit"
    )
    async with db.connect() as conn:
        rows = (await conn.execute(text(sql), params)).all()
    return [(int(r[0]), float(r[1])) for r in rows]


async def trigram_leg(
    db: AsyncEngine, query: str, scope: Scope, *, limit: int, threshold: float
) -> list[tuple[int, float]]:
    params: dict[str, Any] = {"q": query, "limit": limit, "t": str(threshold)}
    sql = (
        "SELECT c.id, word_similarity(:q, c.text) AS s FROM ce_chunks c "
        f"WHERE c.valid_to IS NULL AND :q <% c.text AND {scope.predicate('c', params)} "
        "ORDER BY s DESC, c.id LIMIT :limit"
    )
    async with db.begin() as conn:
        await conn.execute(text("SELECT set_config('pg_trgm.word_similarity_threshold', :t, true)"), params)
        rows = (await conn.execute(text(sql), params)).all()
    return [(int(r[0]), float(r[1])) for r in rows]


#: exact scan of the eligible rows or the HNSW index: see :mod:`context_engine.retrieval.planner`
plan_vector = planner.plan_vector


async def vector_leg(
    db: AsyncEngine, query_vector: Sequence[float], scope: Scope, *, limit: int, plan: VectorPlan
) -> list[tuple[int, float]]:
    """Cosine similarity under ``plan``, which this leg forces.

    ``exact`` orders by an expression the index cannot serve, so Postgres scans the eligible rows
    (GIN bitmap or sequential) and sorts them. ``ann`` runs a forced, iterative HNSW scan; when it
    comes back with fewer than ``limit`` rows while the estimate says more rows exist, its budget ran
    out among rows the caller may not see, and the leg re-runs exactly (``plan.fallback``).
    """
    params: dict[str, Any] = {"qv": vector_literal(query_vector), "limit": limit}
    predicate = scope.predicate("c", params)

    def query(order: str) -> Any:
        return text(
            "SELECT c.id, 1 - (c.embedding <=> CAST(:qv AS vector)) AS sim FROM ce_chunks c "
            f"WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL AND {predicate} ORDER BY {order} LIMIT :limit"
        )

    if plan.plan == planner.ANN:
        settings = plan.settings if plan.settings is not None else planner.ann_settings(plan, limit)
        values: dict[str, str] = {}
        for i, (name, value) in enumerate(settings.items()):
            values[f"g{i}"], values[f"s{i}"] = name, value
        gucs = ", ".join(f"set_config(:g{i}, :s{i}, true)" for i in range(len(settings)))
        async with db.begin() as conn:  # transaction-local settings, one round trip
            await conn.execute(text(f"SELECT {gucs}"), values)
            rows = (await conn.execute(query("c.embedding <=> CAST(:qv AS vector)"), params)).all()
        if len(rows) >= limit or not plan.allow_fallback or (plan.eligible is not None and plan.eligible <= len(rows)):
            pairs = [(int(r[0]), float(r[1])) for r in rows]
            pairs.sort(key=lambda p: (-p[1], p[0]))  # relaxed order returns near-sorted rows
            return pairs
        plan.fallback = True
    async with db.connect() as conn:
        rows = (await conn.execute(query("(c.embedding <=> CAST(:qv AS vector)) + 0"), params)).all()
    return [(int(r[0]), float(r[1])) for r in rows]
