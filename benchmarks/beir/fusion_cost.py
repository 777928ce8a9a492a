"""What a fusion setting costs a search against the defaults: the same queries, interleaved.

    python benchmarks/beir/fusion_cost.py --data PATH/TO/scifact --cache PATH/TO/cache --store DIR

Uses the plain-text store that ``halves.py`` builds (``--store``; ingested first if it is not there).
For each query, in turn: ``search(top_k)`` with the engine's defaults and with ``--fusion`` (by default
half A's choice: convex, ``document_fts`` 1 + ``vector`` 1, the chunk leg off), alternating which goes
first, as a trusted caller; the query is embedded by the local model on every search (query vectors
are never cached). Printed: each setting's p50 and p95, and the median per-query difference, which
load on the machine moves far less than either figure alone.
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
from context_engine.config import ContextEngineConfig  # noqa: E402
from context_engine.evaluation import load_beir, percentile  # noqa: E402

HALF_A = '{"method": "convex", "weights": {"fts": 0, "document_fts": 1, "vector": 1}}'


async def timed(engine: ContextEngine, config: ContextEngineConfig, query: str, top_k: int) -> float:
    engine.config = config
    started = time.perf_counter()
    await engine.search(query, top_k=top_k, principals=TRUSTED)
    return (time.perf_counter() - started) * 1000


async def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    queries = [dataset.queries[q] for q in dataset.qrels if q in dataset.queries][: args.queries]
    fusion = json.loads(args.fusion)
    # built with the setting, so a weighted document leg has its chunk indexes (migration 0027)
    engine = await build(dataset, args.store, args.cache, {"fusion": fusion})
    chosen = engine.config
    defaults = chosen.model_copy(update={"fusion": type(chosen.fusion)()})
    try:
        for query in queries[:3]:  # warm the pool, the model and the caches
            for config in (defaults, chosen):
                await timed(engine, config, query, args.top_k)
        print(f"load before: {load_average()}")
        ms: dict[str, list[float]] = {"defaults": [], "setting": []}
        diffs = []
        for n, query in enumerate(queries):
            order = [("defaults", defaults), ("setting", chosen)]
            if n % 2:
                order.reverse()
            took = {name: await timed(engine, config, query, args.top_k) for name, config in order}
            for name, value in took.items():
                ms[name].append(value)
            diffs.append(took["setting"] - took["defaults"])
        print(f"load after: {load_average()}")
    finally:
        engine.config = chosen
        await engine.aclose()
    print(f"\n{len(queries)} queries, top_k {args.top_k}, trusted caller, query embedding included\n")
    print("| fusion | p50 ms | p95 ms |\n|---|---:|---:|")
    print(f"| defaults | {statistics.median(ms['defaults']):.1f} | {percentile(ms['defaults'], 95):.1f} |")
    print(f"| `{args.fusion}` | {statistics.median(ms['setting']):.1f} | {percentile(ms['setting'], 95):.1f} |")
    print(f"\nper-query difference, setting minus defaults: median {statistics.median(diffs):+.1f} ms")


def parse() -> argparse.Namespace:
    parser = store_parser(__doc__, 200)
    parser.add_argument("--top-k", type=int, default=10, help="top_k of both searches")
    parser.add_argument("--fusion", default=HALF_A, help="the fusion settings measured against the defaults, as JSON")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
