"""context-engine beside the embedded options a user would pick instead, in one process, one run.

    python benchmarks/peers/run.py --data PATH/TO/scifact

Systems, all over the same BEIR corpus and queries and the same all-MiniLM-L6-v2 model:

* context-engine with its defaults, each document ingested as plain text (``title + "\\n\\n" + text``,
  no heading tricks) through ``ContextEngine.ingest`` on its own embedded server in a temporary
  directory, searched with ``search(top_k=100, group_by="document")``;
* LanceDB: full-text (its native BM25 index), vector (flat, exact) and hybrid (both, its RRF reranker),
  the hybrid search twice: returning the ids alone, and returning each document's text with its id,
  which is what our search returns (the passages' text) and what a RAG caller reads;
* Chroma: dense (its HNSW index, cosine);
* bm25s (stemmed) and exact numpy dense search, and plain RRF of the two (k 60);
* langchain-postgres ``PGVectorStore``, hybrid and vector alone, in a database of its own on our
  engine's embedded server (``langchain_pg.py``; ``--no-langchain-pg`` leaves it out).

The peers index one vector per document: title + text cut to the model's window, as
sentence-transformers evaluates BEIR. Those vectors are computed once and cached under
``--cache`` (the same cache the BEIR harness writes); our engine's chunk vectors are cached there too,
so a second run embeds nothing but the queries. Every search call embeds its own query with the local
model, and that time is in its latency. The queries are interleaved (for each query, every system in a
rotating order), so load on the machine hits every system alike. Recall@100 counts distinct documents.

The 300 test queries are also split into two fixed halves (even and odd positions in the qrels file):
each half's nDCG@10 and P@1 (the first document judged relevant) is reported, with a paired bootstrap
interval of context-engine minus plain RRF.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANCEDB_LOG", "error")  # lance warns on every hybrid query that selects columns

from context_engine import TRUSTED, ContextEngine  # noqa: E402
from context_engine.config import ContextEngineConfig, EmbeddingConfig  # noqa: E402
from context_engine.embeddings.local import LocalEmbedder  # noqa: E402
from context_engine.evaluation import (  # noqa: E402
    BeirDataset,
    CachingEmbedder,
    cache_file,
    head_tokens,
    load_beir,
    ndcg_at_k,
    percentile,
    recall_at_k,
    rrf_documents,
)
from context_engine.ingest.pipeline import chunk_stream, prepare  # noqa: E402
from context_engine.storage import embedded  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bm25_bounds  # noqa: E402
import bm25_passes  # noqa: E402
import concurrency  # noqa: E402
import handwritten  # noqa: E402
import overhead  # noqa: E402

DEPTH = 100
RRF_K = 60
HYBRID_WITH_TEXT = "LanceDB hybrid with text"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plain_text(title: str, body: str) -> str:
    return f"{title}\n\n{body}".strip()


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


#: embeds one query with the local model (the peers' searches call it inside their timed span)
Embed = Callable[[str], Awaitable[np.ndarray]]


class Timed:
    """One system's rankings and latencies, query by query. ``search(query, vector)`` gets the query's
    vector when the system needs one (``needs_vector``), embedded inside the timed span."""

    def __init__(self, name: str, search: Callable[[str, Any], Any], *, needs_vector: bool = False):
        self.name = name
        self.search = search
        self.needs_vector = needs_vector
        self.rankings: dict[str, list[str]] = {}
        self.latencies: list[float] = []
        self.build_seconds: float | None = None
        self.disk_bytes: int | None = None
        self.closers: list[Callable[[], Awaitable[None]]] = []

    async def run(self, qid: str, query: str, embed: Embed) -> None:
        started = time.perf_counter()
        vector = await embed(query) if self.needs_vector else None
        found = self.search(query, vector)
        if asyncio.iscoroutine(found):
            found = await found
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.rankings[qid] = list(found)


# ------------------------------------------------------------------------------------------- systems


async def build_engine(
    dataset: BeirDataset, workdir: Path, cache: Path, model: LocalEmbedder, concurrency: int, pool_size: int = 0
) -> tuple[ContextEngine, CachingEmbedder, float]:
    storage: dict[str, Any] = {"data_dir": workdir / "pg"}
    if pool_size:  # otherwise the default pool
        storage["pool_size"] = pool_size
    config = ContextEngineConfig(storage=storage)
    budget = min(config.ingest.chunk_tokens, model.max_input_tokens)
    chunks = CachingEmbedder(model, cache_file(cache / "embeddings", model, dataset.corpus_sha256, f"plain-{budget}"))
    texts: list[str] = []
    for doc_id, (title, body) in dataset.corpus.items():
        data = plain_text(title, body).encode()
        streamed = chunk_stream(data, doc_id, "text/markdown", budget, model.count_tokens, None)
        texts.extend(c.text for c in prepare(streamed, model.count_tokens, hold=1_000_000).chunks or [])
    embedded = await chunks.warm(texts, progress=lambda stage, done, total: None)
    chunks.save()
    log(f"context-engine: {len(texts)} chunks, {embedded} embedded now")
    engine = ContextEngine(config, embedder=chunks)
    gate = asyncio.Semaphore(concurrency)

    async def one(doc_id: str, title: str, body: str) -> None:
        async with gate:
            report = await engine.ingest(text=plain_text(title, body), name=doc_id, source_id="scifact")
            assert report.documents[0].status in ("completed", "skipped"), report.documents[0]

    started = time.perf_counter()
    await asyncio.gather(*(one(d, t, b) for d, (t, b) in dataset.corpus.items()))
    return engine, chunks, time.perf_counter() - started


async def engine_breakdown(engine: ContextEngine) -> list[tuple[str, int]]:
    """Bytes per table (heap + TOAST), per index, the WAL directory and everything else, after a
    ``VACUUM (ANALYZE)`` and a checkpoint: the state autovacuum leaves a store in within minutes of a
    load (an ordinary ingest writes each chunk, then its vector: until a vacuum, half the heap's rows
    are dead versions every full-text candidate read steps over). The queries run after it."""
    from sqlalchemy import text

    db = await engine.services.db()
    rows: list[tuple[str, int]] = []
    async with db.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await auto.execute(text("VACUUM (ANALYZE)"))
        await auto.execute(text("CHECKPOINT"))
        for name, size in await conn.execute(
            text(
                "SELECT c.relname, pg_table_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 2 DESC"
            )
        ):
            rows.append((f"table {name}", int(size)))
        for name, size in await conn.execute(
            text(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'i' ORDER BY 2 DESC"
            )
        ):
            rows.append((f"index {name}", int(size)))
        wal = await conn.scalar(text("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()"))
        rows.append(("WAL (pg_wal)", int(wal)))
        total = await conn.scalar(text("SELECT sum(pg_database_size(datname)) FROM pg_database"))
        rows.append(("all databases", int(total)))
    return rows


def lancedb_systems(dataset: BeirDataset, ids: list[str], vectors: np.ndarray, workdir: Path) -> list[Timed]:
    import lancedb
    from lancedb.rerankers import RRFReranker

    started = time.perf_counter()
    db = lancedb.connect(str(workdir / "lance"))
    texts = [f"{t} {x}".strip() for t, x in dataset.corpus.values()]
    table = db.create_table(
        "scifact",
        data=[{"id": i, "text": s, "vector": v.tolist()} for i, s, v in zip(ids, texts, vectors, strict=True)],
    )
    with warnings.catch_warnings():  # its BM25 index: stemming and stop words on, as by default
        warnings.simplefilter("ignore")
        table.create_fts_index("text", replace=True)
    build = time.perf_counter() - started
    reranker = RRFReranker()

    def fts(query: str, q: Any) -> list[str]:
        return [r["id"] for r in table.search(query, query_type="fts").select(["id"]).limit(DEPTH).to_list()]

    def vector(query: str, q: Any) -> list[str]:
        return [r["id"] for r in table.search(q).metric("cosine").select(["id"]).limit(DEPTH).to_list()]

    def hybrid_of(columns: list[str]) -> Callable[[str, Any], list[str]]:
        def hybrid(query: str, q: Any) -> list[str]:
            found = (
                table.search(query_type="hybrid")
                .vector(q)
                .text(query)
                .metric("cosine")
                .rerank(reranker)
                .select(columns)
                .limit(DEPTH)
                .to_list()
            )
            return [r["id"] for r in found]

        return hybrid

    systems = [
        Timed(
            f"LanceDB {lancedb.__version__} hybrid (BM25 index + flat vectors, RRF)",
            hybrid_of(["id"]),
            needs_vector=True,
        ),
        Timed(f"{HYBRID_WITH_TEXT} (the same, returning the text)", hybrid_of(["id", "text"]), needs_vector=True),
        Timed("LanceDB full-text alone", fts),
        Timed("LanceDB vector alone (flat)", vector, needs_vector=True),
    ]
    systems[0].build_seconds = build
    systems[0].disk_bytes = du(workdir / "lance")
    return systems


def chroma_system(ids: list[str], vectors: np.ndarray, workdir: Path) -> Timed:
    import chromadb
    from chromadb.config import Settings

    started = time.perf_counter()
    client = chromadb.PersistentClient(path=str(workdir / "chroma"), settings=Settings(anonymized_telemetry=False))
    collection = client.create_collection("scifact", embedding_function=None, metadata={"hnsw:space": "cosine"})
    for start in range(0, len(ids), 1000):
        collection.add(ids=ids[start : start + 1000], embeddings=vectors[start : start + 1000].tolist())
    build = time.perf_counter() - started

    def dense(query: str, q: Any) -> list[str]:
        found = collection.query(query_embeddings=[q.tolist()], n_results=DEPTH, include=[])
        return list(found["ids"][0])

    system = Timed(f"Chroma {chromadb.__version__} dense (HNSW, cosine)", dense, needs_vector=True)
    system.build_seconds = build
    system.disk_bytes = du(workdir / "chroma")
    return system


def bm25s_system(dataset: BeirDataset, ids: list[str]) -> Timed:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    started = time.perf_counter()
    index = bm25s.BM25(k1=1.5, b=0.75)
    texts = [f"{t} {x}".strip() for t, x in dataset.corpus.values()]
    index.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    build = time.perf_counter() - started

    def search(query: str, q: Any) -> list[str]:
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:
            return []
        docs, scores = index.retrieve(tokens, k=DEPTH, show_progress=False, n_threads=1)
        return [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    system = Timed("bm25s (stemmed, k1 1.5, b 0.75)", search)
    system.build_seconds = build
    return system


def numpy_system(ids: list[str], vectors: np.ndarray) -> Timed:
    matrix = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def search(query: str, q: Any) -> list[str]:
        sims = matrix @ (q / max(float(np.linalg.norm(q)), 1e-12))
        top = np.argpartition(-sims, DEPTH - 1)[:DEPTH]
        top = top[np.lexsort((top, -sims[top]))]
        return [ids[int(i)] for i in top]

    return Timed("exact dense (numpy)", search, needs_vector=True)


async def langchain_pg_systems(
    engine: ContextEngine, dataset: BeirDataset, ids: list[str], vectors: np.ndarray, embed: Embed
) -> tuple[list[Timed], Callable[[], Awaitable[None]]]:
    """The langchain-postgres rows (see ``langchain_pg.py``) and the closer of its pool."""
    from importlib.metadata import version

    from langchain_pg import langchain_pg_searches

    texts = [f"{t} {x}".strip() for t, x in dataset.corpus.values()]
    peer = await langchain_pg_searches(await engine.services.database.url(), ids, texts, vectors, embed, DEPTH)
    label = f"langchain-postgres {version('langchain-postgres')} PGVectorStore"
    systems = [Timed(f"{label} {name}", search, needs_vector=needs) for name, (search, needs) in peer.searches.items()]
    systems[0].build_seconds, systems[0].disk_bytes = peer.build_seconds, peer.disk_bytes
    return systems, peer.close


async def handwritten_system(engine: ContextEngine, dataset: BeirDataset, ids: list[str], vectors: np.ndarray) -> Timed:
    """The hand-written pgvector hybrid query (see ``handwritten.py``) on our engine's own server."""
    url = await engine.services.database.url()
    texts = [f"{t} {x}".strip() for t, x in dataset.corpus.values()]
    started = time.perf_counter()
    await asyncio.to_thread(handwritten.build, url, ids, texts, vectors)
    build = time.perf_counter() - started
    searcher = await handwritten.Searcher(url).open()
    system = Timed(
        "hand-written pgvector hybrid (GIN ts_rank_cd + HNSW, RRF in SQL)", searcher.search, needs_vector=True
    )
    system.build_seconds = build
    system.closers = [searcher.close]
    return system


async def concurrent_table(
    engine: ContextEngine,
    hybrid: Timed,
    with_text: Timed,
    embed: Embed,
    queries: list[str],
    args: argparse.Namespace,
) -> list[str]:
    """``args.workers`` concurrent searchers: ours, LanceDB hybrid (ids alone, and with the text) and
    the hand-written query, in alternating windows (see ``concurrency.py``), with CPU per search
    including the server's."""
    url = await engine.services.database.url()
    pool: asyncio.Queue[handwritten.Searcher] = asyncio.Queue()
    for _ in range(args.workers):
        pool.put_nowait(await handwritten.Searcher(url).open())

    async def ours(query: str) -> object:
        return await engine.search(query, top_k=DEPTH, group_by="document", principals=TRUSTED)

    async def lance(query: str) -> object:
        vector = await embed(query)
        return await asyncio.to_thread(hybrid.search, query, vector)

    async def lance_text(query: str) -> object:
        vector = await embed(query)
        return await asyncio.to_thread(with_text.search, query, vector)

    async def hand(query: str) -> object:
        searcher = await pool.get()
        try:
            return await searcher.search(query, await embed(query))
        finally:
            pool.put_nowait(searcher)

    postmaster = (
        embedded.running_postmaster(engine.services.database._pgdata) if engine.services.database._pgdata else None
    )
    systems: dict[str, concurrency.SearchOnce] = {
        "context-engine search": ours,
        "LanceDB hybrid": lance,
        HYBRID_WITH_TEXT: lance_text,
        "hand-written pgvector hybrid": hand,
    }
    try:
        tallies = await concurrency.alternate(
            systems,
            queries,
            workers=args.workers,
            seconds=args.window_seconds,
            rounds=args.rounds,
            postmaster=postmaster,
        )
    finally:
        while not pool.empty():
            await pool.get_nowait().close()
    return concurrency.table(tallies, "LanceDB hybrid", args.workers)


async def stage_tables(
    engine: ContextEngine, chunks: CachingEmbedder, embed: Embed, queries: list[str], pgdata: Path
) -> tuple[ContextEngine, list[str]]:
    """The stage-by-stage breakdown (see ``overhead.py``); returns the reopened engine."""
    config = engine.services.config
    engine = await overhead.with_statement_stats(engine, pgdata, lambda: ContextEngine(config, embedder=chunks))

    async def ours(query: str) -> Any:
        return await engine.search(query, top_k=DEPTH, group_by="document", principals=TRUSTED)

    lines = await overhead.breakdown(
        engine, "context-engine search(top_k=100, group_by=document)", ours, queries, timers=True
    )
    searcher = await handwritten.Searcher(await engine.services.database.url()).open()
    try:

        async def hand(query: str) -> Any:
            return await searcher.search(query, await embed(query))

        lines += ["", *await overhead.breakdown(engine, "hand-written pgvector hybrid", hand, queries, timers=False)]
    finally:
        await searcher.close()
    return engine, lines


# ------------------------------------------------------------------------------------------- scoring


def halves(qids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Two fixed halves: even and odd positions in the qrels order."""
    return list(qids[0::2]), list(qids[1::2])


def mean_ndcg(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]], qids: Sequence[str]) -> float:
    return statistics.fmean(ndcg_at_k(rankings.get(q, []), qrels[q], 10) for q in qids)


def precision_at_1(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]], qids: Sequence[str]) -> float:
    """The share of queries whose first document is judged relevant."""
    return statistics.fmean(float(bool(rankings.get(q)) and qrels[q].get(rankings[q][0], 0) > 0) for q in qids)


def paired_bootstrap(
    a: dict[str, list[str]], b: dict[str, list[str]], qrels: dict[str, dict[str, int]], qids: Sequence[str]
) -> tuple[float, float, float]:
    """Mean of (a - b) nDCG@10 over ``qids`` and its 95% interval from 2,000 paired resamples."""
    diffs = [ndcg_at_k(a.get(q, []), qrels[q], 10) - ndcg_at_k(b.get(q, []), qrels[q], 10) for q in qids]
    rng = random.Random(7)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return statistics.fmean(diffs), means[49], means[1949]


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    if args.documents:  # a smoke run on the first N documents (its figures are not comparable)
        kept = dict(list(dataset.corpus.items())[: args.documents])
        dataset = BeirDataset(dataset.name, kept, dataset.queries, dataset.qrels, dataset.corpus_sha256 + "-smoke")
    qids = list(dataset.queries)[: args.queries]
    ids = list(dataset.corpus)
    log(f"{dataset.name}: {len(ids)} documents, {len(qids)} queries; load {load_average()}")
    model = LocalEmbedder(EmbeddingConfig())
    doc_cache = CachingEmbedder(
        model, cache_file(args.cache / "embeddings", model, dataset.corpus_sha256, f"doc-head-{model.max_input_tokens}")
    )
    window = model.max_input_tokens
    doc_texts = [head_tokens(f"{t} {x}".strip(), window, model.count_tokens) for t, x in dataset.corpus.values()]
    await doc_cache.warm(doc_texts, progress=lambda stage, done, total: None)
    doc_cache.save()
    vectors = np.asarray(doc_cache.vectors_for(doc_texts), dtype=np.float32)

    async def embed(query: str) -> np.ndarray:
        return np.asarray((await model.embed([query], kind="query"))[0], dtype=np.float32)

    workdir = Path(tempfile.mkdtemp(prefix="ce-peers-"))
    engine: ContextEngine | None = None
    close_langchain_pg: Callable[[], Awaitable[None]] | None = None
    try:
        engine, _chunks, ingest_seconds = await build_engine(
            dataset, workdir, args.cache, model, args.concurrency, args.pool_size
        )
        log(f"context-engine ingest: {ingest_seconds:.1f} s")

        async def ours(query: str, q: Any) -> list[str]:
            assert engine is not None
            result = await engine.search(query, top_k=DEPTH, group_by="document", principals=TRUSTED)
            return [doc.document_name for doc in result.documents or []]

        mine = Timed("context-engine (defaults, plain text, group_by=document)", ours)
        mine.build_seconds = ingest_seconds
        breakdown = await engine_breakdown(engine)
        mine.disk_bytes = du(workdir / "pg")
        peers = lancedb_systems(dataset, ids, vectors, workdir)
        peers.append(chroma_system(ids, vectors, workdir))
        peers.append(bm25s_system(dataset, ids))
        peers.append(numpy_system(ids, vectors))
        if args.langchain_pg:
            rows, close_langchain_pg = await langchain_pg_systems(engine, dataset, ids, vectors, embed)
            peers += rows
        peers.append(await handwritten_system(engine, dataset, ids, vectors))
        systems = [mine, *peers]
        for _ in range(args.warmup):  # warm every system on the first query
            for system in systems:
                await system.run(qids[0], dataset.queries[qids[0]], embed)
        for system in systems:
            system.rankings.clear()
            system.latencies.clear()
        log(f"queries start; load {load_average()}")
        for n, qid in enumerate(qids):
            order = systems[n % len(systems) :] + systems[: n % len(systems)]
            for system in order:
                await system.run(qid, dataset.queries[qid], embed)
        log(f"queries done; load {load_average()}")
        texts_of = [dataset.queries[q] for q in qids]
        concurrent: list[str] = []
        if args.window_seconds > 0:
            log(f"concurrent windows start; load {load_average()}")
            args.pgdata = workdir / "pg" / "pgdata"
            concurrent = await concurrent_table(engine, peers[0], peers[1], embed, texts_of, args)
            concurrent.append(f"\nload after the windows {load_average()}")
        for system in systems:
            for close in system.closers:
                await close()
        bounds = await bm25_bounds.compare(engine, texts_of)
        bounds += ["", *await bm25_passes.compare(engine, texts_of)]
        stages: list[str] = []
        if args.stage_queries > 0:
            log(f"stage breakdown start; load {load_average()}")
            pgdata = workdir / "pg" / "pgdata"
            engine, stages = await stage_tables(engine, _chunks, embed, texts_of[: args.stage_queries], pgdata)
            stages.append(f"\nload after the breakdown {load_average()}")
    finally:
        if close_langchain_pg is not None:
            await close_langchain_pg()
        if engine is not None:
            await engine.aclose()
        embedded.remove(workdir / "pg")  # stops the embedded server before its files go
        shutil.rmtree(workdir, ignore_errors=True)

    bm25_run = next(s for s in systems if s.name.startswith("bm25s"))
    dense_run = next(s for s in systems if s.name.startswith("exact dense"))
    rrf = {q: rrf_documents([bm25_run.rankings[q], dense_run.rankings[q]], RRF_K)[:DEPTH] for q in qids}
    qrels = {q: dataset.qrels[q] for q in qids}
    first, second = halves(qids)
    print(f"\n{dataset.name}, {len(ids)} documents, {len(qids)} test queries; load at the end {load_average()}\n")
    print(
        "| system | nDCG@10 | half A | half B | P@1 | half A | half B | R@100 (documents) | p50 ms | p95 ms "
        "| build s | data on disk |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for system in systems:
        print(_row(system.name, system.rankings, qrels, qids, first, second, system))
    print(_row(f"plain RRF of bm25s + exact dense (k {RRF_K})", rrf, qrels, qids, first, second, None))
    print("\ncontext-engine's latency over LanceDB hybrid's, same queries interleaved:")
    for peer in peers[:2]:
        p50 = percentile(mine.latencies, 50) / percentile(peer.latencies, 50)
        p95 = percentile(mine.latencies, 95) / percentile(peer.latencies, 95)
        print(f"- against {peer.name}: p50 {p50:.2f}x, p95 {p95:.2f}x")
    print("\ncontext-engine minus plain RRF, nDCG@10 (paired bootstrap, 95%):")
    for label, part in (("all", qids), ("half A", first), ("half B", second)):
        mean, low, high = paired_bootstrap(mine.rankings, rrf, qrels, part)
        print(f"- {label}: {mean:+.4f} [{low:+.4f}, {high:+.4f}]")
    print("\ncontext-engine data directory after VACUUM (ANALYZE) and CHECKPOINT:")
    for name, size in breakdown:
        print(f"- {name}: {size / 2**20:.1f} MiB")
    print(f"- data directory on disk: {mine.disk_bytes / 2**20:.1f} MiB" if mine.disk_bytes else "")
    print("\n" + "\n".join(bounds))
    if concurrent:
        print("\n" + "\n".join(concurrent))
    if stages:
        print("\n" + "\n".join(stages))


def _row(
    name: str,
    rankings: dict[str, list[str]],
    qrels: dict[str, dict[str, int]],
    qids: list[str],
    first: list[str],
    second: list[str],
    system: Timed | None,
) -> str:
    ndcg = mean_ndcg(rankings, qrels, qids)
    recall = statistics.fmean(recall_at_k(rankings.get(q, []), qrels[q], 100) for q in qids)
    cells = [
        name,
        f"{ndcg:.3f}",
        f"{mean_ndcg(rankings, qrels, first):.3f}",
        f"{mean_ndcg(rankings, qrels, second):.3f}",
        *(f"{precision_at_1(rankings, qrels, part):.3f}" for part in (qids, first, second)),
        f"{recall:.3f}",
    ]
    if system is not None and system.latencies:
        cells += [f"{percentile(system.latencies, 50):.1f}", f"{percentile(system.latencies, 95):.1f}"]
    else:
        cells += ["", ""]
    cells.append(f"{system.build_seconds:.1f}" if system is not None and system.build_seconds is not None else "")
    cells.append(f"{system.disk_bytes / 2**20:.0f} MiB" if system is not None and system.disk_bytes else "")
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="a BEIR-format folder (e.g. scifact)")
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache", help="vector cache folder")
    parser.add_argument("--queries", type=int, default=10_000, help="use the first N test queries")
    parser.add_argument("--documents", type=int, default=0, help="smoke run: only the first N documents")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up calls per system before timing")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent ingest calls")
    parser.add_argument("--no-langchain-pg", dest="langchain_pg", action="store_false",
                        help="leave out the langchain-postgres rows")
    parser.add_argument("--pool-size", type=int, default=0, help="storage.pool_size (0: the default)")
    parser.add_argument("--workers", type=int, default=8, help="concurrent searchers in the QPS windows")
    parser.add_argument("--window-seconds", type=float, default=15.0, help="each QPS window; 0 skips them")
    parser.add_argument("--rounds", type=int, default=2, help="QPS windows per system, alternating")
    parser.add_argument("--stage-queries", type=int, default=100, help="searches in the stage breakdown; 0 skips it")
    asyncio.run(main(parser.parse_args()))
