"""``context-engine check-acl-exposure``: does the vector index lose rows your callers may see?

An approximate index under an ACL ``WHERE`` clause is a post-filter, and how much it loses depends
on how your permissions sit in embedding space, which no benchmark of ours can know. So this check
measures it on your data: for each ACL value that occurs in the stored chunks (the most restrictive
first), it asks as a caller holding just that value, with stored chunk vectors as queries, and scores
against an exact oracle computed inside Postgres:

* ``bare``: a scoped ``ORDER BY embedding <=> q LIMIT k`` with the HNSW index forced and the
  server's own ``hnsw.*`` settings, which is what an application gets whenever Postgres picks the
  index (``pg picks`` says whether Postgres's cost model would pick it for that caller);
* ``library``: this library's vector leg (the planner's exact/approximate choice, and its exact
  fallback).

It is offline and read-only: every connection it opens is ``default_transaction_read_only``,
nothing is migrated, and no embedding provider is called.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.errors import StorageUnavailable
from context_engine.retrieval import planner
from context_engine.retrieval.legs import vector_leg
from context_engine.retrieval.legs.vector import index_order
from context_engine.storage.database import to_driver_url
from context_engine.storage.predicates import ReadScope
from context_engine.storage.vectors import vector_literal

#: force the index and nothing else: ef_search and iterative scan stay whatever the server has
_BARE = {"enable_seqscan": "off", "enable_bitmapscan": "off", "enable_sort": "off"}


@dataclass
class AclExposure:
    """One ACL value: its caller's visible rows and how each way of asking scored."""

    acl: str
    visible: int
    pg_picks: str = ""
    bare_recall: list[float] = field(default_factory=list)
    bare_rows: list[int] = field(default_factory=list)
    library_recall: list[float] = field(default_factory=list)
    library_rows: list[int] = field(default_factory=list)
    library_plans: list[str] = field(default_factory=list)
    fallbacks: int = 0


@dataclass
class ExposureReport:
    total_rows: int
    public_rows: int
    acl_values: int
    top_k: int
    threshold: int
    server_settings: dict[str, str]
    queries: int
    results: list[AclExposure]


def read_only_engine(url: str) -> AsyncEngine:
    """A small pool whose every transaction is read-only at the server, so a write cannot happen."""
    return create_async_engine(
        to_driver_url(url),
        pool_size=1,
        max_overflow=1,
        connect_args={"options": "-c default_transaction_read_only=on"},
    )


async def check_exposure(
    db: AsyncEngine,
    *,
    top_k: int = 10,
    queries: int = 20,
    max_acls: int = 20,
    threshold: int = 20000,
    halfvec: bool = True,
) -> ExposureReport:
    """Score bare index queries and this library's vector leg against the exact oracle, per ACL value
    (``halfvec``: the database's HNSW index is migration 0026's, ``storage.hnsw_halfvec``)."""
    async with db.connect() as conn:
        if not await conn.scalar(text("SELECT to_regclass('ce_chunks') IS NOT NULL")):
            raise StorageUnavailable("this database has no context-engine schema (no ce_chunks table)")
        live = "c.valid_to IS NULL AND c.embedding IS NOT NULL"
        total, public = (
            await conn.execute(
                text(f"SELECT count(*), count(*) FILTER (WHERE c.acl = '{{}}') FROM ce_chunks c WHERE {live}")
            )
        ).one()
        counts = (
            await conn.execute(
                text(f"SELECT p, count(*) FROM ce_chunks c, unnest(c.acl) p WHERE {live} GROUP BY p ORDER BY 2, 1")
            )
        ).all()
        # a deterministic sample of stored vectors, spread over the whole index
        sample = (
            await conn.execute(
                text(f"SELECT c.embedding::text FROM ce_chunks c WHERE {live} ORDER BY md5(c.id::text) LIMIT :n"),
                {"n": queries},
            )
        ).all()
        settings = {}
        for name in ("hnsw.ef_search", "hnsw.iterative_scan", "hnsw.max_scan_tuples"):
            settings[name] = str(await conn.scalar(text("SELECT current_setting(:n, true)"), {"n": name}))
    vectors = [json.loads(row[0]) for row in sample]
    results = [AclExposure(str(acl), int(n) + int(public)) for acl, n in counts[:max_acls]]
    for entry in results:
        scope = ReadScope((entry.acl,))
        entry.pg_picks = await _postgres_choice(db, scope, vectors[0], halfvec) if vectors else ""
        for vector in vectors:
            truth = await _oracle(db, scope, vector, top_k)
            bare = await vector_leg(
                db,
                vector,
                scope,
                limit=top_k,
                plan=planner.VectorPlan(planner.ANN, None, settings=_BARE, allow_fallback=False),
                halfvec=halfvec,
            )
            plan = await planner.plan_vector(db, scope, threshold=threshold, limit=top_k)
            library = await vector_leg(db, vector, scope, limit=top_k, plan=plan, halfvec=halfvec)
            entry.bare_recall.append(_recall(bare, truth))
            entry.bare_rows.append(len(bare))
            entry.library_recall.append(_recall(library, truth))
            entry.library_rows.append(len(library))
            entry.library_plans.append(plan.plan)
            entry.fallbacks += plan.fallback
    return ExposureReport(
        total_rows=int(total),
        public_rows=int(public),
        acl_values=len(counts),
        top_k=top_k,
        threshold=threshold,
        server_settings=settings,
        queries=len(vectors),
        results=results,
    )


async def _oracle(db: AsyncEngine, scope: ReadScope, vector: list[float], k: int) -> list[int]:
    params: dict[str, Any] = {"qv": vector_literal(vector), "k": k}
    statement = (
        "SELECT c.id FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
        f"AND {scope.predicate('c', params)} ORDER BY (c.embedding <=> CAST(:qv AS vector)) + 0, c.id LIMIT :k"
    )
    async with db.connect() as conn:
        return [int(r[0]) for r in (await conn.execute(text(statement), params)).all()]


async def _postgres_choice(db: AsyncEngine, scope: ReadScope, vector: list[float], halfvec: bool) -> str:
    """``index`` or ``exact``: the plan Postgres's cost model picks for the bare query, unforced."""
    params: dict[str, Any] = {"qv": vector_literal(vector)}
    statement = (
        "EXPLAIN (FORMAT JSON) SELECT c.id FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
        f"AND {scope.predicate('c', params)} ORDER BY {index_order(vector, halfvec=halfvec)} LIMIT 10"
    )
    async with db.connect() as conn:
        plan = await conn.scalar(text(statement), params)
    shown = json.dumps(plan) if not isinstance(plan, str) else plan
    return "index" if "ix_ce_chunks_embedding" in shown else "exact"


def _recall(found: list[tuple[int, float]], truth: list[int]) -> float:
    if not truth:
        return 1.0
    return len({cid for cid, _ in found} & set(truth)) / len(truth)


def format_report(report: ExposureReport) -> str:
    """The table the command prints, with a verdict line per way of asking."""
    k = report.top_k
    header = [
        "ACL value",
        "visible",
        "share",
        "pg picks",
        f"bare recall@{k}",
        "bare short",
        "bare empty",
        f"library recall@{k}",
        "library short",
        "library plan",
    ]
    rows = []
    for e in report.results:
        n = max(1, len(e.bare_rows))
        plans = sorted(set(e.library_plans))
        plan = "/".join(plans) + (f" ({e.fallbacks} fallback)" if e.fallbacks else "")
        rows.append(
            [
                e.acl,
                f"{e.visible:,}",
                f"{e.visible / max(1, report.total_rows):.1%}",
                e.pg_picks,
                f"{sum(e.bare_recall) / n:.3f}",
                f"{sum(r < min(k, e.visible) for r in e.bare_rows) / n:.0%}",
                f"{sum(r == 0 for r in e.bare_rows) / n:.0%}",
                f"{sum(e.library_recall) / n:.3f}",
                f"{sum(r < min(k, e.visible) for r in e.library_rows) / n:.0%}",
                plan,
            ]
        )
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        f"{report.total_rows:,} searchable chunks ({report.public_rows:,} public), {report.acl_values} ACL values; "
        f"{report.queries} stored vectors as queries, top {k}; threshold {report.threshold:,}; server "
        + ", ".join(f"{n}={v}" for n, v in report.server_settings.items()),
        "",
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    if len(report.results) < report.acl_values:
        lines.append(f"... {report.acl_values - len(report.results)} broader ACL values not checked (--max-acls)")
    exposed = [e for e in report.results if e.bare_recall and min(e.bare_recall) < 1.0]
    lost = [e for e in report.results if e.library_recall and min(e.library_recall) < 1.0]
    lines.append("")
    if not report.results or not report.queries:
        lines.append("nothing to check: no chunk with a vector carries an ACL")
    else:
        lines.append(
            f"bare index query: {len(exposed)} of {len(report.results)} ACL values lost rows an exact search returns"
        )
        lines.append(f"this library: {len(lost)} of {len(report.results)} ACL values lost rows")
    return "\n".join(lines)
