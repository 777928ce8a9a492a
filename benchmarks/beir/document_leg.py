"""What the document full-text leg costs, scored from the postings and from each chunk's ``tsvector``.

    python benchmarks/beir/document_leg.py --data PATH/TO/scifact --cache PATH/TO/cache --store DIR

Uses the plain-text store that ``halves.py`` builds (``--store``; ingested first if it is not there).
For each test query, in turn and alternating which goes first, the leg alone
(:func:`context_engine.retrieval.legs.document_fts.document_fts_leg`) both ways, as a trusted caller
and as a caller holding one principal (whose statistics are scoped to what they may see), at
``--limit`` documents. Printed: each way's p50 and p95, and on how many queries both gave the same
chunks in the same order with the same scores (to 1e-9).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from halves import build  # noqa: E402

from context_engine.evaluation import load_beir, percentile  # noqa: E402
from context_engine.retrieval.legs.document_fts import document_fts_leg  # noqa: E402
from context_engine.storage.predicates import ReadScope  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [i for i, _ in a] == [i for i, _ in b] and all(
        abs(x - y) <= 1e-9 * max(1.0, abs(y)) for (_, x), (_, y) in zip(a, b, strict=True)
    )


async def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    queries = [dataset.queries[q] for q in dataset.qrels if q in dataset.queries][: args.queries]
    engine = await build(dataset, args.store, args.cache)
    cfg = engine.config.search
    db = await engine.database()

    async def timed(query: str, scope: ReadScope, postings: bool) -> tuple[float, list[tuple[int, float]]]:
        started = time.perf_counter()
        found = await document_fts_leg(
            db,
            query,
            scope,
            limit=args.limit,
            config=engine.services.text_search_config,
            match=cfg.lexical_match,
            stopwords=cfg.lexical_stopwords,
            k1=cfg.bm25.k1,
            b=cfg.bm25.b,
            postings=postings,
        )
        return (time.perf_counter() - started) * 1000, found

    try:
        for query in queries[:3]:  # warm the pool and the caches
            for postings in (True, False):
                await timed(query, ReadScope(None), postings)
        print(f"load before: {load()}")
        rows = []
        for label, scope in (("trusted", ReadScope(None)), ("one principal", ReadScope(("user:bench",)))):
            ms: dict[bool, list[float]] = {True: [], False: []}
            agree = 0
            for n, query in enumerate(queries):
                order = (True, False) if n % 2 == 0 else (False, True)
                found = {}
                for postings in order:
                    took, found[postings] = await timed(query, scope, postings)
                    ms[postings].append(took)
                agree += same(found[True], found[False])
            for postings, name in ((True, "postings"), (False, "tsvector")):
                values = ms[postings]
                rows.append(f"| {label} | {name} | {statistics.median(values):.1f} | {percentile(values, 95):.1f} |")
            rows.append(f"| {label} | same answer | {agree} of {len(queries)} | |")
        print(f"load after: {load()}")
    finally:
        await engine.aclose()
    print(f"\n{len(queries)} queries, the document leg alone at limit {args.limit}\n")
    print("| caller | scored from | p50 ms | p95 ms |\n|---|---|---:|---:|")
    print("\n".join(rows))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="a BEIR-format folder (e.g. scifact)")
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache", help="vector cache folder")
    parser.add_argument("--store", required=True, type=Path, help="the store halves.py builds (kept between runs)")
    parser.add_argument("--queries", type=int, default=300, help="the first N test queries")
    parser.add_argument("--limit", type=int, default=50, help="documents the leg returns")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
