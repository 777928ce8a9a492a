"""What reading the past costs: search as of a revision against plain search, on BEIR SciFact.

Run from the repository root with the ``bench`` extra installed::

    python benchmarks/revisions/run.py --data PATH/TO/scifact              # the whole corpus
    python benchmarks/revisions/run.py --data PATH/TO/scifact --docs 1500  # a subset (see below)

Steps, all through ``ContextEngine`` on an embedded PostgreSQL under ``benchmarks/.cache/pg``:

1. ingest the corpus (revision ``r0`` after it) and run every judged query: plain search at ``r0``;
2. replace 10% of the documents (chosen among those no query judges, seeded), each by the text of
   another such document, so the replaced versions need no new embedding;
3. run every query again four ways: plain search (the current revision), ``as_of`` = the current
   revision, and ``as_of = r0`` (before the replacements).

Printed: p50/p95 latency of each, the ratios the issue bounds (as_of=current over plain, within 10%;
as_of=r0 over plain, at most 3x), and nDCG@10 on the queries whose judged documents were not
replaced ("unchanged queries"), plus whether as_of=r0 returned the same ranking as plain search did
at r0. ``--docs N`` keeps every document some query judges plus others up to N, and only the
queries whose judged documents are all kept; the figures then describe that subset.

Chunk vectors come from ``CachingEmbedder`` under ``benchmarks/.cache/embeddings`` (the same cache
as ``benchmarks/beir/run.py``); a miss is embedded by the local model now. Query vectors are never
cached, so each latency includes embedding the query.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

from context_engine import ContextEngine
from context_engine.config import ContextEngineConfig
from context_engine.embeddings.local import LocalEmbedder
from context_engine.evaluation import (
    BeirDataset,
    CachingEmbedder,
    cache_file,
    dedupe_documents,
    document_markdown,
    ingest_dataset,
    load_beir,
    ndcg_at_k,
    percentile,
)
from context_engine.principals import TRUSTED
from context_engine.storage import embedded

HERE = Path(__file__).resolve().parent
CACHE = HERE.parent / ".cache"
SOURCE = "beir"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def subset(dataset: BeirDataset, docs: int | None, seed: int) -> BeirDataset:
    """Every judged document plus others up to ``docs``; only queries whose judged documents are kept."""
    if docs is None or docs >= len(dataset.corpus):
        return dataset
    judged = {d for rel in dataset.qrels.values() for d in rel}
    others = [d for d in dataset.corpus if d not in judged]
    random.Random(seed).shuffle(others)
    keep = {d for d in dataset.corpus if d in judged} | set(others[: max(0, docs - len(judged))])
    corpus = {d: v for d, v in dataset.corpus.items() if d in keep}
    qrels = {q: rel for q, rel in dataset.qrels.items() if all(d in corpus for d in rel)}
    queries = {q: t for q, t in dataset.queries.items() if q in qrels}
    return BeirDataset(dataset.name, corpus, queries, qrels, dataset.corpus_sha256)


def database_url(name: str, *, fresh: bool) -> str:
    _pgdata, base = embedded.acquire(CACHE / "pg")
    if fresh:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = base.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


async def one_query(engine: ContextEngine, query: str, as_of: int | None, top_k: int) -> tuple[list[str], float]:
    started = time.perf_counter()
    result = await engine.search(query, source_ids=[SOURCE], principals=TRUSTED, top_k=top_k, as_of=as_of)
    elapsed = (time.perf_counter() - started) * 1000
    return dedupe_documents((h.document_name, h.score) for h in result.hits), elapsed


async def run_queries(
    engine: ContextEngine, dataset: BeirDataset, *, as_of: int | None, top_k: int
) -> tuple[dict[str, list[str]], list[float]]:
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid, query in dataset.queries.items():
        rankings[qid], elapsed = await one_query(engine, query, as_of, top_k)
        latencies.append(elapsed)
    return rankings, latencies


async def interleaved(
    engine: ContextEngine, dataset: BeirDataset, variants: dict[str, int | None], top_k: int
) -> dict[str, tuple[dict[str, list[str]], list[float]]]:
    """Every query under every variant, the variants' order rotating per query, so a change of the
    machine's load during the run weighs on each variant alike."""
    names = list(variants)
    out: dict[str, tuple[dict[str, list[str]], list[float]]] = {n: ({}, []) for n in names}
    for i, (qid, query) in enumerate(dataset.queries.items()):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            ranking, elapsed = await one_query(engine, query, variants[name], top_k)
            out[name][0][qid] = ranking
            out[name][1].append(elapsed)
    return out


def ndcg(rankings: dict[str, list[str]], dataset: BeirDataset, queries: set[str]) -> float:
    return statistics.fmean(ndcg_at_k(rankings[q], dataset.qrels[q]) for q in queries) if queries else 0.0


async def replace_tenth(engine: ContextEngine, dataset: BeirDataset, seed: int) -> set[str]:
    """Re-ingest 10% of the documents (none judged) with the text of another unjudged document."""
    judged = {d for rel in dataset.qrels.values() for d in rel}
    pool = [d for d in dataset.corpus if d not in judged]
    rng = random.Random(seed)
    count = max(1, len(dataset.corpus) // 10)
    if len(pool) < 2 * count:
        raise SystemExit(f"only {len(pool)} unjudged documents: too few to replace {count} of them")
    chosen = rng.sample(pool, 2 * count)
    targets, donors = chosen[:count], chosen[count:]
    gate = asyncio.Semaphore(4)

    async def one(target: str, donor: str) -> None:
        title, body = dataset.corpus[donor]
        async with gate:
            report = await engine.ingest(
                text=document_markdown(title, body), name=target, source_id=SOURCE, principals=TRUSTED
            )
        if report.documents[0].status != "completed":
            raise SystemExit(f"replacing {target} failed: {report.documents[0]}")

    await asyncio.gather(*(one(t, d) for t, d in zip(targets, donors, strict=True)))
    return set(targets)


def line(name: str, latencies: list[float], base: list[float] | None = None) -> str:
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    ratio = f"  {p50 / percentile(base, 50):.2f}x plain p50" if base else ""
    return f"  {name:<34} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms{ratio}"


async def main_async(args: argparse.Namespace) -> None:
    dataset = subset(load_beir(args.data), args.docs, args.seed)
    if args.queries:
        keep = list(dataset.queries)[: args.queries]
        dataset = BeirDataset(
            dataset.name,
            dataset.corpus,
            {q: dataset.queries[q] for q in keep},
            {q: dataset.qrels[q] for q in keep},
            dataset.corpus_sha256,
        )
    state_file = CACHE / "revisions_bench.json"
    key = {"docs": len(dataset.corpus), "seed": args.seed, "sha": dataset.corpus_sha256}
    state = json.loads(state_file.read_text()) if args.reuse and state_file.is_file() else None
    reuse = state is not None and state.get("key") == key
    config = ContextEngineConfig(
        database_url=database_url("revisions_bench", fresh=not reuse),
        storage={"auto_migrate": True},
        search={"max_top_k": 1000},
    )
    inner = LocalEmbedder(config.embedding)
    budget = min(config.ingest.chunk_tokens, inner.max_input_tokens)
    cached = CachingEmbedder(inner, cache_file(CACHE / "embeddings", inner, dataset.corpus_sha256, f"heading-{budget}"))
    log(f"corpus {len(dataset.corpus)} documents, {len(dataset.queries)} queries; cached vectors: {len(cached)}")
    async with ContextEngine(config, embedder=cached) as engine:
        before: dict[str, list[str]] | None = None
        before_ms: list[float] = []
        if reuse and state is not None:
            r0, replaced = int(state["r0"]), set(state["replaced"])
            log(f"reusing the database of an earlier run: r0 {r0}, {len(replaced)} replaced")
        else:
            failed, seconds = await ingest_dataset(engine, dataset, source_id=SOURCE)
            cached.save()
            r0 = await engine.revision()
            log(f"ingested in {seconds:.0f} s ({failed} failed); revision {r0}")
            await run_queries(engine, dataset, as_of=None, top_k=args.top_k)  # warm caches and pool
            before, before_ms = await run_queries(engine, dataset, as_of=None, top_k=args.top_k)
            replaced = await replace_tenth(engine, dataset, args.seed)
            cached.save()
            state_file.write_text(json.dumps({"key": key, "r0": r0, "replaced": sorted(replaced)}))
        current = await engine.revision()
        log(f"replaced {len(replaced)} documents; revision {r0} -> {current}")
        await run_queries(engine, dataset, as_of=r0, top_k=args.top_k)  # warm the history pages too
        runs = interleaved(engine, dataset, {"plain": None, "current": current, "r0": r0}, args.top_k)
        measured = await runs
        (plain, plain_ms), (at_current, current_ms), (past, past_ms) = (
            measured["plain"],
            measured["current"],
            measured["r0"],
        )
        chunks = (await engine.stats(principals=TRUSTED)).chunks
    unchanged = {q for q, rel in dataset.qrels.items() if not set(rel) & replaced}
    load = os.getloadavg()
    print(
        f"revisions benchmark on {dataset.name}: {len(dataset.corpus)} documents ({chunks} current chunks), "
        f"{len(dataset.queries)} queries, top_k {args.top_k}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    if before is not None:
        print(line("plain search at r0 (before)", before_ms))
    print(line("plain search (current)", plain_ms))
    print(line("as_of = current revision", current_ms, plain_ms))
    print(line("as_of = r0 (before 10% replaced)", past_ms, plain_ms))
    print(
        f"  nDCG@10 on {len(unchanged)} unchanged queries: plain {ndcg(plain, dataset, unchanged):.4f}, "
        f"as_of=current {ndcg(at_current, dataset, unchanged):.4f}, as_of=r0 {ndcg(past, dataset, unchanged):.4f}"
    )
    if before is not None:
        everything = set(dataset.queries)
        same = sum(past[q][:10] == before[q][:10] for q in everything)
        print(
            f"  all {len(everything)} queries: nDCG@10 plain at r0 {ndcg(before, dataset, everything):.4f}, "
            f"as_of=r0 {ndcg(past, dataset, everything):.4f}; as_of=r0 top-10 identical to plain at r0 "
            f"for {same}/{len(everything)}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the BEIR dataset folder (e.g. scifact)")
    parser.add_argument("--docs", type=int, help="use a subset of this many documents (judged ones first)")
    parser.add_argument("--queries", type=int, help="run only the first N judged queries")
    parser.add_argument("--top-k", type=int, default=100, help="passages per search (documents ranked by best)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--reuse", action="store_true", help="measure again on the database an earlier run with these settings left"
    )
    asyncio.run(main_async(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
