"""Retrieval quality on a BEIR dataset: each leg, the fused ranking, and baselines, in one run.

Run from the repository root with the ``bench`` extra installed (``pip install -e ".[bench]"``)::

    python benchmarks/beir/run.py --data PATH/TO/scifact                        # the main table
    python benchmarks/beir/run.py --data PATH/TO/scifact --experiment lexical   # full-text options
    python benchmarks/beir/run.py --data PATH/TO/scifact --experiment lexical --text-search-config simple
    python benchmarks/beir/run.py --data PATH/TO/scifact --experiment fusion    # k, weights, candidates ...

Everything goes through the real engine: an embedded PostgreSQL under ``benchmarks/.cache/pg``
(one database per dataset and text-search configuration), the local all-MiniLM-L6-v2 model, and
``ContextEngine.ingest``/``search``. The baselines (bm25s, exact numpy dense search with the same
model, and plain RRF of the two) are computed in the same process on the same corpus and queries.

Corpus vectors are cached under ``benchmarks/.cache/embeddings`` by model, corpus hash and chunk
layout, and looked up by the SHA-256 of each text (see ``CachingEmbedder``): a hit is the vector the
same model computed for the same text in an earlier run, a miss is embedded now. Query vectors are
never cached, so every latency includes embedding the query. The first run embeds the corpus
(about 9,200 chunks and 5,183 whole documents for SciFact: tens of minutes on two cores); later
runs take a few minutes, most of it ingesting.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from context_engine import ContextEngine
from context_engine.config import ContextEngineConfig
from context_engine.embeddings.local import LocalEmbedder
from context_engine.evaluation import (
    BeirDataset,
    CachingEmbedder,
    RunResult,
    cache_file,
    dedupe_documents,
    document_markdown,
    format_table,
    head_tokens,
    ingest_dataset,
    leg_configurations,
    load_beir,
    ndcg_at_k,
    overridden,
    run_eval,
    run_queries,
    score_run,
)
from context_engine.ingest.pipeline import chunk_stream, prepare
from context_engine.principals import TRUSTED
from context_engine.retrieval import fusion, query_shape, registry
from context_engine.storage import embedded

HERE = Path(__file__).resolve().parent
CACHE = HERE.parent / ".cache"
RESULTS = HERE / "results"
Hits = dict[str, list[tuple[int, str, float, float | None]]]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def progress(stage: str, done: int, total: int) -> None:
    if done == total or done % 1000 == 0:
        log(f"  {stage}: {done}/{total}")


# ------------------------------------------------------------------------------------------ setup


def database_url(dataset: BeirDataset, text_search_config: str, *, fresh: bool) -> tuple[Path, str]:
    """A database of the benchmark's embedded server, one per dataset and text-search configuration.

    The configuration is locked per database at its first migration, which is why comparing
    ``english`` with ``simple`` takes two databases.
    """
    pgdata, base = embedded.acquire(CACHE / "pg")
    name = f"beir_{dataset.name}_{text_search_config}".lower().replace("-", "_")
    with psycopg.connect(base, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = base.partition("?")
    return pgdata, f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def engine_config(url: str, text_search_config: str, **search: Any) -> ContextEngineConfig:
    return ContextEngineConfig(
        database_url=url,
        storage={"auto_migrate": True},
        search={"text_search_config": text_search_config, "max_top_k": 1000, **search},
    )


def _chunk_texts(markdown: str, name: str, budget: int, model: LocalEmbedder) -> list[str]:
    """The chunk texts the engine will embed for one document (the ingest pipeline's own passes)."""
    streamed = chunk_stream(markdown.encode(), name, "text/markdown", budget, model.count_tokens, None)
    prepared = prepare(streamed, model.count_tokens, hold=1_000_000)
    return [chunk.text for chunk in prepared.chunks or []]


async def cached_embedders(
    dataset: BeirDataset, config: ContextEngineConfig
) -> tuple[CachingEmbedder, CachingEmbedder]:
    """The engine's embedder and the dense baseline's, both warmed from (and saved to) the cache.

    Warming embeds every missing text in large length-sorted batches before ingest, which is several
    times faster than the engine's per-document batches; the engine then finds each chunk's vector
    by its text. The chunk texts come from the ingest pipeline's own ``prepare``, with the engine's
    budget, so they are exactly the texts the engine will embed.
    """
    inner = LocalEmbedder(config.embedding)
    budget = min(config.ingest.chunk_tokens, inner.max_input_tokens)
    chunks = CachingEmbedder(inner, cache_file(CACHE / "embeddings", inner, dataset.corpus_sha256, f"heading-{budget}"))
    documents = CachingEmbedder(
        inner, cache_file(CACHE / "embeddings", inner, dataset.corpus_sha256, f"doc-head-{inner.max_input_tokens}")
    )
    texts: list[str] = []
    for doc_id, (title, body) in dataset.corpus.items():
        texts.extend(await asyncio.to_thread(_chunk_texts, document_markdown(title, body), doc_id, budget, inner))
    log(f"chunks: {len(texts)}; cached vectors: {len(chunks)}")
    started = time.perf_counter()
    embedded_now = await chunks.warm(texts, progress=progress)
    doc_texts = [
        head_tokens(f"{t} {x}".strip(), inner.max_input_tokens, inner.count_tokens) for t, x in dataset.corpus.values()
    ]
    embedded_now += await documents.warm(doc_texts, progress=progress)
    log(f"embedded {embedded_now} uncached texts in {time.perf_counter() - started:.0f} s")
    return chunks, documents


async def ensure_ingested(engine: ContextEngine, dataset: BeirDataset) -> None:
    """Ingest unless an earlier run of this script left the whole corpus in this database."""
    stats = await engine.stats(principals=TRUSTED, source_ids=["beir"])
    if stats.by_status.get("completed", 0) == len(dataset.corpus) and stats.documents == len(dataset.corpus):
        log(f"database already holds the {len(dataset.corpus)} documents; not re-ingesting (--fresh to redo)")
        return
    failed, seconds = await ingest_dataset(engine, dataset, source_id="beir", progress=progress)
    log(f"ingested in {seconds:.0f} s ({failed} failed)")


def save(name: str, payload: Any) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")


def row_line(result: RunResult) -> str:
    p50 = "" if result.p50_ms is None else f"{result.p50_ms:.1f}"
    p95 = "" if result.p95_ms is None else f"{result.p95_ms:.1f}"
    return f"| {result.name} | {result.ndcg10:.3f} | {result.recall100:.3f} | {result.mrr10:.3f} | {p50} | {p95} |"


TABLE_HEAD = "| configuration | nDCG@10 | R@100 | MRR@10 | p50 ms | p95 ms |\n|---|---:|---:|---:|---:|---:|"


# ------------------------------------------------------------------------------------ experiments


async def main_table(args: argparse.Namespace, dataset: BeirDataset) -> None:
    """Every leg alone, the fused default, and all baselines: the table in benchmarks/README.md."""
    pgdata, url = database_url(dataset, args.text_search_config, fresh=args.fresh)
    try:
        config = engine_config(url, args.text_search_config)
        chunks, documents = await cached_embedders(dataset, config)
        async with ContextEngine(config, embedder=chunks) as engine:
            await ensure_ingested(engine, dataset)
        configurations = leg_configurations(config)
        # rank fusion with the same legs and weights, at the k that measured best for it
        configurations["fused, RRF (k 10) instead of convex"] = {"fusion": {"method": "rrf", "k": 10}}
        # the full-text rank this work replaced, with every other default as configured
        configurations["fused, with ts_rank_cd as the full-text rank"] = {"search": {"lexical_rank": "ts_rank_cd"}}
        # a trusted caller filters nothing, so from storage.ann_unfiltered_min_rows it uses the HNSW
        # index; this row keeps it on the exact scan instead (ann_exact_threshold is above the corpus)
        configurations["fused, vector leg scanning exactly"] = {"storage": {"ann_unfiltered_min_rows": None}}
        report = await run_eval(
            args.data,
            config=config,
            configurations=configurations,
            source_id="beir",
            embedder=chunks,
            baselines=("bm25", "bm25-nostem", "dense", "bm25+dense"),
            baseline_embedder=documents,
            scope_searches=False,
            keep=True,
            ingest=False,
            progress=progress,
        )
        chunks.save()
        print(format_table(report))
        fused = report.row("fused (configured)")
        print("\nfused (configured) minus each baseline, nDCG@10 per query: mean and 95% paired bootstrap interval\n")
        for row in report.rows:
            if row.kind == "baseline" and not math.isnan(row.ndcg10):
                mean, low, high = paired_difference(fused, row, dataset)
                print(f"- {row.name}: {mean:+.4f} [{low:+.4f}, {high:+.4f}]")
        # the table's searches ask for 100 chunks; an application's default call asks for 10
        print(f"\nlatency of the default call, search(top_k=10), same queries\n\n{TABLE_HEAD}")
        async with ContextEngine(config, embedder=chunks) as engine:
            for name, overrides in (
                ("fused (configured), top_k=10", {}),
                ("fused, vector leg scanning exactly, top_k=10", {"storage": {"ann_unfiltered_min_rows": None}}),
            ):
                with overridden(engine, overrides):
                    result, _ = await run_queries(engine, dataset, name, source_id=None, top_k=10)
                print(row_line(result))
        print("\n(nDCG@10, R@100 and MRR@10 of these rows cover only the documents of 10 chunks, often fewer than 10)")
        save(
            f"main-{dataset.name}-{args.text_search_config}",
            {
                "settings": report.settings,
                "rows": [{k: v for k, v in vars(r).items() if k != "rankings"} for r in report.rows],
            },
        )
    finally:
        embedded.release(pgdata)


def paired_difference(
    a: RunResult, b: RunResult, dataset: BeirDataset, *, rounds: int = 2000, seed: int = 7
) -> tuple[float, float, float]:
    """Mean per-query nDCG@10 difference a - b with a 95% bootstrap interval over the queries.

    On 300 queries a gap of a few thousandths can be noise; the interval says whether it is.
    """
    ids = list(dataset.qrels)
    diffs = np.array(
        [
            ndcg_at_k(a.rankings.get(q, []), dataset.qrels[q]) - ndcg_at_k(b.rankings.get(q, []), dataset.qrels[q])
            for q in ids
        ]
    )
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), size=(rounds, len(diffs)))].mean(axis=1)
    return float(diffs.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def lexical_grid() -> dict[str, dict[str, Any]]:
    """The full-text options measured with the leg alone (the other legs weighted 0 do not run)."""
    grid: dict[str, dict[str, Any]] = {}
    for match in ("any", "all"):
        grid[f"{match} · bm25 k1=1.2 b=0.75"] = {"lexical_match": match, "lexical_rank": "bm25"}
        for rank in ("ts_rank", "ts_rank_cd"):
            for norm in (0, 1, 2, 8, 32):
                grid[f"{match} · {rank} norm={norm}"] = {
                    "lexical_match": match,
                    "lexical_rank": rank,
                    "lexical_normalization": norm,
                }
    for k1, b in itertools.product((0.9, 1.2, 1.5, 2.0), (0.4, 0.75, 1.0)):
        grid.setdefault(
            f"any · bm25 k1={k1} b={b}",
            {
                "lexical_match": "any",
                "lexical_rank": "bm25",
                "bm25": {"k1": k1, "b": b},
            },
        )
    grid["any · bm25 k1=1.2 b=0.75 · stop words kept"] = {
        "lexical_match": "any",
        "lexical_rank": "bm25",
        "lexical_stopwords": None,
    }
    return grid


async def lexical(args: argparse.Namespace, dataset: BeirDataset) -> None:
    pgdata, url = database_url(dataset, args.text_search_config, fresh=args.fresh)
    try:
        config = engine_config(url, args.text_search_config)
        chunks, _ = await cached_embedders(dataset, config)
        fts_only = {"weights": {"fts": 1.0, "trigram": 0.0, "vector": 0.0}}
        rows: list[RunResult] = []
        async with ContextEngine(config, embedder=chunks) as engine:
            await ensure_ingested(engine, dataset)
            print(f"full-text leg alone, text search configuration {args.text_search_config}\n\n{TABLE_HEAD}")
            for name, search in lexical_grid().items():
                with overridden(engine, {"search": search, "fusion": fts_only}):
                    result, _ = await run_queries(engine, dataset, name, source_id=None)
                rows.append(result)
                print(row_line(result), flush=True)
        save(
            f"lexical-{dataset.name}-{args.text_search_config}",
            [{k: v for k, v in vars(r).items() if k != "rankings"} for r in rows],
        )
    finally:
        embedded.release(pgdata)


async def leg_hits(engine: ContextEngine, dataset: BeirDataset, leg: str, depth: int) -> Hits:
    """One leg alone at ``depth``: its ranked chunks per query, for replaying fusion offline.

    Searched with convex fusion, so a hit's score is the leg's own score min-max normalised over
    the ``depth`` candidates: an affine image of the raw score, which is all either fusion needs
    (convex renormalises over the candidates it keeps; RRF uses the order).
    """
    weights = {"fts": 0.0, "trigram": 0.0, "vector": 0.0, leg: 1.0}
    out: Hits = {}
    with overridden(engine, {"fusion": {"weights": weights, "method": "convex"}}):
        for qid, query in dataset.queries.items():
            result = await engine.search(query, principals=TRUSTED, top_k=depth)
            out[qid] = [(h.chunk_id, h.document_name, h.score, h.similarity) for h in result.hits]
    return out


async def cached_legs(
    engine: ContextEngine, dataset: BeirDataset, config: ContextEngineConfig, args: argparse.Namespace
) -> dict[str, Hits]:
    """Each leg alone at depth 200, kept in results/ so fusion can be re-replayed without re-searching.

    The file is keyed by the settings that shape the legs (the trigram leg alone takes most of the
    time: long queries under its loosest threshold), and ignored with ``--fresh``.
    """
    search = config.search
    key = f"{search.lexical_rank}-{search.lexical_match}-{search.bm25.k1}-{search.bm25.b}-{search.trgm_limit}-scores"
    path = RESULTS / f"legs-{dataset.name}-{args.text_search_config}-{key}.json"
    if path.is_file() and not args.fresh:
        log(f"replaying the legs saved in {path.name}")
        loaded = json.loads(path.read_text(encoding="utf-8"))
        return {leg: {q: [tuple(h) for h in hits] for q, hits in per.items()} for leg, per in loaded.items()}
    legs = {}
    for leg in ("fts", "trigram", "vector"):
        started = time.perf_counter()
        legs[leg] = await leg_hits(engine, dataset, leg, 200)
        log(f"  {leg} leg alone at depth 200: {time.perf_counter() - started:.0f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(legs), encoding="utf-8")
    return legs  # type: ignore[return-value]


def replay(
    dataset: BeirDataset,
    legs: Mapping[str, Hits],
    *,
    method: str,
    k: int,
    weights: Mapping[str, float],
    candidates: int,
    trgm_max_words: int | None,
    floor: bool,
    name: str,
    top_k: int = 100,
) -> RunResult:
    """Fusion replayed from the legs' own rankings, with the engine's rules and its ``fusion.fuse``.

    As in ``ContextEngine.search``: each leg hands ``max(candidates, top_k)`` candidates, the trigram
    leg is skipped for queries longer than the cut-off, the adaptive floor drops vector candidates
    below the query-shaped cosine, and ties break on the smaller chunk id. Documents are then
    ranked by their best chunk among the fused ``top_k``, as ``run_queries`` does.
    """
    rankings_by_query: dict[str, list[str]] = {}
    limit = max(candidates, top_k)
    for qid, query in dataset.queries.items():
        doc_of: dict[int, str] = {}
        scored: dict[str, list[tuple[int, float]]] = {}
        for leg, hits in legs.items():
            if weights.get(leg, 0) <= 0:
                continue
            if leg == "trigram" and trgm_max_words is not None and query_shape.length_units(query) > trgm_max_words:
                continue
            found = hits[qid][:limit]
            if leg == "vector" and floor:
                cut = query_shape.vector_floor(query)
                found = [h for h in found if h[3] is not None and h[3] >= cut]
            scored[leg] = [(h[0], h[2]) for h in found]
            doc_of.update((h[0], h[1]) for h in found)
        fused = fusion.fuse(method, scored, weights, k)[:top_k]
        rankings_by_query[qid] = dedupe_documents((doc_of[cid], score) for cid, score in fused)
    return score_run(name, rankings_by_query, dataset.qrels)


async def fusion_experiment(args: argparse.Namespace, dataset: BeirDataset) -> None:
    """Replay fusion over each leg's own ranking for a grid of settings, then confirm the best live."""
    pgdata, url = database_url(dataset, args.text_search_config, fresh=args.fresh)
    try:
        config = engine_config(url, args.text_search_config)
        chunks, _ = await cached_embedders(dataset, config)
        async with ContextEngine(config, embedder=chunks) as engine:
            await ensure_ingested(engine, dataset)
            legs = await cached_legs(engine, dataset, config, args)
            base = {
                "method": config.fusion.method,
                "k": config.fusion.k,
                "weights": registry.weights(config.fusion.weights),
                "candidates": config.search.candidates,
                "trgm_max_words": config.search.trgm_max_query_words,
                "floor": config.search.vector_floor == "adaptive",
            }
            log(f"defaults replayed: {base}")
            tables: dict[str, list[RunResult]] = {}

            def run(title: str, variants: Sequence[tuple[str, dict[str, Any]]]) -> None:
                print(f"\n{title}\n\n{TABLE_HEAD}")
                results = []
                for name, change in variants:
                    settings = {**base, **change}
                    result = replay(dataset, legs, name=name, **settings)
                    results.append(result)
                    print(row_line(result), flush=True)
                tables[title] = results

            run(
                "each leg alone (replayed)",
                [
                    (f"{leg} alone", {"weights": {"fts": 0.0, "trigram": 0.0, "vector": 0.0, leg: 1.0}})
                    for leg in ("fts", "trigram", "vector")
                ],
            )
            w = base["weights"]
            run(
                "fusion method (weights as configured)",
                [("convex", {"method": "convex"})] + [(f"rrf k={k}", {"method": "rrf", "k": k}) for k in (10, 20, 60)],
            )
            run(
                "convex: full-text weight (vector 1.0)",
                [
                    (f"convex fts={x}", {"method": "convex", "weights": {**w, "fts": x}})
                    for x in (0.6, 0.8, 1.0, 1.1, 1.25, 1.4, 1.6, 2.0)
                ],
            )
            run("RRF k", [(f"rrf k={k}", {"method": "rrf", "k": k}) for k in (5, 10, 20, 40, 60, 100)])
            run(
                "RRF: full-text weight (vector 1.0)",
                [
                    (f"rrf fts={x}", {"method": "rrf", "weights": {**w, "fts": x}})
                    for x in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
                ],
            )
            run(
                "trigram weight",
                [(f"trigram={x}", {"weights": {**w, "trigram": x}}) for x in (0.0, 0.1, 0.2, 0.4, 0.8)],
            )
            run(
                "trigram cut-off (words), trigram weight 0.2",
                [
                    (f"trgm_max_query_words={x}", {"trgm_max_words": x, "weights": {**w, "trigram": 0.2}})
                    for x in (None, 2, 3, 5, 8, 12)
                ],
            )
            # fusion keeps max(candidates, top_k) per leg: at top_k=10, as an application asks
            run(
                "candidates per leg (top_k=10)",
                [(f"candidates={x}", {"candidates": x, "top_k": 10}) for x in (10, 20, 30, 50, 100, 200)],
            )
            run("vector floor", [("vector_floor=None", {"floor": False}), ("vector_floor=adaptive", {"floor": True})])
            # a joint search over the settings that interact most, around the one-at-a-time best
            joint = [
                (
                    f"convex fts={f} trigram={t} candidates={c}",
                    {"method": "convex", "weights": {**w, "fts": f, "trigram": t}, "candidates": c},
                )
                for f, t, c in itertools.product((1.0, 1.1, 1.25, 1.4, 1.6), (0.0, 0.1, 0.2, 0.4), (30, 50, 100))
            ] + [
                (
                    f"rrf k={k} fts={f} trigram={t} candidates={c}",
                    {"method": "rrf", "k": k, "weights": {**w, "fts": f, "trigram": t}, "candidates": c},
                )
                for k, f, t, c in itertools.product((10, 20, 40, 60), (1.0, 1.25, 1.5), (0.0, 0.2, 0.4), (30, 50, 100))
            ]
            results = [replay(dataset, legs, name=n, **{**base, **c}) for n, c in joint]
            results.sort(key=lambda r: -r.ndcg10)
            print(f"\njoint grid ({len(results)} settings), best ten by nDCG@10\n\n{TABLE_HEAD}")
            for result in results[:10]:
                print(row_line(result))
            tables["joint"] = results
        save(
            f"fusion-{dataset.name}-{args.text_search_config}",
            {
                title: [{k: v for k, v in vars(r).items() if k != "rankings"} for r in rs]
                for title, rs in tables.items()
            },
        )
    finally:
        embedded.release(pgdata)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="a BEIR-format folder (e.g. scifact)")
    parser.add_argument("--experiment", choices=["main", "lexical", "fusion"], default="main")
    parser.add_argument("--text-search-config", choices=["english", "simple"], default="english")
    parser.add_argument("--fresh", action="store_true", help="drop and re-create the benchmark database first")
    args = parser.parse_args()
    dataset = load_beir(args.data)
    log(f"{dataset.name}: {len(dataset.corpus)} documents, {len(dataset.queries)} test queries")
    runner = {"main": main_table, "lexical": lexical, "fusion": fusion_experiment}[args.experiment]
    started = time.perf_counter()
    asyncio.run(runner(args, dataset))
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
