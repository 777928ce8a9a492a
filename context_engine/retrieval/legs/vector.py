"""The vector leg: cosine similarity over pgvector, exact or through the HNSW index as planned."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql as pgsql
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.errors import StorageUnavailable
from context_engine.retrieval import planner, query_shape
from context_engine.retrieval.planner import VectorPlan
from context_engine.storage import layout
from context_engine.storage.predicates import ReadScope
from context_engine.storage.vectors import vector_literal

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig
    from context_engine.retrieval.retriever import Search


def index_order(query_vector: Sequence[float], *, halfvec: bool) -> str:
    """The distance the HNSW index serves: over ``embedding::halfvec(dim)`` when the index is migration
    0026's (the same expression as its definition, or Postgres would not use it), else the column's."""
    if not halfvec:
        return "c.embedding <=> CAST(:qv AS vector)"
    dim = len(query_vector)
    return f"CAST(c.embedding AS halfvec({dim})) <=> CAST(CAST(:qv AS vector) AS halfvec({dim}))"


async def vector_leg(
    db: AsyncEngine,
    query_vector: Sequence[float],
    scope: ReadScope,
    *,
    limit: int,
    plan: VectorPlan,
    halfvec: bool = True,
) -> list[tuple[int, float]]:
    """Cosine similarity under ``plan``, which this leg forces.

    ``exact`` orders by an expression the index cannot serve, so Postgres scans the eligible rows
    (GIN bitmap or sequential) and sorts them. ``probe`` reads the index's nearest rows unfiltered
    and keeps the caller's: with ``limit`` of them among those read (or the whole index read) that is
    the exact answer, otherwise the leg runs ``plan.on_miss`` (``plan.fallback``). ``ann`` runs a
    forced, iterative HNSW scan; when it comes back with fewer than ``limit`` rows while the estimate
    says more rows exist, its budget ran out among rows the caller may not see, and the leg re-runs
    exactly (``plan.fallback``).

    ``halfvec`` (``storage.hnsw_halfvec``): the index orders by half-precision distance; the rows it
    yields are still scored, re-sorted and proven in float4, and the exact scan never uses it.
    """
    params: dict[str, Any] = {"qv": vector_literal(query_vector), "limit": limit}
    predicate = scope.predicate("c", params)
    served = index_order(query_vector, halfvec=halfvec)

    def query(order: str) -> Any:
        return text(
            "SELECT c.id, 1 - (c.embedding <=> CAST(:qv AS vector)) AS sim FROM ce_chunks c "
            f"WHERE c.embedding IS NOT NULL AND {predicate} ORDER BY {order} LIMIT :limit"
        )

    if plan.plan == planner.PROBE:
        rows_read, settings = planner.probe_settings(plan, limit)
        probe = text(
            "WITH near AS MATERIALIZED (SELECT c.id, c.embedding <=> CAST(:qv AS vector) AS d, "
            f"({predicate}) AS ok FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
            f"ORDER BY {served} LIMIT :probe_rows) "
            "SELECT id, 1 - d, (SELECT count(*) FROM near) FROM near WHERE ok ORDER BY d, id LIMIT :limit"
        )
        async with db.connect() as conn:
            rows = await _forced_index_scan(conn, probe, params | {"probe_rows": rows_read}, settings)
        # proof: limit of the caller's rows among the nearest read, or the whole index read
        if len(rows) >= limit or (rows and int(rows[0][2]) < rows_read):
            return [(int(r[0]), float(r[1])) for r in rows]
        plan.fallback = True
        if plan.on_miss != planner.ANN:
            return await _exact(db, query, params)
    if plan.plan in (planner.ANN, planner.PROBE):
        settings = plan.settings if plan.settings is not None else planner.ann_settings(plan, limit)
        async with db.connect() as conn:
            rows = await _forced_index_scan(conn, query(served), params, settings)
        if len(rows) >= limit or not plan.allow_fallback or (plan.eligible is not None and plan.eligible <= len(rows)):
            pairs = [(int(r[0]), float(r[1])) for r in rows]
            pairs.sort(key=lambda p: (-p[1], p[0]))  # relaxed order returns near-sorted rows
            return pairs
        plan.fallback = True
    return await _exact(db, query, params)


async def _exact(db: AsyncEngine, query: Callable[[str], Any], params: dict[str, Any]) -> list[tuple[int, float]]:
    """The eligible rows scanned and sorted: ordered by an expression no index can serve."""
    async with db.connect() as conn:
        rows = (await conn.execute(query("(c.embedding <=> CAST(:qv AS vector)) + 0"), params)).all()
    return [(int(r[0]), float(r[1])) for r in rows]


async def _forced_index_scan(
    conn: AsyncConnection, statement: TextClause, params: dict[str, Any], settings: dict[str, str]
) -> list[tuple[Any, ...]]:
    """``statement`` under transaction-local ``settings``, in one round trip.

    The settings must be in force when the query is planned, so they are a statement of their own
    inside the query's transaction, and psycopg's pipeline sends both together instead of waiting
    for each (under load every round trip is a wake-up of both processes). On an autocommit
    connection (the search path's) no BEGIN or COMMIT is sent: statements sent before one protocol
    Sync run in one implicit transaction, which the Sync at the end of the pipeline closes, and the
    settings with it. Every value is still a bound parameter.
    """
    values: dict[str, str] = {}
    for i, (name, value) in enumerate(settings.items()):
        values[f"g{i}"], values[f"s{i}"] = name, value
    gucs = ", ".join(f"set_config(%(g{i})s, %(s{i})s, true)" for i in range(len(settings)))
    # On a distributed (Citus) schema the shards plan the scan: Citus passes SET LOCAL on to the shards'
    # connections (citus.propagate_set_commands, set by migrations/citus/), never set_config
    distributed = await layout.distributed(conn)
    compiled = statement.compile(dialect=conn.dialect)
    raw = (await conn.get_raw_connection()).driver_connection
    assert raw is not None  # a checked-out connection always has its driver connection
    args = compiled.construct_params(params)
    try:
        if distributed or not raw.autocommit:
            async with raw.pipeline(), raw.transaction():
                if distributed:
                    for name, value in settings.items():
                        await raw.execute(pgsql.SQL("SET LOCAL {} = {}").format(_setting(name), pgsql.Literal(value)))
                else:
                    await raw.execute(f"SELECT {gucs}", values)
                cursor = await raw.execute(compiled.string, args)
            return list(await cursor.fetchall())
        # an autocommit read: the settings and the query share the implicit transaction that the
        # pipeline's one Sync ends (psycopg's transaction block would add synchronisations, and
        # BEGIN and COMMIT two statements, to every search)
        try:
            async with raw.pipeline():
                await raw.execute(f"SELECT {gucs}", values)
                cursor = await raw.execute(compiled.string, args)
            return list(await cursor.fetchall())
        except BaseException:
            if not raw.closed and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):  # the block's own error is the one to raise
                    await raw.execute("ROLLBACK")  # not left open on the pooled connection
            raise
    except psycopg.OperationalError as exc:  # the driver's own error: SQLAlchemy's translation is bypassed
        raise StorageUnavailable("the database could not be reached; retry shortly") from exc


def _setting(name: str) -> pgsql.Composable:
    """A setting's name for ``SET LOCAL`` (``hnsw.ef_search``: each part an identifier)."""
    return pgsql.SQL(".").join(pgsql.Identifier(part) for part in name.split("."))


async def plan_for(db: AsyncEngine, scope: ReadScope, config: ContextEngineConfig, *, limit: int = 10) -> VectorPlan:
    """The planner's choice under ``storage.ann_*``; see :func:`planner.plan_vector`."""
    storage = config.storage
    return await planner.plan_vector(
        db,
        scope,
        threshold=storage.ann_exact_threshold,
        unfiltered_min_rows=storage.ann_unfiltered_min_rows,
        spread_min_share=storage.ann_spread_min_share,
        limit=limit,
        priority=storage.ann_priority,
    )


class VectorLeg:
    """``vector``: the query embedded by the configured model, matched by cosine similarity."""

    name = "vector"
    default_weight = 1.0
    embeds_queries = True

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return True

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        config = search.services.config
        vectors, plan = await asyncio.gather(
            search.vectors(),
            search.once("vector_plan", lambda: plan_for(search.reads, search.scope, config, limit=search.limit)),
        )
        halfvec = config.storage.hnsw_halfvec
        found = await vector_leg(
            search.reads, vectors[index], search.scope, limit=search.limit, plan=plan, halfvec=halfvec
        )
        search.usage["vector_plan"] = plan.usage()
        if config.search.vector_floor == "adaptive":
            floor = query_shape.vector_floor(search.queries[index])
            found = [pair for pair in found if pair[1] >= floor]
        return found
