"""ACL recall of the vector leg: exact scan, iterative index scans, the probe and the planner against an exact oracle.

Run from the repository root: ``python benchmarks/acl_recall/run.py`` (about 25 minutes on the
2-core machine under load; ``--rows 20000 --queries 20`` for a three-minute look). It starts its own
embedded PostgreSQL in a temporary directory, loads a synthetic corpus (``corpus.py``) straight into
``ce_chunks`` with binary COPY, builds the same HNSW index the migrations declare (0006: m 24,
ef_construction 200), and for each of 21 cells (slices of 0.1, 1, 5, 10, 25, 50 and 100% of the
rows, each random, clustered and scattered) runs the same queries through the engine's own vector
leg (``context_engine.retrieval.legs.vector_leg``) with each plan:

* ``exact``: the eligible rows scanned and sorted (no index can serve the ordering);
* ``iterative relaxed``: the index forced with pgvector 0.8's iterative scan at its defaults
  (ef_search 40, 20,000 tuples);
* ``iterative tuned``: the iterative scan as the planner sizes it (ef_search 200, ``max_scan_tuples``
  raised with the slice's thinness), no exact fallback: the index at its best;
* ``probe``: the planner's probe whatever it would choose (nearest rows unfiltered, exact fallback);
* ``planner``: what ``search`` does: the estimate from ``ce_vector_counts`` (and, below the
  threshold, the centroid of the caller's slice), then the plan it picks;
* on the 1% and 10% cells also ``post-filter`` (index, ef_search 40, no iterative scan) and
  ``iterative strict``, for reference.

Recall@k is scored against an exact oracle over the caller's eligible rows computed in Postgres;
``empty`` and ``short`` are the shares of answers with no rows and with fewer than k. Latency is the
leg's wall time per query as the client sees it (the estimate is timed separately: the engine runs
it concurrently with embedding the query). Then the estimate methods are compared for cost and
accuracy. Raw figures go to ``results.csv`` beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from corpus import LAYOUTS, PERCENTS, Corpus, copy_binary, make_corpus, prefix, prefixes
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.config import ContextEngineConfig
from context_engine.retrieval import planner
from context_engine.retrieval.legs import vector_leg
from context_engine.retrieval.planner import VectorPlan
from context_engine.storage import embedded
from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope

HERE = Path(__file__).resolve().parent
DB_NAME = "ce_acl_recall"
SOURCE = "bench"

PlanFactory = Callable[[AsyncEngine, ReadScope], Awaitable[VectorPlan]]


# ---------------------------------------------------------------------------------------- database
def _database_url(server_url: str, name: str) -> str:
    head, _, query = server_url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def start_server(base: Path, shared_buffers: str | None) -> tuple[Path, str]:
    """The embedded server in ``base``; restarted once when ``shared_buffers`` must change."""
    pgdata, url = embedded.acquire(base)
    if shared_buffers:
        with psycopg.connect(url, autocommit=True) as conn:
            current = conn.execute("SHOW shared_buffers").fetchone()
            if current is None or current[0] != shared_buffers:
                conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
                restart = True
            else:
                restart = False
        if restart:
            embedded.release(pgdata)
            pgdata, url = embedded.acquire(base)
    return pgdata, url


async def create_schema(url: str, dim: int) -> None:
    db = create_async_engine(to_driver_url(url))
    try:
        await migrate(db, dim=dim)
    finally:
        await db.dispose()


def load(url: str, corpus: Corpus, log: Callable[[str], None]) -> dict[str, float]:
    """Rows in with binary COPY and one INSERT ... SELECT (so migration 0004's trigger counts them in
    one statement), the secondary indexes dropped first and rebuilt after, as a bulk load should."""
    names = prefixes()
    timings: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        cols = ", ".join(f"g{i} int4" for i in range(len(names)))
        conn.execute(f"CREATE UNLOGGED TABLE bench_rows (id int4, {cols}, embedding vector({corpus.vectors.shape[1]}))")
        t0 = time.perf_counter()
        data = copy_binary(np.arange(len(corpus.vectors)), [corpus.groups[n] for n in names], corpus.vectors)
        with conn.cursor().copy("COPY bench_rows FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(data)
        indexes = conn.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = 'ce_chunks'::regclass AND NOT i.indisprimary"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        acl = "ARRAY[" + ", ".join(f"'{n}:' || g{i}" for i, n in enumerate(names)) + "]"
        conn.execute(
            "INSERT INTO ce_chunks (id, document_id, version, position, source_id, acl, text, text_hash, tsv, "
            f"embedding, valid_from) SELECT id + 1, md5(id::text)::uuid, 1, 0, '{SOURCE}', {acl}, '', '', "
            "''::tsvector, embedding, 1 FROM bench_rows ORDER BY id"
        )
        conn.execute("SELECT setval(pg_get_serial_sequence('ce_chunks', 'id'), (SELECT max(id) FROM ce_chunks))")
        # what the write path keeps in ce_bm25_groups, for the comparison of estimate methods
        conn.execute(
            "INSERT INTO ce_bm25_groups (source_id, acl, chunks, tokens) SELECT source_id, acl, count(*), 0 "
            "FROM ce_chunks WHERE valid_to IS NULL GROUP BY 1, 2"
        )
        conn.execute("DROP TABLE bench_rows")
        timings["load_s"] = time.perf_counter() - t0
        log(f"loaded {len(corpus.vectors):,} rows in {timings['load_s']:.1f} s")
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        for name, definition in indexes:
            t0 = time.perf_counter()
            conn.execute(definition)
            if "hnsw" in definition:
                timings["hnsw_build_s"] = time.perf_counter() - t0
                params = definition.split("WITH")[-1].split("WHERE")[0].strip()
                log(f"built {name} (HNSW {params}) in {timings['hnsw_build_s']:.1f} s")
        conn.execute("VACUUM ANALYZE ce_chunks")
    return timings


# ---------------------------------------------------------------------------------------- measuring
@dataclass
class Outcome:
    recall: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    leg_ms: list[float] = field(default_factory=list)
    estimate_ms: list[float] = field(default_factory=list)
    plans: list[str] = field(default_factory=list)
    fallbacks: int = 0

    def summary(self, k: int) -> dict[str, Any]:
        n = len(self.recall)
        leg = sorted(self.leg_ms)
        total = sorted(a + b for a, b in zip(self.leg_ms, self.estimate_ms or [0.0] * n, strict=True))
        return {
            "queries": n,
            "recall": round(statistics.fmean(self.recall), 4),
            "empty": round(sum(r == 0 for r in self.rows) / n, 4),
            "short": round(sum(r < k for r in self.rows) / n, 4),
            "p50_ms": round(_pct(leg, 50), 2),
            "p95_ms": round(_pct(leg, 95), 2),
            "estimate_p50_ms": round(_pct(sorted(self.estimate_ms), 50), 3) if self.estimate_ms else "",
            "total_p50_ms": round(_pct(total, 50), 2),
            "exact_share": round(self.plans.count(planner.EXACT) / n, 4) if self.plans else "",
            "fallbacks": self.fallbacks,
        }


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, round(pct / 100 * (len(values) - 1)))]


def _scope(pre: str | None, corpus: Corpus, i: int) -> ReadScope:
    return ReadScope(None if pre is None else (f"{pre}:{corpus.callers[pre][i]}",))


async def oracle(db: AsyncEngine, corpus: Corpus, pre: str | None, n: int, k: int) -> list[list[int]]:
    """The true top k of each query among the caller's eligible rows: every row scored in Postgres."""
    out = []
    for i in range(n):
        scope = _scope(pre, corpus, i)
        params: dict[str, Any] = {"qv": _literal(corpus.queries[i]), "k": k}
        sql = (
            "SELECT c.id FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
            f"AND {scope.predicate('c', params)} ORDER BY (c.embedding <=> CAST(:qv AS vector)) + 0, c.id LIMIT :k"
        )
        async with db.connect() as conn:
            out.append([int(r[0]) for r in (await conn.execute(text(sql), params)).all()])
    return out


def _literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


async def measure(
    db: AsyncEngine,
    corpus: Corpus,
    pre: str | None,
    n: int,
    k: int,
    truth: list[list[int]],
    strategies: dict[str, PlanFactory],
) -> dict[str, Outcome]:
    """Every strategy on every query, interleaved query by query (and rotated, so none always runs
    first): on a machine whose load changes by the minute, that keeps the comparison fair."""
    names = list(strategies)
    outs = {name: Outcome() for name in names}
    for i in range(n):
        scope = _scope(pre, corpus, i)
        vector = corpus.queries[i].tolist()
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            make, out = strategies[name], outs[name]
            t0 = time.perf_counter()
            plan = await make(db, scope)
            t1 = time.perf_counter()
            found = await vector_leg(db, vector, scope, limit=k, plan=plan)
            t2 = time.perf_counter()
            ids = {cid for cid, _ in found}
            out.recall.append(len(ids & set(truth[i])) / max(1, len(truth[i])))
            out.rows.append(len(found))
            out.leg_ms.append((t2 - t1) * 1000)
            if make is plan_by_planner:
                out.estimate_ms.append((t1 - t0) * 1000)
            out.plans.append(plan.plan)
            out.fallbacks += plan.fallback
    return outs


THRESHOLD = ContextEngineConfig().storage.ann_exact_threshold


def fixed(plan: str, settings: dict[str, str] | None = None) -> PlanFactory:
    async def make(db: AsyncEngine, scope: ReadScope) -> VectorPlan:
        return VectorPlan(plan, None, settings=settings, allow_fallback=False)

    return make


async def plan_by_planner(db: AsyncEngine, scope: ReadScope) -> VectorPlan:
    return await planner.plan_vector(db, scope, threshold=THRESHOLD, limit=TOP_K)


async def tuned_iterative(db: AsyncEngine, scope: ReadScope) -> VectorPlan:
    """The iterative scan as the planner sizes it (ef_search 200, ``max_scan_tuples`` from the slice's
    share), with no exact fallback: the best the index alone does."""
    plan = await planner.plan_vector(db, scope, threshold=THRESHOLD, limit=TOP_K)
    plan.plan, plan.allow_fallback = planner.ANN, False
    return plan


async def forced_probe(db: AsyncEngine, scope: ReadScope) -> VectorPlan:
    """The planner's probe whatever it chose: the index's nearest rows, exact fallback when short."""
    plan = await planner.plan_vector(db, scope, threshold=THRESHOLD, limit=TOP_K)
    plan.plan = planner.PROBE
    return plan


TOP_K = 10

#: every cell of the grid runs these
STRATEGIES: dict[str, PlanFactory] = {
    "exact": fixed(planner.EXACT),
    "iterative relaxed": fixed(planner.ANN, planner.index_settings(40, "relaxed_order")),
    "iterative tuned": tuned_iterative,
    "probe": forced_probe,
    "planner": plan_by_planner,
}
#: the reference settings of the first table, run on the 10% and 1% cells
BASELINES: dict[str, PlanFactory] = {
    "post-filter": fixed(planner.ANN, planner.index_settings(40, "off")),
    "iterative strict": fixed(planner.ANN, planner.index_settings(40, "strict_order")),
}


# ---------------------------------------------------------------------------------------- estimates
async def estimate_methods(db: AsyncEngine, corpus: Corpus, pre: str, n: int) -> dict[str, dict[str, float]]:
    """Cost and error of each way to estimate a caller's eligible rows, over ``n`` callers."""
    results: dict[str, dict[str, list[float]]] = {}

    def add(method: str, ms: float, estimate: float, truth: int) -> None:
        entry = results.setdefault(method, {"ms": [], "err": []})
        entry["ms"].append(ms)
        entry["err"].append(abs(estimate / truth - 1) if truth else 0.0)

    for i in range(n):
        scope = _scope(pre, corpus, i)
        params: dict[str, Any] = {}
        predicate = scope.predicate("c", params)
        async with db.connect() as conn:
            truth = int(
                await conn.scalar(
                    text(
                        f"SELECT count(*) FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
                        f"AND {predicate}"
                    ),
                    params,
                )
            )
            t0 = time.perf_counter()
            eligible, _, _ = await planner.count_estimate(conn, scope)
            add("counts (ce_vector_counts)", (time.perf_counter() - t0) * 1000, eligible, truth)
            t0 = time.perf_counter()
            capped = await planner.capped_count(conn, scope, THRESHOLD + 1)
            add(f"capped count (LIMIT {THRESHOLD + 1})", (time.perf_counter() - t0) * 1000, capped, truth)
            t0 = time.perf_counter()
            plan = await conn.scalar(
                text(
                    f"EXPLAIN (FORMAT JSON) SELECT 1 FROM ce_chunks c WHERE c.valid_to IS NULL "
                    f"AND c.embedding IS NOT NULL AND {predicate}"
                ),
                params,
            )
            rows = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]["Plan Rows"]
            add("planner statistics (EXPLAIN)", (time.perf_counter() - t0) * 1000, rows, truth)
    return {
        method: {
            "p50_ms": _pct(sorted(v["ms"]), 50),
            "median_error": statistics.median(v["err"]),
            "max_error": max(v["err"]),
        }
        for method, v in results.items()
    }


async def staleness(db: AsyncEngine, url: str, corpus: Corpus, rows: int) -> dict[str, tuple[float, float]]:
    """A group that arrived after the last ANALYZE: what each cheap estimate says about it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, tsv, embedding, "
            f"valid_from) SELECT md5('late' || id)::uuid, 1, 0, 'late', ARRAY['late:0'], '', '', ''::tsvector, "
            f"embedding, 2 FROM ce_chunks WHERE source_id = '{SOURCE}' ORDER BY id LIMIT {rows}"
        )
    scope = ReadScope(("late:0",))
    params: dict[str, Any] = {}
    predicate = scope.predicate("c", params)
    async with db.connect() as conn:
        counted, _, _ = await planner.count_estimate(conn, scope)
        plan = await conn.scalar(
            text(
                f"EXPLAIN (FORMAT JSON) SELECT 1 FROM ce_chunks c WHERE c.valid_to IS NULL "
                f"AND c.embedding IS NOT NULL AND {predicate}"
            ),
            params,
        )
    explained = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]["Plan Rows"]
    return {"counts": (counted, rows), "explain": (explained, rows)}


def write_cost(url: str, rows: int) -> dict[str, float]:
    """Milliseconds per chunk of storing a vector the way the ingest path does (one ``UPDATE`` per
    chunk), with migration 0004's counting triggers and without them."""
    out: dict[str, float] = {}
    with psycopg.connect(url) as conn:
        picked = conn.execute(
            "SELECT id, embedding::text FROM ce_chunks WHERE source_id = 'late' ORDER BY id LIMIT %s", (rows,)
        ).fetchall()
        passes = (("with triggers", None), ("without triggers", "DISABLE"), ("with triggers again", "ENABLE"))
        for label, toggle in passes:
            if toggle:
                conn.execute(f"ALTER TABLE ce_chunks {toggle} TRIGGER USER")
                conn.commit()
            t0 = time.perf_counter()
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE ce_chunks SET embedding = %s::vector WHERE id = %s", [(v, i) for i, v in picked]
                )
            conn.commit()
            out[label] = (time.perf_counter() - t0) * 1000 / max(1, len(picked))
    return out


# ---------------------------------------------------------------------------------------- report
def machine(url: str, build: dict[str, float]) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        pg = conn.execute("SHOW server_version").fetchone()
        vec = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        sb = conn.execute("SHOW shared_buffers").fetchone()
    mem = ""
    if Path("/proc/meminfo").exists():
        first = Path("/proc/meminfo").read_text().splitlines()[0].split()
        mem = f"{int(first[1]) / 1024 / 1024:.0f} GB"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpus": str(os.cpu_count()),
        "memory": mem,
        "platform": platform.platform(terse=True),
        "postgres": pg[0] if pg else "",
        "pgvector": vec[0] if vec else "",
        "shared_buffers": sb[0] if sb else "",
        "load_average": " ".join(f"{x:.1f}" for x in load),
        **{key: f"{value:.1f}" for key, value in build.items()},
    }


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells[1:]]
    return "\n".join(lines)


def profile(vectors: np.ndarray, sample: int = 5000, queries: int = 200) -> dict[str, float]:
    """Mean cosine and the cosine of the 1st/10th/100th/1000th neighbour, at one density."""
    rng = np.random.default_rng(0)
    v = vectors[rng.permutation(len(vectors))[:sample]].astype(np.float32)
    sims = v[:queries] @ v.T
    sims[np.arange(queries), np.arange(queries)] = -9
    ranked = -np.sort(-sims, axis=1)
    return {
        "mean": float(sims[sims > -9].mean()),
        **{f"nn{r}": float(ranked[:, r - 1].mean()) for r in (1, 10, 100, 1000) if r < sample},
    }


# ---------------------------------------------------------------------------------------- main
async def run(args: argparse.Namespace) -> int:
    global THRESHOLD, TOP_K
    if args.threshold is not None:
        THRESHOLD = args.threshold
    TOP_K = args.top_k
    log = print if not args.quiet else (lambda _msg: None)
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="ce-acl-recall-"))
    pgdata, server = start_server(base, args.shared_buffers)
    csv_rows: list[dict[str, Any]] = []
    try:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
        url = _database_url(server, DB_NAME)
        corpus = make_corpus(rows=args.rows, queries=args.queries, seed=args.seed)
        for cached in sorted((HERE.parent / ".cache" / "embeddings").glob("*/*.npz")):
            real = np.load(cached)["vectors"]
            if real.shape[1] == corpus.vectors.shape[1] and len(real) > 2000:
                sample = min(5000, len(real))
                log(
                    f"similarity profile at {sample} rows, real ({cached.parent.name}): "
                    + json.dumps({k: round(v, 3) for k, v in profile(real, sample).items()})
                )
                log(
                    "similarity profile, synthetic: "
                    + json.dumps({k: round(v, 3) for k, v in profile(corpus.vectors, sample).items()})
                )
                break
        await create_schema(url, corpus.vectors.shape[1])
        build = load(url, corpus, log)
        meta = machine(url, build)
        log("machine: " + json.dumps(meta))
        csv_rows += [{"section": "meta", "setting": key, "strategy": value} for key, value in meta.items()]
        db = create_async_engine(to_driver_url(url), pool_size=2, max_overflow=0)
        k, n = args.top_k, args.queries
        try:
            # warm the buffer cache the same way for every plan: one full pass of each access path
            await oracle(db, corpus, None, min(n, 20), k)
            grid: list[tuple[str, int, dict[str, dict[str, Any]]]] = []
            for pct in PERCENTS:
                for layout in LAYOUTS:
                    pre = prefix(layout, pct)
                    name = f"{layout} {pct:g}%"
                    visible = round(args.rows * pct / 100)
                    truth = await oracle(db, corpus, pre, n, k)
                    strategies = STRATEGIES | (BASELINES if pct in (1, 10) else {})
                    summaries = {}
                    for strategy, outcome in (await measure(db, corpus, pre, n, k, truth, strategies)).items():
                        summaries[strategy] = outcome.summary(k)
                        csv_rows.append(
                            {"section": "grid", "setting": name, "visible_rows": visible, "strategy": strategy}
                            | summaries[strategy]
                        )
                    log(f"{name}: " + json.dumps({key: summaries[key] for key in STRATEGIES}))
                    grid.append((name, visible, summaries))
            truth = await oracle(db, corpus, None, n, k)
            unfiltered = {}
            plain = {
                "hnsw ef_search 40": fixed(planner.ANN, planner.index_settings(40, "off")),
                "hnsw ef_search 100": fixed(planner.ANN, planner.index_settings(100, "off")),
                "exact": fixed(planner.EXACT),
                "planner": plan_by_planner,
            }
            for strategy, outcome in (await measure(db, corpus, None, n, k, truth, plain)).items():
                unfiltered[strategy] = outcome.summary(k)
                csv_rows.append(
                    {
                        "section": "unfiltered",
                        "setting": "trusted, no scope",
                        "visible_rows": args.rows,
                        "strategy": strategy,
                        **unfiltered[strategy],
                    }
                )
                log(f"unfiltered     {strategy:18s} {json.dumps(unfiltered[strategy])}")
            m = min(n, 20)

            estimates: list[list[Any]] = []
            for pct in (1, 10, 50):
                for layout in ("random", "clustered"):
                    found = await estimate_methods(db, corpus, prefix(layout, pct), min(m, 20))
                    for method, v in found.items():
                        estimates.append(
                            [
                                f"{layout} {pct}%",
                                method,
                                f"{v['p50_ms']:.3f}",
                                f"{v['median_error']:.3f}",
                                f"{v['max_error']:.3f}",
                            ]
                        )
                        csv_rows.append(
                            {
                                "section": "estimate",
                                "setting": f"{layout} {pct}%",
                                "strategy": method,
                                "p50_ms": round(v["p50_ms"], 3),
                                "recall": "",
                                "note": f"median |est/true-1| {v['median_error']:.3f}, max {v['max_error']:.3f}",
                            }
                        )
            stale = await staleness(db, url, corpus, args.rows // 20)
            writes = write_cost(url, min(2000, args.rows // 20))
            for label, ms in writes.items():
                csv_rows.append(
                    {
                        "section": "write",
                        "setting": "store one vector per UPDATE",
                        "strategy": label,
                        "p50_ms": round(ms, 4),
                        "note": "mean ms per chunk",
                    }
                )
            for method, (estimate, truth_rows) in stale.items():
                csv_rows.append(
                    {
                        "section": "stale",
                        "setting": "group added after ANALYZE",
                        "strategy": method,
                        "visible_rows": truth_rows,
                        "note": f"estimate {estimate:.0f}",
                    }
                )
        finally:
            await db.dispose()
    finally:
        embedded.release(pgdata)
        embedded.remove(base)  # stops the server if the release left it running, then deletes

    cols = ["recall", "empty", "short", "p50_ms", "p95_ms"]
    rows = []
    for name, _, s in grid:
        for strategy in (x for x in (*BASELINES, *STRATEGIES) if x in s):
            v = s[strategy]
            extra = f" exact {v['exact_share']:.0%}, est p50 {v['estimate_p50_ms']} ms" if strategy == "planner" else ""
            rows.append([name, strategy, *(v[c] for c in cols), f"{v['fallbacks']}{extra}"])
    print()
    print(
        table(
            f"recall@{k} against the exact oracle, {n} queries per cell, {args.rows:,} rows, threshold {THRESHOLD:,}",
            ["setting", "plan", *cols, "fallbacks / planner"],
            rows,
        )
    )
    print()
    print(table("grid (p50 in ms; the estimate runs beside embedding the query in the engine)", *verdicts(grid)))
    print()
    print(
        table(
            "unfiltered (trusted caller, no scope)",
            ["plan", *cols],
            [[s, *(v[c] for c in cols)] for s, v in unfiltered.items()],
        )
    )
    print()
    print(table("estimate of eligible rows", ["slice", "method", "p50 ms", "median |est/true-1|", "max"], estimates))
    print()
    print("group added after ANALYZE: " + ", ".join(f"{m_}: {e:.0f} of {t}" for m_, (e, t) in stale.items()))
    print("storing a vector, mean ms per chunk: " + ", ".join(f"{k_} {v:.3f}" for k_, v in writes.items()))
    print(f"\nfinished in {(time.perf_counter() - started) / 60:.1f} min")
    if args.csv:
        fields = [
            "section",
            "setting",
            "visible_rows",
            "strategy",
            "queries",
            "recall",
            "empty",
            "short",
            "p50_ms",
            "p95_ms",
            "estimate_p50_ms",
            "total_p50_ms",
            "exact_share",
            "fallbacks",
            "note",
        ]
        write_csv(Path(args.csv), fields, csv_rows)
        print(f"raw results: {args.csv}")
    return 0


def verdicts(grid: list[tuple[str, int, dict[str, dict[str, Any]]]]) -> tuple[list[str], list[list[Any]]]:
    """One row per cell: recall and p50 of each plan, and whether the planner met the targets.

    The yardstick is the faster of the exact scan and the tuned iterative scan among those that hold
    recall 0.99 with no short answer (the faster of the two when neither does).
    """
    header = [
        "slice",
        "rows",
        "exact p50",
        "iter recall / p50",
        "tuned recall / p50",
        "probe recall / p50 (misses)",
        "planner recall / p50 (plan)",
        "vs better",
        "target met",
    ]
    out = []
    for name, visible, s in grid:
        exact, relaxed, tuned, probe, ours = (s[x] for x in STRATEGIES)
        good = [v["p50_ms"] for v in (exact, tuned, relaxed) if v["recall"] >= 0.99 and v["short"] == 0]
        better = min(good) if good else min(exact["p50_ms"], tuned["p50_ms"])
        met = ours["recall"] >= 0.99 and ours["short"] == 0 and ours["p50_ms"] <= 1.2 * better
        share = ours["exact_share"]
        plan = "exact" if share == 1 else "index" if share == 0 else f"{share:.0%} exact"
        out.append(
            [
                name,
                f"{visible:,}",
                exact["p50_ms"],
                f"{relaxed['recall']:.3f} / {relaxed['p50_ms']}",
                f"{tuned['recall']:.3f}{' short' if tuned['short'] else ''} / {tuned['p50_ms']}",
                f"{probe['recall']:.3f} / {probe['p50_ms']} ({probe['fallbacks']})",
                f"{ours['recall']:.3f}{' short' if ours['short'] else ''} / {ours['p50_ms']} ({plan})",
                f"{ours['p50_ms'] / better:.2f}x",
                "yes" if met else "no",
            ]
        )
    return header, out


def write_csv(path: Path, fields: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="corpus size (a multiple of 1,000; default 100000)")
    parser.add_argument("--queries", type=int, default=50, help="queries per cell of the grid (default 50)")
    parser.add_argument("--top-k", type=int, default=10, help="rows asked for, k of recall@k (default 10)")
    parser.add_argument("--threshold", type=int, default=None, help="ann_exact_threshold (default: the config's)")
    parser.add_argument("--shared-buffers", default="1GB", help="server shared_buffers; '' keeps the default 128MB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--csv", default=str(HERE / "results.csv"), help="raw results file ('' for none)")
    parser.add_argument("--quiet", action="store_true", help="only the final tables")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
