"""The full-text leg under three plan-cache policies, on a database kept by ``run.py --keep``.

Run from the repository root::

    python benchmarks/scale/plans.py --data PATH/TO/scifact/corpus.jsonl.gz --reuse DIR

psycopg prepares a statement on the server after its fifth run on a connection, and PostgreSQL may
then plan it once for any parameters (a generic plan). The leg's statements can be planned three
ways, each on a pool of its own (so each keeps its own prepared statements), query by query in turn:

* ``unprepared`` (the leg's default): never prepared, planned for the values on every run;
* ``force_custom_plan``: prepared as usual, the connection's ``plan_cache_mode`` forcing a plan per run
  (parsing saved, planning not);
* ``server's choice``: prepared as usual and ``plan_cache_mode`` at its default (the leg before).

The statements are the leg's own (:func:`context_engine.retrieval.legs.fts.fts_leg`, ``limit`` 50 as
in a ``top_k=10`` search), for the scale benchmark's three callers and its latency queries. Each
policy runs the queries once to warm up (past the prepare threshold), then ``--passes`` timed passes.
The answers of the policies are compared, and each pool's connection says how many generic and custom
plans its prepared statements used (``pg_prepared_statements``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as scale_run
import scale_corpus as sc

from context_engine.retrieval import bm25, lexical
from context_engine.retrieval.legs.fts import fts_leg
from context_engine.storage import embedded
from context_engine.storage.database import to_driver_url
from context_engine.storage.predicates import ReadScope

LIMIT = 50  # the leg's depth for a top_k=10 search (search.candidate_k)


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    """The same scores in order, and the same chunks at each score but the last one kept (two chunks
    whose scores tie can come back in either order, and at the cut either may be the one kept)."""
    if [round(s, 9) for _, s in a] != [round(s, 9) for _, s in b]:
        return False
    cut = round(b[-1][1], 9) if b else None
    return {c for c, s in a if round(s, 9) != cut} == {c for c, s in b if round(s, 9) != cut}


async def plans_used(db: AsyncEngine) -> str:
    """Generic and custom plans the pool's connection has used for its prepared statements."""
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT count(*), sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements")
            )
        ).one()
    return f"{row[0]} prepared, {row[1] or 0} generic plans, {row[2] or 0} custom"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def prepared_leg(db: AsyncEngine, query: str, scope: ReadScope, config: str) -> list[tuple[int, float]]:
    """The leg's BM25 statements as they were sent before: through the pool, prepared as usual."""
    params: dict[str, Any] = {"lx_cfg": config, "limit": LIMIT, "norm": 0}
    tsq = lexical.tsquery_sql(query, match="any", params=params, stopwords="english")
    if tsq is None:
        return []
    async with db.connect() as conn:
        return await bm25.rank(
            conn,
            tsquery=tsq,
            terms=lexical.terms_sql(params),
            chunk_predicate=scope.predicate("c", params),
            stats_scope={"principals": scope.principals, "source_ids": scope.source_ids},
            params=params,
            k1=1.2,
            b=0.75,
            limit=LIMIT,
        )


async def measure(url: str, vocab: sc.Vocabulary, count: int, passes: int) -> None:
    driver = to_driver_url(url)
    pools = {
        "unprepared": create_async_engine(driver, pool_size=1),
        "force_custom_plan": create_async_engine(
            driver, pool_size=1, connect_args={"options": "-c plan_cache_mode=force_custom_plan"}
        ),
        "server's choice": create_async_engine(driver, pool_size=1),
    }
    dbs = {name: pool.execution_options(isolation_level="AUTOCOMMIT") for name, pool in pools.items()}
    async with dbs["unprepared"].connect() as conn:
        config = (await conn.execute(text("SELECT value FROM ce_meta WHERE key = 'text_search_config'"))).scalar()
    config = str(config or "english")
    rng = np.random.default_rng(5)  # the callers of run.py's latency phase
    callers = {"trusted": None, "1%": sc.caller("random", 1, rng), "30%": sc.caller("random", 30, rng)}
    queries = scale_run.query_texts(vocab, count)

    async def answer(name: str, query: str, scope: ReadScope) -> list[tuple[int, float]]:
        if name == "unprepared":
            return await fts_leg(
                dbs[name], query, scope, limit=LIMIT, config=config, match="any", rank="bm25", normalization=0
            )
        return await prepared_leg(dbs[name], query, scope, config)

    print(f"| caller | {' | '.join(f'{n} p50 / p95 ms' for n in dbs)} | same answers |")
    print(f"|---|{'---:|' * len(dbs)}---:|")
    try:
        for label, principals in callers.items():
            scope = ReadScope(principals)
            for q in queries:  # warm: every statement past psycopg's prepare threshold
                for name in dbs:
                    await answer(name, q, scope)
            before = scale_run.load_average()
            times: dict[str, list[float]] = {name: [] for name in dbs}
            agree = 0
            for _ in range(passes):
                for i, q in enumerate(queries):
                    found = {}
                    for name in scale_run.interleaved(list(dbs), i):
                        t0 = time.perf_counter()
                        found[name] = await answer(name, q, scope)
                        times[name].append((time.perf_counter() - t0) * 1000)
                    agree += all(same(rows, found["unprepared"]) for rows in found.values())
            cells = " | ".join(f"{pct(v, 50):.1f} / {pct(v, 95):.1f}" for v in times.values())
            total = passes * len(queries)
            print(f"| {label} | {cells} | {agree} of {total} | load {before} -> {scale_run.load_average()}", flush=True)
            print(f"  means: {', '.join(f'{n} {statistics.mean(v):.1f}' for n, v in times.items())}", flush=True)
            used = [f"{n}: {await plans_used(db)}" for n, db in dbs.items()]
            print(f"  {'; '.join(used)}", flush=True)
    finally:
        for pool in pools.values():
            await pool.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a BEIR corpus.jsonl.gz for the vocabulary")
    parser.add_argument("--reuse", type=Path, required=True, help="the database kept by run.py --keep DIR")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    vocab = sc.vocabulary(args.data)
    pgdata, url = embedded.acquire(args.reuse)
    try:
        asyncio.run(measure(url, vocab, args.queries, args.passes))
    finally:
        embedded.release(pgdata)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
