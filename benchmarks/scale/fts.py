"""The full-text (BM25) leg alone on a synthetic million-chunk table: p50/p95 per caller and depth.

Run from the repository root::

    python benchmarks/scale/fts.py                       # build once (cached), then measure
    python benchmarks/scale/fts.py --rows 200000 --queries 40
    python benchmarks/scale/fts.py --strategies pruned,bounded

The table is built straight into ``ce_chunks`` with set-based SQL, not through the ingest path (which
is another benchmark's subject): chunk texts are Zipfian draws over the SciFact vocabulary (rank by
corpus frequency, probability proportional to 1/rank), 40-160 words each, one source, each chunk
under the ACL of one of ``--groups`` groups. The BM25 statistics are then computed from the rows as
the write path keeps them. The database lives under ``benchmarks/.cache/scale-fts`` so later runs
skip the build (``--fresh`` rebuilds it).

Queries are SciFact's test claims, run through :func:`context_engine.retrieval.legs.fts.fts_leg` with
the default lexical settings, for a trusted caller, a caller holding 1% of the groups and one holding
30%, at ``limit`` 10 and 100. Each strategy named in ``--strategies`` answers every query in turn
(interleaved, so load moves them alike), and the answers of the strategies are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gzip
import hashlib
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from context_engine import ContextEngine
from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.local import LocalEmbedder
from context_engine.evaluation import dedupe_documents, ingest_dataset, load_beir, ndcg_at_k
from context_engine.principals import TRUSTED
from context_engine.retrieval import bm25
from context_engine.retrieval.legs.fts import fts_leg
from context_engine.storage import embedded
from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope

HERE = Path(__file__).resolve().parent
CACHE = HERE.parent / ".cache" / "scale-fts"
WORD = re.compile(r"[a-z][a-z0-9]+")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_uptime() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def vocabulary(corpus: Path) -> list[str]:
    """SciFact's words, most frequent first."""
    counts: collections.Counter[str] = collections.Counter()
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            counts.update(WORD.findall(f"{doc['title']} {doc['text']}".lower()))
    return [w for w, _ in counts.most_common()]


def texts(words: list[str], rows: int, seed: int) -> list[str]:
    """``rows`` chunk texts, each word drawn with probability proportional to 1/rank."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(words) + 1)
    cdf = np.cumsum(weights / weights.sum())
    lengths = rng.integers(40, 161, size=rows)
    draws = np.searchsorted(cdf, rng.random(int(lengths.sum())), side="right")
    vocab = np.array(words, dtype=object)
    out, at = [], 0
    for n in lengths:
        out.append(" ".join(vocab[draws[at : at + n]]))
        at += n
    return out


async def build(url: str, rows: int, groups: int, corpus: Path) -> None:
    """Migrate, then fill ``ce_chunks`` and the BM25 statistics with set-based SQL."""
    db = create_async_engine(to_driver_url(url))
    try:
        await migrate(db, dim=384, announce=lambda _line: None)
    finally:
        await db.dispose()
    words = vocabulary(corpus)
    log(f"vocabulary: {len(words):,} words; drawing {rows:,} chunk texts ...")
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET work_mem = '256MB'")
        conn.execute("TRUNCATE ce_chunks, ce_bm25_terms, ce_bm25_groups")
        conn.execute("DROP INDEX IF EXISTS ix_ce_chunks_tsv")
        conn.execute("DROP INDEX IF EXISTS ix_ce_chunks_trgm")  # not read by this leg; costly to build
        conn.execute("CREATE UNLOGGED TABLE IF NOT EXISTS scale_stage (n bigint, body text)")
        conn.execute("TRUNCATE scale_stage")
        step = 100_000
        for start in range(0, rows, step):
            batch = texts(words, min(step, rows - start), seed=start)
            with conn.cursor().copy("COPY scale_stage (n, body) FROM STDIN") as copy:
                for i, body in enumerate(batch):
                    copy.write_row((start + i, body))
            log(f"  staged {start + len(batch):,} ({time.perf_counter() - started:.0f} s)")
        log("  tsvectors ...")
        group = f"'g' || ((hashint8(s.n)::bigint + 2147483648) % {int(groups)})"
        conn.execute(
            "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, tsv, valid_from) "
            f"SELECT md5('doc' || (s.n / 10))::uuid, 1, s.n % 10, 'scale', ARRAY[{group}], "
            "s.body, md5(s.body), to_tsvector('english', unaccent(s.body)), 1 FROM scale_stage s ORDER BY s.n"
        )
        conn.execute("DROP TABLE scale_stage")
        log(f"  chunks in ({time.perf_counter() - started:.0f} s); GIN index ...")
        conn.execute("CREATE INDEX ix_ce_chunks_tsv ON ce_chunks USING gin (tsv) WHERE valid_to IS NULL")
        log(f"  statistics ({time.perf_counter() - started:.0f} s) ...")
        conn.execute(
            "INSERT INTO ce_bm25_groups (source_id, acl, chunks, tokens) SELECT c.source_id, c.acl, count(*), "
            "coalesce(sum(c.tsv_tokens), 0) FROM ce_chunks c WHERE c.valid_to IS NULL GROUP BY 1, 2"
        )
        conn.execute(
            "INSERT INTO ce_bm25_terms (lexeme, group_id, df) SELECT u.lexeme, g.group_id, count(*) "
            "FROM ce_chunks c JOIN ce_bm25_groups g ON g.source_id = c.source_id AND g.acl = c.acl, "
            "unnest(c.tsv) u WHERE c.valid_to IS NULL GROUP BY 1, 2 ORDER BY 1, 2"
        )
        conn.execute("VACUUM ANALYZE ce_chunks")
        conn.execute("VACUUM ANALYZE ce_bm25_terms")
        conn.execute("VACUUM ANALYZE ce_bm25_groups")
    log(f"built in {time.perf_counter() - started:.0f} s")


def built_rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('ce_chunks') IS NOT NULL").fetchone()
        if not found or not found[0]:
            return 0
        row = conn.execute("SELECT count(*) FROM ce_chunks").fetchone()
        return int(row[0]) if row else 0


def claims(queries: Path, qrels: Path, count: int) -> list[str]:
    """The first ``count`` SciFact test claims (the ids named in the test qrels)."""
    wanted = {line.split("\t")[0] for line in qrels.read_text(encoding="utf-8").splitlines()[1:] if line.strip()}
    out = []
    with gzip.open(queries, "rt", encoding="utf-8") as fh:
        for line in fh:
            query = json.loads(line)
            if query["_id"] in wanted:
                out.append(query["text"])
    return out[:count]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(url: str, queries: list[str], groups: int, strategies: list[str]) -> None:
    """Every (caller, limit, strategy) on every query, interleaved; print p50/p95 and agreement."""
    callers = {
        "trusted": None,
        "1% of groups": tuple(f"g{i}" for i in range(max(1, groups // 100))),
        "30% of groups": tuple(f"g{i}" for i in range(groups * 3 // 10)),
    }
    db = create_async_engine(to_driver_url(url), pool_size=2)
    times: dict[tuple[str, int, str], list[float]] = collections.defaultdict(list)
    passes: dict[tuple[str, int, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    disagree: collections.Counter[tuple[str, int]] = collections.Counter()
    try:
        for query in queries[:2]:  # warm the caches and the connection
            await fts_leg(
                db,
                query,
                ReadScope(principals=None),
                limit=10,
                config="english",
                match="any",
                rank="bm25",
                normalization=1,
            )
        for caller, principals in callers.items():
            for limit in (10, 100):
                for query in queries:
                    answers = {}
                    for strategy in strategies:
                        report: dict[str, Any] = {}
                        started = time.perf_counter()
                        answers[strategy] = await fts_leg(
                            db,
                            query,
                            ReadScope(principals=principals),
                            limit=limit,
                            config="english",
                            match="any",
                            rank="bm25",
                            normalization=1,
                            report=report,
                            strategy=strategy,
                        )
                        times[(caller, limit, strategy)].append((time.perf_counter() - started) * 1000)
                        passes[(caller, limit, strategy)][str(report.get("pass"))] += 1
                    first = answers[strategies[0]]
                    if any(_differs(first, other) for other in answers.values()):
                        disagree[(caller, limit)] += 1
                log(f"  {caller} limit {limit} done (load {load_uptime()})")
    finally:
        await db.dispose()
    print(f"\nload average (1/5/15 min) at the end: {load_uptime()}; {len(queries)} queries per cell\n")
    print("| caller | top_k | strategy | p50 ms | p95 ms | passes | answers differ |")
    print("|---|---:|---|---:|---:|---|---:|")
    for caller in callers:
        for limit in (10, 100):
            for strategy in strategies:
                values = times[(caller, limit, strategy)]
                taken = ", ".join(f"{k} {v}" for k, v in sorted(passes[(caller, limit, strategy)].items()))
                print(
                    f"| {caller} | {limit} | {strategy} | {statistics.median(values):.1f} | "
                    f"{percentile(values, 0.95):.1f} | {taken} | {disagree[(caller, limit)]} |"
                )


def _differs(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    if [i for i, _ in a] != [i for i, _ in b]:
        return True
    return any(abs(x - y) > 1e-9 * max(1.0, abs(x)) for (_, x), (_, y) in zip(a, b, strict=True))


class TokenCountingStandIn(Embedder):
    """Hashed vectors, but the local model's own token counts, so SciFact is cut into exactly the
    chunks the BEIR harness gets (the full-text leg never reads the vectors)."""

    provider, model = "stand-in", "hashed-384"

    def __init__(self) -> None:
        self.inner = LocalEmbedder()
        self.dim, self.max_input_tokens = self.inner.dim, self.inner.max_input_tokens

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = []
        for body in texts:
            seed = int.from_bytes(hashlib.sha256(body.encode()).digest()[:8], "big")
            out.append(np.random.default_rng(seed).standard_normal(self.dim).tolist())
        return out


async def scifact(data: Path, data_dir: Path, strategies: list[str]) -> None:
    """SciFact's 300 test claims through the full-text leg alone: nDCG@10 and latency per strategy."""
    dataset = load_beir(data)
    config = ContextEngineConfig(storage={"auto_migrate": True, "data_dir": str(data_dir)})
    async with ContextEngine(config, embedder=TokenCountingStandIn()) as engine:
        stats = await engine.stats(principals=TRUSTED, source_ids=["beir"])
        if stats.documents != len(dataset.corpus):
            failed, seconds = await ingest_dataset(engine, dataset, source_id="beir")
            log(f"ingested SciFact in {seconds:.0f} s ({failed} failed)")
        db = await engine.database()
        async with db.connect() as conn:
            names = dict(
                (
                    await conn.execute(
                        text(
                            "SELECT c.id, d.name FROM ce_chunks c JOIN ce_documents d "
                            "ON d.id = c.document_id WHERE c.valid_to IS NULL"
                        )
                    )
                ).all()
            )
        scope = ReadScope(principals=None, source_ids=["beir"])
        print(f"\nSciFact, {len(dataset.queries)} test queries, full-text leg alone, trusted caller\n")
        print("| limit | strategy | nDCG@10 | p50 ms | p95 ms | passes | answers differ from the first |")
        print("|---:|---|---:|---:|---:|---|---:|")
        for limit in (50, 100):
            times: dict[str, list[float]] = collections.defaultdict(list)
            ndcg: dict[str, list[float]] = collections.defaultdict(list)
            passes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
            differ: collections.Counter[str] = collections.Counter()
            for qid, query in dataset.queries.items():
                first = None
                for strategy in strategies:
                    report: dict[str, Any] = {}
                    started = time.perf_counter()
                    rows = await fts_leg(
                        db,
                        query,
                        scope,
                        limit=limit,
                        config="english",
                        match="any",
                        rank="bm25",
                        normalization=1,
                        report=report,
                        strategy=strategy,
                    )
                    times[strategy].append((time.perf_counter() - started) * 1000)
                    passes[strategy][str(report.get("pass"))] += 1
                    ranked = dedupe_documents((names[cid], score) for cid, score in rows)
                    ndcg[strategy].append(ndcg_at_k(ranked, dataset.qrels[qid]))
                    first = rows if first is None else first
                    differ[strategy] += int(_differs(first, rows))
            for strategy in strategies:
                taken = ", ".join(f"{k} {v}" for k, v in sorted(passes[strategy].items()))
                print(
                    f"| {limit} | {strategy} | {statistics.fmean(ndcg[strategy]):.4f} | "
                    f"{statistics.median(times[strategy]):.1f} | {percentile(times[strategy], 0.95):.1f} | "
                    f"{taken} | {differ[strategy]} |"
                )
        async with db.connect() as conn:
            sizes = (
                await conn.execute(
                    text(
                        "SELECT pg_total_relation_size('ce_chunks'), pg_total_relation_size('ce_bm25_terms'), "
                        "pg_total_relation_size('ce_bm25_groups')"
                    )
                )
            ).one()
        print(
            f"\nbytes: ce_chunks {sizes[0]:,}, ce_bm25_terms {sizes[1]:,}, ce_bm25_groups {sizes[2]:,}; "
            f"load average {load_uptime()}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the BEIR SciFact folder (corpus, queries, qrels)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument(
        "--strategies", default=",".join(bm25.STRATEGIES), help="comma-separated, first is the reference"
    )
    parser.add_argument("--data-dir", type=Path, default=CACHE)
    parser.add_argument("--fresh", action="store_true", help="rebuild the table")
    parser.add_argument("--scifact", action="store_true", help="measure SciFact (ingested once) instead")
    parser.add_argument("--prune-from", type=int, help="override bm25.PRUNE_FROM (postings from which to prune)")
    args = parser.parse_args()
    if args.prune_from is not None:
        bm25.PRUNE_FROM = args.prune_from
    if args.scifact:
        asyncio.run(scifact(args.data, args.data_dir.with_name("scale-fts-scifact"), args.strategies.split(",")))
        return 0
    _pgdata, url = embedded.acquire(args.data_dir)
    if args.fresh or built_rows(url) != args.rows:
        asyncio.run(build(url, args.rows, args.groups, args.data / "corpus.jsonl.gz"))
    queries = claims(args.data / "queries.jsonl.gz", args.data / "qrels" / "test.tsv", args.queries)
    asyncio.run(measure(url, queries, args.groups, args.strategies.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
