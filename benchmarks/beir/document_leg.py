"""What the document full-text leg costs, by each way it can score: the bounded postings pass (the
leg's own), every document scored from the postings (the pass before it) and from each chunk's
``tsvector`` (a past read's).

    python benchmarks/beir/document_leg.py --data PATH/TO/scifact --cache PATH/TO/cache --store DIR

Uses the plain-text store that ``halves.py`` builds (``--store``; ingested first if it is not there),
with the leg's chunk indexes (migration 0027) built. For each test query, in turn and rotating which
goes first, the leg alone (:func:`context_engine.retrieval.legs.document_fts.document_fts_leg`) each
way of ``--passes``, as a trusted caller and as a caller holding one principal (whose statistics are
scoped to what they may see), at ``--limit`` documents. Printed: each way's p50 and p95, on how many
queries every way gave the same chunks in the same order with the same scores (to 1e-9) as the
first, and, for the bounded pass, the mean number of documents holding a query term and of those
scored.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from halves import build, load_average, store_parser  # noqa: E402

from context_engine.evaluation import load_beir, percentile  # noqa: E402
from context_engine.retrieval.legs.document_fts import document_fts_leg  # noqa: E402
from context_engine.storage.predicates import ReadScope  # noqa: E402


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [i for i, _ in a] == [i for i, _ in b] and all(
        abs(x - y) <= 1e-9 * max(1.0, abs(y)) for (_, x), (_, y) in zip(a, b, strict=True)
    )


#: the ways the leg can score: (postings, pruned)
PASSES = {"bounded": (True, True), "postings": (True, False), "tsvector": (False, False)}


async def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    queries = [dataset.queries[q] for q in dataset.qrels if q in dataset.queries][: args.queries]
    engine = await build(dataset, args.store, args.cache, {"fusion": {"weights": {"document_fts": 1.0}}})
    cfg = engine.config.search
    db = await engine.database()  # weighting the leg builds its chunk indexes here
    passes = [p for p in args.passes.split(",") if p]
    counts: dict[str, list[int]] = {"documents": [], "scored": []}

    async def timed(query: str, scope: ReadScope, way: str) -> tuple[float, list[tuple[int, float]]]:
        postings, pruned = PASSES[way]
        report: dict[str, int] = {}
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
            pruned=pruned,
            report=report,
        )
        took = (time.perf_counter() - started) * 1000
        if report:
            for key in counts:
                counts[key].append(report[key])
        return took, found

    try:
        for query in queries[:3]:  # warm the pool and the caches
            for way in passes:
                await timed(query, ReadScope(None), way)
        counts = {key: [] for key in counts}
        print(f"load before: {load_average()}")
        rows = []
        for label, scope in (("trusted", ReadScope(None)), ("one principal", ReadScope(("user:bench",)))):
            ms: dict[str, list[float]] = {way: [] for way in passes}
            agree = 0
            for n, query in enumerate(queries):
                order = passes[n % len(passes) :] + passes[: n % len(passes)]
                found = {}
                for way in order:
                    took, found[way] = await timed(query, scope, way)
                    ms[way].append(took)
                agree += all(same(found[way], found[passes[0]]) for way in passes)
            for way in passes:
                values = ms[way]
                rows.append(f"| {label} | {way} | {statistics.median(values):.1f} | {percentile(values, 95):.1f} |")
            rows.append(f"| {label} | same answer | {agree} of {len(queries)} | |")
        print(f"load after: {load_average()}")
    finally:
        await engine.aclose()
    print(f"\n{len(queries)} queries, the document leg alone at limit {args.limit}\n")
    print("| caller | scored by | p50 ms | p95 ms |\n|---|---|---:|---:|")
    print("\n".join(rows))
    if counts["documents"]:
        print(
            f"\nbounded pass: {statistics.mean(counts['documents']):.0f} documents hold a query term, "
            f"{statistics.mean(counts['scored']):.0f} scored (means over {len(counts['documents'])} runs)"
        )


def parse() -> argparse.Namespace:
    parser = store_parser(__doc__, 300)
    parser.add_argument("--limit", type=int, default=50, help="documents the leg returns")
    parser.add_argument("--passes", default="bounded,postings", help=f"comma-separated, of {', '.join(PASSES)}")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
