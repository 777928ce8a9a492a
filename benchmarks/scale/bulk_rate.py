"""The bulk-ingest rate alone, without the index builds: a shorter companion of ``run.py``.

Run from the repository root::

    python benchmarks/scale/bulk_rate.py --data PATH/TO/scifact/corpus.jsonl.gz --rows 200000

It loads the same documents as ``run.py``'s first phase (ten chunks each, 1,000 ACL groups, vectors
given by a stand-in embedder, so embedding is excluded) through ``engine.bulk_ingest`` with the
rebuilt indexes dropped beforehand and not built afterwards (``build_index=False`` on a table
without them): the rate is what ``run.py`` reports as its load phase, minutes sooner. It then prints
where the rows ended: the sizes of ``ce_chunks`` and of the BM25 statistics, the peak RSS of this
process during the load (as ``run.py`` samples it), and the load average before and after (the
machine is shared; a rate means little without it).
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

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_corpus as sc
from run import DIM, SOURCE, GivenVectorsEmbedder, PeakRss, documents, load_average

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.embeddings.factory import build_embedder
from context_engine.ingest.bulk import REBUILT_INDEXES
from context_engine.storage import embedded

SIZES = (
    "SELECT pg_total_relation_size('ce_chunks'), pg_total_relation_size('ce_bm25_terms'), "
    "(SELECT count(*) FROM ce_bm25_terms), (SELECT count(*) FROM ce_bm25_groups)"
)


async def load(url: str, args: argparse.Namespace) -> dict[str, Any]:
    config = ContextEngineConfig(database_url=url, storage={"auto_migrate": True})
    embedder = GivenVectorsEmbedder(build_embedder(config.embedding))
    layout = sc.make_layout(args.rows)
    vocab = sc.vocabulary(args.data)
    async with ContextEngine(config, embedder=embedder) as engine:
        await engine.stats(principals=TRUSTED)  # start and migrate outside the timing
        with psycopg.connect(url, autocommit=True) as conn:
            for name in REBUILT_INDEXES:
                conn.execute(f"DROP INDEX IF EXISTS {name}")
        docs = documents(
            layout, vocab, embedder, layout.centres(DIM), start=0, stop=layout.rows, source_id=SOURCE, prefix="d"
        )
        before = load_average()
        with PeakRss() as rss:
            t0 = time.perf_counter()
            report = await engine.bulk_ingest(docs, build_index=False, batch_chunks=args.batch_chunks)
            wall = time.perf_counter() - t0
    with psycopg.connect(url) as conn:
        row = conn.execute(SIZES).fetchone()
    assert row is not None
    return {
        "rows": args.rows,
        "batch_chunks": args.batch_chunks,
        "chunks": report.chunks,
        "handed_over": len(report.ordinary),
        "wall_s": round(wall, 1),
        "embed_s": round(report.embed_seconds, 1),
        "bulk_chunks_per_s": round(report.chunks / max(1e-9, report.seconds - report.embed_seconds)),
        "peak_rss_load_mb": round(rss.peak / 2**20),
        "ce_chunks_mb": round(row[0] / 2**20),
        "bm25_terms_mb": round(row[1] / 2**20),
        "bm25_term_rows": row[2],
        "bm25_groups": row[3],
        "load_average_before": before,
        "load_average_after": load_average(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a BEIR corpus.jsonl.gz for the vocabulary")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-chunks", type=int, default=20_000)
    parser.add_argument("--shared-buffers", default="1GB")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ce-bulk-rate-"))
    try:
        pgdata, url = embedded.acquire(base)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"ALTER SYSTEM SET shared_buffers = '{args.shared_buffers}'")
            embedded.release(pgdata)
            pgdata, url = embedded.acquire(base)
            print(json.dumps(asyncio.run(load(url, args))), flush=True)
        finally:
            embedded.release(pgdata)
    finally:
        embedded.remove(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
