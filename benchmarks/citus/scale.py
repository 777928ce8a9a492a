"""The scale benchmark on a Citus cluster against a single node holding the same data, in one run.

From the repository root, with Citus built (``cluster.py build``)::

    python benchmarks/citus/scale.py --data PATH/scifact/corpus.jsonl.gz --rows 200000 \\
        --queries 10 --cell-seconds 20 --latency-queries 30

It starts two servers: an embedded PostgreSQL of its own (the single node) and a coordinator with two
workers (``cluster.py``), whose database is migrated with ``context-engine migrate --citus``. Then it
runs the phases of ``benchmarks/scale/run.py`` on both: the bulk load and the ordinary-ingest sample
one server after the other (single node first), the fused search latency per caller and the ACL
recall grid interleaved (each query asked of both in turn, the order alternating), and one phase of
its own, the cost of a search's scope: one document, one small source, the loaded source, no source,
timed interleaved on both, with what Citus did for it on the cluster (its executions of one shard
and of several per search, from ``citus_stat_counters``, and the task count of the vector leg's
statement in ``EXPLAIN``).

The distribution key is the document (``migrations/citus/0001_distribute.sql``), so a scope of one
source still asks every shard; only a scope naming documents can be routed to fewer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scale"))
import cluster  # noqa: E402
import run as scale  # noqa: E402
import scale_corpus as sc  # noqa: E402

from context_engine import TRUSTED, ContextEngine  # noqa: E402
from context_engine.cli import main as cli_main  # noqa: E402
from context_engine.storage import embedded  # noqa: E402

SINGLE, CITUS = "single node", "citus"
DATABASE = "ce_scale"


# ---------------------------------------------------------------------------------------- servers
def single_node(base: Path, shared_buffers: str) -> tuple[Path, str]:
    """The embedded server in ``base`` with ``shared_buffers`` (restarted once to apply it)."""
    pgdata, url = embedded.acquire(base)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    embedded.release(pgdata)
    return embedded.acquire(base)


def citus_database(nodes: list[cluster.Node]) -> str:
    """The benchmark's database on the cluster, counting Citus's executions, migrated with --citus."""
    url = cluster.create_database(nodes, DATABASE)
    with psycopg.connect(nodes[0].url(), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {DATABASE} SET citus.enable_stat_counters = on")
    if cli_main(["migrate", "--citus", "--database-url", url]) != 0:
        raise SystemExit("migrate --citus failed")
    return url


# ---------------------------------------------------------------------------------------- scope phase
def executions(url: str) -> tuple[int, int]:
    """Citus's executions in this database since the start: (of one shard, of several shards)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT query_execution_single_shard, query_execution_multi_shard FROM citus_stat_counters "
            "WHERE name = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def task_count(url: str, where: str, params: tuple[Any, ...]) -> int:
    """The task count of the vector leg's shape of statement under ``where`` (Citus's EXPLAIN).

    The values go in as literals: a coordinator prunes shards for bound parameters only when it
    executes, so its EXPLAIN of a bound statement would not show the pruning."""
    with psycopg.connect(url) as conn:
        vector = conn.execute("SELECT CAST(embedding AS text) FROM ce_chunks LIMIT 1").fetchone()
        assert vector is not None
        statement = sql.SQL("EXPLAIN SELECT id FROM ce_chunks WHERE {} ORDER BY embedding <=> {} LIMIT 10").format(
            sql.SQL(where).format(*(sql.Literal(p) for p in params)), sql.Literal(vector[0]) + sql.SQL("::vector")
        )
        plan = conn.execute(statement).fetchall()
    return sum(int(m.group(1)) for (line,) in plan if (m := re.search(r"Task Count: (\d+)", line)))


async def one_document(engine: ContextEngine) -> str:
    """The id of the loaded source's first document (the same name on both servers)."""
    found = await engine.list_documents(source_ids=[scale.SOURCE], principals=TRUSTED, limit=1)
    return found.documents[0].id


async def scope_phase(
    engines: dict[str, ContextEngine], urls: dict[str, str], vocab: sc.Vocabulary, count: int
) -> dict:
    """Fused search (trusted, top_k 10) by scope, interleaved, with Citus's executions per search."""
    documents = {name: await one_document(engine) for name, engine in engines.items()}
    scopes: dict[str, Any] = {
        "one document": lambda name: {"document_ids": [documents[name]]},
        "one source of 1,000 chunks": lambda name: {"source_ids": ["ordinary"]},
        f"the loaded source ({scale.SOURCE})": lambda name: {"source_ids": [scale.SOURCE]},
        "no source (every row)": lambda name: {},
    }
    statements = {
        "one document": ("document_id = CAST({} AS uuid)", (documents[CITUS],)),
        "one source of 1,000 chunks": ("source_id = {}", ("ordinary",)),
        f"the loaded source ({scale.SOURCE})": ("source_id = {}", (scale.SOURCE,)),
        "no source (every row)": ("true", ()),
    }
    texts = scale.query_texts(vocab, count + 10)
    for name, engine in engines.items():  # warm: each scope's pages
        for kwargs in scopes.values():
            for q in texts[count:]:
                await engine.search(q, top_k=10, principals=TRUSTED, **kwargs(name))
    out: dict[str, Any] = {"load_average_before": scale.load_average(), "scopes": {}}
    for label, kwargs in scopes.items():
        times: dict[str, list[float]] = {name: [] for name in engines}
        single0, multi0 = executions(urls[CITUS])
        for i, q in enumerate(texts[:count]):
            for name in scale.interleaved(list(engines), i):
                t0 = time.perf_counter()
                await engines[name].search(q, top_k=10, principals=TRUSTED, **kwargs(name))
                times[name].append((time.perf_counter() - t0) * 1000)
        single1, multi1 = executions(urls[CITUS])
        where, params = statements[label]
        row: dict[str, Any] = {
            name: {"p50_ms": round(scale.pct(v, 50), 1), "p95_ms": round(scale.pct(v, 95), 1)}
            for name, v in times.items()
        }
        row["citus_single_shard_per_search"] = round((single1 - single0) / count, 1)
        row["citus_multi_shard_per_search"] = round((multi1 - multi0) / count, 1)
        row["citus_vector_statement_tasks"] = task_count(urls[CITUS], where, params)
        out["scopes"][label] = row
        print(json.dumps({label: row}), flush=True)
    out["load_average_after"] = scale.load_average()
    return out


# ---------------------------------------------------------------------------------------- the run
async def compare(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    layout = sc.make_layout(args.rows)
    vocab = sc.vocabulary(args.data)
    results: dict[str, Any] = scale.header(args) | {"servers": {}}
    async with contextlib.AsyncExitStack() as stack:
        engines = {name: await stack.enter_async_context(scale.engine_for(url)) for name, url in urls.items()}
        for name, engine in engines.items():  # one server after the other: a load takes the machine
            print(f"{name}: bulk loading {args.rows:,} rows ...", flush=True)
            server: dict[str, Any] = {"bulk": await scale.bulk_phase(engine, layout, vocab, args)}
            print(json.dumps(server["bulk"]), flush=True)
            server["ordinary"] = await scale.ordinary_phase(engine, layout, vocab, args.ordinary)
            print(json.dumps(server["ordinary"]), flush=True)
            server["sizes"] = scale.index_size(urls[name])
            results["servers"][name] = server
        if args.latency_queries:
            latency = await scale.latency_phase(engines, vocab, layout, args.latency_queries, args.alone)
            for name in engines:
                results["servers"][name]["latency"] = latency[name]
            print(json.dumps(latency), flush=True)
            results["scopes"] = await scope_phase(engines, urls, vocab, args.latency_queries)
        if args.queries:
            recall = await scale.recall_phase(engines, layout, args.queries, args.cell_seconds)
            for name in engines:
                results["servers"][name]["recall"] = recall[name]
    results["load_average_end"] = scale.load_average()
    return results


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def spread(times: dict[str, float]) -> str:
    return f"{times['p50_ms']} / {times['p95_ms']}"


def markdown(results: dict[str, Any]) -> str:
    one, cit = results["servers"][SINGLE], results["servers"][CITUS]
    lines = [
        f"Scale benchmark on Citus against a single node, {results['rows']:,} chunks ({results['machine']}); "
        f"load average at the start {results['load_average_start']}, at the end {results['load_average_end']}.",
        "",
        "| measure | single node | Citus (coordinator + 2 workers) | Citus / single |",
        "|---|---|---|---|",
    ]
    for key, label in (("bulk_chunks_per_s", "bulk ingest, chunks/s (embedding excluded)"),):
        lines.append(
            f"| {label} | {one['bulk'][key]:,} | {cit['bulk'][key]:,} | {ratio(cit['bulk'][key], one['bulk'][key])} |"
        )
    for key, label in (
        ("load_s", "bulk load, s"),
        ("hnsw_build_s", "HNSW build after it, s"),
        ("gin_build_s", "GIN builds, s"),
    ):
        lines.append(
            f"| {label} | {one['bulk'][key]} | {cit['bulk'][key]} | {ratio(cit['bulk'][key], one['bulk'][key])} |"
        )
    o1, o2 = one["ordinary"]["ordinary_chunks_per_s"], cit["ordinary"]["ordinary_chunks_per_s"]
    lines.append(f"| ordinary ingest (`engine.ingest`, one at a time), chunks/s | {o1} | {o2} | {ratio(o2, o1)} |")
    for key in ("hnsw_index_size", "ce_chunks_total_size", "database_size", "shared_buffers"):
        lines.append(f"| {key.replace('_', ' ')} | {one['sizes'][key]} | {cit['sizes'][key]} | |")
    if "latency" in one:
        lines += [
            "",
            "| caller | measure | single node p50 / p95 ms | Citus p50 / p95 ms | Citus / single (p50) |",
            "|---|---|---|---|---|",
        ]
        for caller in ("trusted", "1%", "30%"):
            for key, label in (
                (f"{caller} top_k=10", "fused top_k=10"),
                (f"{caller} top_k=100", "fused top_k=100"),
                (f"fts {caller}", "full-text leg alone"),
            ):
                a, b = one["latency"][key], cit["latency"][key]
                lines.append(f"| {caller} | {label} | {spread(a)} | {spread(b)} | {ratio(b['p50_ms'], a['p50_ms'])} |")
    if "scopes" in results:
        lines += [
            "",
            "| scope (trusted, fused top_k=10) | single node p50 / p95 ms | Citus p50 / p95 ms | "
            "Citus / single (p50) | Citus executions per search: one shard / several | vector statement's tasks |",
            "|---|---|---|---|---|---|",
        ]
        for label, row in results["scopes"]["scopes"].items():
            a, b = row[SINGLE], row[CITUS]
            lines.append(
                f"| {label} | {spread(a)} | {spread(b)} | {ratio(b['p50_ms'], a['p50_ms'])} | "
                f"{row['citus_single_shard_per_search']} / {row['citus_multi_shard_per_search']} | "
                f"{row['citus_vector_statement_tasks']} |"
            )
    if "recall" in one:
        lines += [
            "",
            "| slice | layout | queries | recall@10 planner single / Citus | planner short / empty single / Citus | "
            "recall@10 iterative single / Citus | p50 ms exact single / Citus | p50 ms planner single / Citus | "
            "Citus planner's plans |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for a, b in zip(one["recall"], cit["recall"], strict=True):
            lines.append(
                f"| {a['slice']} | {a['layout']} | {a['queries']} | {a['recall_planner']} / {b['recall_planner']} | "
                f"{a['short_planner']} / {a['empty_planner']}, {b['short_planner']} / {b['empty_planner']} | "
                f"{a['recall_iterative']} / {b['recall_iterative']} | {a['exact_p50_ms']} / {b['exact_p50_ms']} | "
                f"{a['planner_p50_ms']} / {b['planner_p50_ms']} | {b['planner_plans']} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    scale.add_options(parser)
    parser.add_argument(
        "--worker-shared-buffers", default="512MB", help="each worker's (the single node gets --shared-buffers)"
    )
    parser.set_defaults(out=HERE / "scale_results.json")
    args = parser.parse_args()
    if not cluster.is_built():
        raise SystemExit("Citus is not built yet: run `benchmarks/citus/cluster.py build` first")
    cluster.leave_to_the_engine()
    base = Path(tempfile.mkdtemp(prefix="ce-citus-scale-"))
    nodes: list[cluster.Node] = []
    try:
        _, single_url = single_node(base / "single", args.shared_buffers)
        # fsync on, as the single node has it (the test suite's cluster runs without)
        settings = {"coordinator": {"fsync": "on"}} | {
            f"worker{i}": {"fsync": "on", "shared_buffers": f"'{args.worker_shared_buffers}'"}
            for i in range(cluster.WORKERS)
        }
        nodes = cluster.start(base / "cluster", settings=settings)
        urls = {SINGLE: single_url, CITUS: citus_database(nodes)}
        print(f"single node {single_url}; citus coordinator {urls[CITUS]}", flush=True)
        results = asyncio.run(compare(args, urls))
    finally:
        cluster.stop(base / "cluster")
        embedded.remove(base / "single")
        shutil.rmtree(base, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
