"""What ``group_by="document"`` adds to a search: the same queries, the same ``top_k``, interleaved.

    python benchmarks/beir/group_by.py --data PATH/TO/scifact --cache PATH/TO/cache --store DIR

Uses the plain-text store that ``halves.py`` builds (``--store``; ingested first if it is not there).
For each query, in turn: ``search(top_k)`` and ``search(top_k, group_by="document")``, alternating which
goes first, as a trusted caller, with the engine's defaults. Printed: each form's p50 and p95, and the
median of the per-query difference (grouped minus plain), which load on the machine moves far less
than either figure alone, because both searches of a pair run within a few milliseconds of each other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from halves import build, load_average, store_parser  # noqa: E402

from context_engine import TRUSTED, ContextEngine  # noqa: E402
from context_engine.evaluation import load_beir, percentile  # noqa: E402


async def timed(engine: ContextEngine, query: str, top_k: int, group_by: str | None) -> float:
    started = time.perf_counter()
    if group_by is None:
        await engine.search(query, top_k=top_k, principals=TRUSTED)
    else:
        await engine.search(query, top_k=top_k, group_by=group_by, principals=TRUSTED)
    return (time.perf_counter() - started) * 1000


async def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    queries = [dataset.queries[q] for q in dataset.qrels if q in dataset.queries][: args.queries]
    settings = {"fusion": json.loads(args.fusion)} if args.fusion else None
    engine = await build(dataset, args.store, args.cache, settings)
    try:
        for query in queries[:3]:  # warm the pool, the model and the caches
            await timed(engine, query, args.top_k, None)
            await timed(engine, query, args.top_k, "document")
        print(f"load before: {load_average()}")
        plain, grouped, diffs = [], [], []
        for n, query in enumerate(queries):
            if n % 2:
                g = await timed(engine, query, args.top_k, "document")
                p = await timed(engine, query, args.top_k, None)
            else:
                p = await timed(engine, query, args.top_k, None)
                g = await timed(engine, query, args.top_k, "document")
            plain.append(p)
            grouped.append(g)
            diffs.append(g - p)
        print(f"load after: {load_average()}")
    finally:
        await engine.aclose()
    print(f"\n{len(queries)} queries, top_k {args.top_k}, trusted caller, fusion {args.fusion or 'defaults'}\n")
    print("| search | p50 ms | p95 ms |\n|---|---:|---:|")
    print(f"| plain | {statistics.median(plain):.1f} | {percentile(plain, 95):.1f} |")
    print(f'| group_by="document" | {statistics.median(grouped):.1f} | {percentile(grouped, 95):.1f} |')
    print(f"\nper-query difference, grouped minus plain: median {statistics.median(diffs):+.1f} ms")


def parse() -> argparse.Namespace:
    parser = store_parser(__doc__, 200)
    parser.add_argument("--top-k", type=int, default=10, help="top_k of both searches")
    parser.add_argument("--fusion", help='fusion settings as JSON, e.g. \'{"weights": {"document_fts": 1}}\'')
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
