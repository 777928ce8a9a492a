"""The vector leg for a caller who filters nothing, on a small store: the exact scan against HNSW.

    python benchmarks/beir/vector_plans.py --data PATH/TO/scifact --cache PATH/TO/cache --store DIR

The store is the one ``halves.py`` builds (SciFact as plain text, kept between runs). For each test
query (embedded once, before timing) the leg runs under every plan in turn, the plans alternating
query by query so the machine's load falls on all of them: the exact scan, and the HNSW index at
several ``ef_search`` values (pgvector's iterative scan, relaxed order, as the planner sets it for an
unfiltered caller). Printed per plan: p50/p95 of the leg's wall time and of the statement's server
time (``EXPLAIN (ANALYZE)``'s execution time, run as a separate pass), and recall of the exact
``limit`` nearest rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from halves import build, load_average, store_parser  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402

from context_engine import ContextEngine  # noqa: E402
from context_engine.evaluation import BeirDataset, load_beir, percentile  # noqa: E402
from context_engine.retrieval import planner  # noqa: E402
from context_engine.retrieval.legs.vector import vector_leg  # noqa: E402
from context_engine.retrieval.planner import VectorPlan  # noqa: E402
from context_engine.storage.predicates import ReadScope  # noqa: E402
from context_engine.storage.vectors import vector_literal  # noqa: E402

EXACT = "exact"


def plan_for(name: str, rows: int) -> VectorPlan:
    if name == EXACT:
        return VectorPlan(planner.EXACT, rows, rows)
    ef = int(name.removeprefix("ef"))
    settings = planner.index_settings(ef, "relaxed_order", planner.DEFAULT_MAX_SCAN_TUPLES)
    return VectorPlan(planner.ANN, rows, rows, unfiltered=True, settings=settings, allow_fallback=False)


async def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    queries = [dataset.queries[q] for q in dataset.qrels if q in dataset.queries][: args.queries]
    engine = await build(dataset, args.store, args.cache)
    db = await engine.database()
    async with db.connect() as conn:
        rows = int(await conn.scalar(text("SELECT count(*) FROM ce_chunks WHERE embedding IS NOT NULL")) or 0)
    embedder = engine.services.embedder
    vectors = [list(v) for v in await embedder.embed(queries)]
    names = [EXACT] + [f"ef{ef}" for ef in args.ef]
    scope = ReadScope(None)
    wall: dict[str, list[float]] = {n: [] for n in names}
    recall: dict[str, list[float]] = {n: [] for n in names}
    print(f"{rows} chunks with vectors, {len(queries)} queries, limit {args.limit}, load {load_average()}", flush=True)
    for warm in vectors[:5]:
        for name in names:
            await vector_leg(db, warm, scope, limit=args.limit, plan=plan_for(name, rows))
    for i, vector in enumerate(vectors):
        order = names[i % len(names) :] + names[: i % len(names)]
        found: dict[str, set[int]] = {}
        for name in order:
            started = time.perf_counter()
            hits = await vector_leg(db, vector, scope, limit=args.limit, plan=plan_for(name, rows))
            wall[name].append((time.perf_counter() - started) * 1000)
            found[name] = {chunk for chunk, _ in hits}
        for name in names:
            recall[name].append(len(found[name] & found[EXACT]) / max(1, len(found[EXACT])))
    server = await server_times(db, vectors, names, rows, args.limit)
    print(f"load at the end {load_average()}")
    print(f"| plan | leg p50 / p95 ms | statement server p50 / p95 ms | recall@{args.limit} vs exact |")
    print("|---|---|---|---|")
    for name in names:
        w, s = wall[name], server[name]
        print(
            f"| {name} | {percentile(w, 50):.1f} / {percentile(w, 95):.1f} | "
            f"{percentile(s, 50):.2f} / {percentile(s, 95):.2f} | {sum(recall[name]) / len(recall[name]):.4f} |"
        )
    if args.search:
        await search_quality(engine, dataset, args)
    await engine.aclose()


async def server_times(
    db: AsyncEngine, vectors: list[list[float]], names: list[str], rows: int, limit: int
) -> dict[str, list[float]]:
    """Execution time of the leg's statement as the server reports it, per plan."""
    out: dict[str, list[float]] = {n: [] for n in names}
    for vector in vectors:
        for name in names:
            plan = plan_for(name, rows)
            order = "c.embedding <=> CAST(:qv AS vector)"
            if name == EXACT:
                order = f"({order}) + 0"  # no index serves it: the rows are scanned and sorted
            statement = text(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT c.id, 1 - (c.embedding <=> CAST(:qv AS vector)) "
                f"FROM ce_chunks c WHERE c.embedding IS NOT NULL AND c.valid_to IS NULL ORDER BY {order} LIMIT :limit"
            )
            async with db.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                assert raw is not None
                async with raw.transaction():
                    for key, value in (plan.settings or {}).items():
                        await raw.execute("SELECT set_config(%s, %s, true)", (key, value))
                    compiled = statement.compile(dialect=conn.dialect)
                    cursor = await raw.execute(
                        compiled.string, compiled.construct_params({"qv": vector_literal(vector), "limit": limit})
                    )
                    fetched = await cursor.fetchone()
                    assert fetched is not None
                    result = fetched[0]
            doc = result if isinstance(result, list) else json.loads(result)
            out[name].append(float(doc[0]["Execution Time"]))
    return out


def variants(spec: list[str]) -> list[tuple[int, float]]:
    """``BASE:PER_ROW`` pairs: the unfiltered ``ef_search`` of a small index and its multiple of the rows asked."""
    return [(int(v.split(":")[0]), float(v.split(":")[1])) for v in spec]


async def search_quality(engine: ContextEngine, dataset: BeirDataset, args: argparse.Namespace) -> None:
    """``search(top_k=100, group_by="document")`` under each variant, alternating query by query.

    The variant is set on the planner's module constants in this process (the measurement's only
    knob; ``UNFILTERED_SMALL_EF_SEARCH`` applies up to ``UNFILTERED_SMALL_ROWS`` rows): nDCG@10 and
    R@100 of documents on all queries and on the fixed halves, and wall p50/p95.
    """
    from context_engine import TRUSTED
    from context_engine.evaluation import ndcg_at_k, recall_at_k

    qids = [q for q in dataset.qrels if q in dataset.queries][: args.queries]
    chosen = variants(args.search)
    names = [f"ef {b} / {r:g}x rows" for b, r in chosen]
    wall: dict[str, list[float]] = {n: [] for n in names}
    ndcg: dict[str, dict[str, float]] = {n: {} for n in names}
    rec: dict[str, dict[str, float]] = {n: {} for n in names}
    plans: dict[str, list[int]] = {n: [] for n in names}
    saved = planner.UNFILTERED_SMALL_EF_SEARCH, planner.UNFILTERED_EF_PER_ROW
    try:
        for i, qid in enumerate(qids):
            for j in [(i + k) % len(chosen) for k in range(len(chosen))]:
                planner.UNFILTERED_SMALL_EF_SEARCH, planner.UNFILTERED_EF_PER_ROW = chosen[j]
                started = time.perf_counter()
                result = await engine.search(dataset.queries[qid], top_k=100, group_by="document", principals=TRUSTED)
                wall[names[j]].append((time.perf_counter() - started) * 1000)
                ranked = [d.document_name for d in result.documents or []]
                ndcg[names[j]][qid] = ndcg_at_k(ranked, dataset.qrels[qid])
                rec[names[j]][qid] = recall_at_k(ranked, dataset.qrels[qid])
                plans[names[j]].append(int(result.usage.get("vector_plan", {}).get("ef_search") or 0))
    finally:
        planner.UNFILTERED_SMALL_EF_SEARCH, planner.UNFILTERED_EF_PER_ROW = saved
    first, second = qids[0::2], qids[1::2]

    def mean(values: dict[str, float], ids: list[str]) -> float:
        return sum(values[q] for q in ids) / len(ids)

    print(f"search(top_k=100, group_by=document), {len(qids)} queries, load at the end {load_average()}")
    print("| variant | ef_search used | nDCG@10 all / A / B | R@100 | p50 / p95 ms |")
    print("|---|---|---|---|---|")
    for n in names:
        used = sorted(set(plans[n]))
        print(
            f"| {n} | {used} | {mean(ndcg[n], qids):.4f} / {mean(ndcg[n], first):.4f} / {mean(ndcg[n], second):.4f} "
            f"| {mean(rec[n], qids):.4f} | {percentile(wall[n], 50):.1f} / {percentile(wall[n], 95):.1f} |"
        )


def parse() -> argparse.Namespace:
    parser = store_parser(__doc__, 300)
    parser.add_argument("--limit", type=int, default=50, help="rows the leg returns (search's candidates)")
    parser.add_argument("--ef", type=int, nargs="+", default=[40, 100, 200, 400], help="ef_search values")
    parser.add_argument(
        "--search",
        nargs="*",
        default=[],
        metavar="BASE:PER_ROW",
        help="also score search(top_k=100, group_by=document) with these small-index ef_search values",
    )
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
