"""The document full-text leg alone on the scale benchmark's store: the bounded postings pass (the
leg's own) against every document scored from the postings (the pass before it), alternating.

    python benchmarks/scale/document_leg.py --data PATH/TO/scifact/corpus.jsonl.gz --reuse DIR

``DIR`` is a store ``run.py --keep DIR`` loaded; the leg's chunk indexes (migration 0027) are built
first if they are not there. The queries and the trusted, 1% and 30% callers are ``run.py``'s
latency phase's. Printed: each pass's p50 and p95 per caller, on how many queries both gave the same
chunks in the same order with the same scores (to 1e-9), and the bounded pass's mean count of
documents holding a query term and of those scored.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_corpus as sc
from run import DIM, engine_for, load_average, query_texts

from context_engine.evaluation import percentile
from context_engine.retrieval.legs.document_fts import document_fts_leg
from context_engine.storage import embedded
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [i for i, _ in a] == [i for i, _ in b] and all(
        abs(x - y) <= 1e-9 * max(1.0, abs(y)) for (_, x), (_, y) in zip(a, b, strict=True)
    )


async def measure(url: str, args: argparse.Namespace) -> None:
    vocab = sc.vocabulary(args.data)
    rng = np.random.default_rng(5)  # the latency phase's callers
    callers = {"trusted": None, "1%": sc.caller("random", 1, rng), "30%": sc.caller("random", 30, rng)}
    texts = query_texts(vocab, args.queries)
    async with engine_for(url) as engine:
        db = await engine.database()
        await migrate(db, dim=DIM, document_fts=True)
        cfg = engine.config.search
        counts: dict[str, list[int]] = {"documents": [], "scored": []}

        async def timed(query: str, scope: ReadScope, pruned: bool) -> tuple[float, list[tuple[int, float]]]:
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
                pruned=pruned,
                report=report,
            )
            took = (time.perf_counter() - started) * 1000
            for key in counts if report else ():
                counts[key].append(report[key])
            return took, found

        for principals in callers.values():  # warm: the indexes read once per caller
            for query in query_texts(vocab, args.queries + 5)[args.queries :]:
                await timed(query, ReadScope(principals), True)
        counts = {key: [] for key in counts}
        print(f"load before: {load_average()}", flush=True)
        rows = []
        for label, principals in callers.items():
            ms: dict[bool, list[float]] = {True: [], False: []}
            agree = 0
            for n, query in enumerate(texts):
                found = {}
                for pruned in (True, False) if n % 2 == 0 else (False, True):
                    took, found[pruned] = await timed(query, ReadScope(principals), pruned)
                    ms[pruned].append(took)
                agree += same(found[True], found[False])
            for pruned, name in ((True, "bounded"), (False, "postings")):
                values = ms[pruned]
                rows.append(f"| {label} | {name} | {statistics.median(values):.1f} | {percentile(values, 95):.1f} |")
            rows.append(f"| {label} | same answer | {agree} of {len(texts)} | |")
        print(f"load after: {load_average()}")
    print(f"\n{len(texts)} queries, the document leg alone at limit {args.limit}\n")
    print("| caller | scored by | p50 ms | p95 ms |\n|---|---|---:|---:|")
    print("\n".join(rows))
    if counts["documents"]:
        print(
            f"\nbounded pass: {statistics.mean(counts['documents']):.0f} documents hold a query term, "
            f"{statistics.mean(counts['scored']):.0f} scored (means over {len(counts['documents'])} runs)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a BEIR corpus.jsonl.gz for the vocabulary")
    parser.add_argument("--reuse", type=Path, required=True, help="the store run.py --keep loaded")
    parser.add_argument("--queries", type=int, default=50, help="queries per caller")
    parser.add_argument("--limit", type=int, default=50, help="documents the leg returns")
    args = parser.parse_args()
    pgdata, url = embedded.acquire(args.reuse)
    try:
        asyncio.run(measure(url, args))
    finally:
        embedded.release(pgdata)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
