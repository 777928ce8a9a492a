"""Moving a loaded single-node database to Citus, as docs/scaling.md tells a user to, timed and checked.

From the repository root, with Citus built (``cluster.py build``)::

    python benchmarks/citus/move.py --data PATH/scifact/corpus.jsonl.gz --rows 50000

On a cluster started here, a database on the coordinator *without* the citus extension is migrated
and loaded as a single node would be (the scale benchmark's bulk phase and its ordinary sample, so
the store has a second source, ACL groups, BM25 statistics and vector counts). Fixed searches of a
trusted, a 1% and a 30% caller are asked. Then the steps a user runs: ``CREATE EXTENSION citus`` on
every node with the workers registered (``cluster.prepare_database``), and ``context-engine migrate
--citus``, timed. The same searches are asked again on a new engine; the report says whether every
answer (chunk ids in order; also as sets, and the share of the ten in common) and every count
(documents, chunks, vector counts per key, BM25 term rows) is the one of before, and where the rows
now are (per node).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scale"))
import cluster  # noqa: E402
import run as scale  # noqa: E402
import scale_corpus as sc  # noqa: E402

from context_engine import TRUSTED  # noqa: E402
from context_engine.cli import main as cli_main  # noqa: E402

DATABASE = "ce_move"
#: what must be the same before and after the move
COUNTS = {
    "documents": "SELECT count(*) FROM ce_documents",
    "chunks": "SELECT count(*) FROM ce_chunks",
    "vector counts": "SELECT md5(string_agg(k, ',' ORDER BY k)) FROM (SELECT concat_ws('|', kind, principal, "
    "source_id, sum(chunks)) AS k FROM ce_vector_counts GROUP BY kind, principal, source_id) AS t",
    "BM25 term rows": "SELECT count(*) FROM ce_bm25_terms",
    "BM25 postings": "SELECT count(*) FROM ce_bm25_postings",
    "revision": "SELECT max(revision) FROM ce_store_revision",
}


def counts(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        return {name: conn.execute(statement).fetchone()[0] for name, statement in COUNTS.items()}  # type: ignore[index]


def callers() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    return {"trusted": TRUSTED, "1%": sc.caller("random", 1, rng), "30%": sc.caller("random", 30, rng)}


async def answers(url: str, queries: list[str]) -> dict[str, list[list[int]]]:
    """The chunk ids, in order, of each caller's fused top 10 for each query."""
    async with scale.engine_for(url) as engine:
        return {
            label: [[h.chunk_id for h in (await engine.search(q, top_k=10, principals=who)).hits] for q in queries]
            for label, who in callers().items()
        }


async def load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    layout, vocab = sc.make_layout(args.rows), sc.vocabulary(args.data)
    async with scale.engine_for(url) as engine:
        bulk = await scale.bulk_phase(engine, layout, vocab, args)
        await scale.ordinary_phase(engine, layout, vocab, args.ordinary)
    return bulk


def placement(url: str) -> dict[str, Any]:
    """Where the chunk rows are after the move: the shards per node, and the coordinator's own heap."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT nodename || ':' || nodeport, count(*), pg_size_pretty(sum(shard_size)) FROM citus_shards "
            "WHERE table_name = CAST('ce_chunks' AS regclass) GROUP BY 1 ORDER BY 1"
        ).fetchall()
        local = conn.execute("SELECT pg_size_pretty(pg_relation_size('ce_chunks'))").fetchone()
    assert local is not None
    return {"coordinator_heap": local[0], "shards": {node: f"{n} shards, {size}" for node, n, size in rows}}


async def main_async(args: argparse.Namespace, nodes: list[cluster.Node]) -> dict[str, Any]:
    url = cluster.create_database(nodes, DATABASE, citus=False)
    results: dict[str, Any] = scale.header(args)
    print(f"loading {args.rows:,} rows as a single node ...", flush=True)
    results["bulk"] = await load(url, args)
    queries = scale.query_texts(sc.vocabulary(args.data), args.latency_queries)
    before, counted = await answers(url, queries), counts(url)
    results["before"] = counted
    results["load_average_before_move"] = scale.load_average()
    t0 = time.perf_counter()
    cluster.prepare_database(nodes, DATABASE)
    results["citus_extension_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    if await asyncio.to_thread(cli_main, ["migrate", "--citus", "--database-url", url]) != 0:
        raise SystemExit("migrate --citus failed")
    results["migrate_citus_s"] = round(time.perf_counter() - t0, 1)
    results["load_average_after_move"] = scale.load_average()
    after = await answers(url, queries)
    results["after"] = counts(url)
    results["counts_equal"] = results["after"] == counted
    results["answers_equal"] = {label: before[label] == after[label] for label in before}
    # the same chunks, in whatever order (equal fused scores may come back in another order) ...
    results["answers_same_chunks"] = {
        label: sum(set(a) == set(b) for a, b in zip(before[label], after[label], strict=True)) for label in before
    }
    # ... and how many of the ten are shared, averaged over the queries
    results["answers_overlap_at_10"] = {
        label: round(
            sum(len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(before[label], after[label], strict=True))
            / max(1, len(before[label])),
            3,
        )
        for label in before
    }
    results["queries"] = len(queries)
    results["chunk_rows_per_node"] = placement(url)
    results["load_average_end"] = scale.load_average()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    scale.add_options(parser)
    parser.set_defaults(out=HERE / "move_results.json", rows=50_000, latency_queries=20)
    args = parser.parse_args()
    if not cluster.is_built():
        raise SystemExit("Citus is not built yet: run `benchmarks/citus/cluster.py build` first")
    cluster.leave_to_the_engine()
    base = Path(tempfile.mkdtemp(prefix="ce-citus-move-"))
    try:
        on = {"fsync": "on"}
        nodes = cluster.start(base, settings={"coordinator": on, "worker0": on, "worker1": on})
        results = asyncio.run(main_async(args, nodes))
    finally:
        cluster.stop(base)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0 if results["counts_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
