"""The scale benchmark: bulk ingest, search latency and ACL recall at up to a million chunks.

Run from the repository root::

    python benchmarks/scale/run.py --data PATH/TO/scifact/corpus.jsonl.gz            # 1,000,000 rows
    python benchmarks/scale/run.py --data ... --rows 100000 --keep DIR                 # keep the database
    python benchmarks/scale/run.py --data ... --rows 100000 --reuse DIR                # search phases only
    python benchmarks/scale/run.py --data ... --rows 200000 --database-url URL         # a server of yours

It starts its own embedded PostgreSQL in a temporary directory (or ``--keep``/``--reuse`` DIR), or
runs against an empty database at ``--database-url`` (migrated here unless it is already; a Citus
coordinator's is distributed, as ``migrate --citus`` does; ``--search-only`` for one loaded before),
and runs these phases, printing a Markdown table ready for ``benchmarks/README.md``:

1. bulk ingest (``engine.bulk_ingest``) of documents of ten chunks, each chunk's text drawn from
   the vocabulary of ``--data`` and its vector given by the generator (``scale_corpus.py``) through a
   stand-in embedder, so the rate excludes embedding; the HNSW index is built once after the load;
2. the ordinary ingest (``engine.ingest``) of a sample, for comparison, with the same stand-in;
3. fused search latency (``engine.search``, query embedded by the local model) for a trusted
   caller, a caller holding 1% and one holding 30% of the rows, at ``top_k`` 10 and 100, and the
   full-text leg alone;
4. the ACL recall grid: slices of 0.1% to 100% in three layouts, each query through the vector leg
   with the exact scan (the ground truth: every eligible row scored), the iterative index scan
   and the planner's choice.

``benchmarks/citus/scale.py`` runs the same phases on a Citus cluster and a single node at once
(latency and recall interleaved), through :func:`latency_phase` and :func:`recall_phase`, which take
several engines.

Peak RSS of this process (the engine's) is sampled during the load and during the searches; it
includes the generator's per-row layout (a few MB per million rows), not the vectors, which are
made a batch at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_corpus as sc

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.factory import build_embedder
from context_engine.ingest.bulk import index_definitions
from context_engine.retrieval import planner, registry
from context_engine.retrieval.legs.vector import plan_for, vector_leg
from context_engine.retrieval.planner import VectorPlan
from context_engine.storage import embedded
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope

HERE = Path(__file__).resolve().parent
SOURCE = "scale"
#: the vector index, over halfvec (0026, the default) or float4 (migration 0006, ``--float4``)
HNSW = ("ix_ce_chunks_embedding", "ix_ce_chunks_embedding_half")
DIM = 384


class GivenVectorsEmbedder(Embedder):
    """Document vectors are given (registered by text as the generator makes each chunk), query
    vectors come from the local model: the load pays no forward pass, a search pays the real one.

    It reports the local model's provider, model and width, so the stored embedding key is the one
    a search with the local model matches.
    """

    def __init__(self, local: Embedder):
        self.local = local
        self.provider, self.model, self.dim = local.provider, local.model, local.dim
        self.max_input_tokens = local.max_input_tokens
        self.given: dict[bytes, np.ndarray] = {}
        self.seconds = 0.0

    @property
    def key(self) -> str:
        return self.local.key

    @staticmethod
    def digest(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    def give(self, text: str, vector: np.ndarray) -> None:
        self.given[self.digest(text)] = vector

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        if kind == "query":
            return await self.local.embed(texts, kind=kind)
        t0 = time.perf_counter()
        try:
            return [self.given.pop(self.digest(t)).tolist() for t in texts]
        except KeyError as exc:
            raise RuntimeError("a chunk was not given a vector: the chunker split or merged a passage") from exc
        finally:
            self.seconds += time.perf_counter() - t0

    async def aclose(self) -> None:
        await self.local.aclose()


class PeakRss:
    """The peak resident memory of this process while a phase runs (sampled every 0.2 s)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, me.memory_info().rss)
            self._stop.wait(0.2)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, psutil.Process().memory_info().rss)


def documents(
    layout: sc.Layout,
    vocab: sc.Vocabulary,
    embedder: GivenVectorsEmbedder,
    centres: np.ndarray,
    *,
    start: int,
    stop: int,
    source_id: str,
    prefix: str,
    acl: list[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Documents of ten rows each for rows ``start:stop``: each chunk a passage under its own
    heading (so the chunker keeps it whole), its vector registered with the stand-in embedder."""
    per = sc.CHUNKS_PER_DOCUMENT
    block = 2_000 * per
    for lo in range(start, stop, block):
        hi = min(stop, lo + block)
        rng = np.random.default_rng([layout.seed, 4, lo])
        passages = sc.texts(vocab, hi - lo, rng)
        headings = sc.texts(vocab, hi - lo, rng, low=2, high=4)
        vecs = sc.vectors(layout, lo, hi, centres)
        for d in range(lo, hi, per):
            parts = []
            for r in range(d, d + per):
                embedder.give(passages[r - lo], vecs[r - lo])
                # numbered, so two equal headings never make one section (the chunker packs a section)
                parts.append(f"## {r - d + 1}. {headings[r - lo]}\n\n{passages[r - lo]}")
            yield {
                "text": "\n\n".join(parts),
                "name": f"{prefix}-{d // per:07d}",
                "source_id": source_id,
                "acl": acl if acl is not None else [sc.group_name(int(layout.group[d]))],
            }


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------- phases
async def bulk_phase(engine: ContextEngine, layout: sc.Layout, vocab: sc.Vocabulary, args: argparse.Namespace) -> dict:
    embedder = engine.embedder
    assert isinstance(embedder, GivenVectorsEmbedder)
    centres = layout.centres(DIM)
    await engine.stats(principals=TRUSTED)  # start and migrate outside the timing
    docs = documents(layout, vocab, embedder, centres, start=0, stop=layout.rows, source_id=SOURCE, prefix="d")
    load_before = load_average()
    with PeakRss() as rss:
        t0 = time.perf_counter()
        report = await engine.bulk_ingest(
            docs,
            batch_chunks=args.batch_chunks,
            maintenance_work_mem=args.maintenance_work_mem,
            parallel_workers=args.parallel_workers,
        )
        wall = time.perf_counter() - t0
    loading = report.seconds - sum(report.index_seconds.values())
    return {
        "rows": layout.rows,
        "documents": report.documents,
        "chunks": report.chunks,
        "handed_over": len(report.ordinary),
        "wall_s": round(wall, 1),
        "load_s": round(loading, 1),
        "embed_s": round(report.embed_seconds, 1),
        "bulk_chunks_per_s": round(report.chunks / max(1e-9, loading - report.embed_seconds)),
        "hnsw_build_s": round(sum(v for k, v in report.index_seconds.items() if k in HNSW), 1),
        "gin_build_s": round(sum(v for k, v in report.index_seconds.items() if k not in HNSW), 1),
        "peak_rss_load_mb": round(rss.peak / 2**20),
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


async def ordinary_phase(engine: ContextEngine, layout: sc.Layout, vocab: sc.Vocabulary, count: int) -> dict:
    """``count`` documents of ten chunks through ``engine.ingest`` one after another (index present)."""
    embedder = engine.embedder
    assert isinstance(embedder, GivenVectorsEmbedder)
    centres = layout.centres(DIM)
    rows = count * sc.CHUNKS_PER_DOCUMENT
    docs = list(
        documents(layout, vocab, embedder, centres, start=0, stop=rows, source_id="ordinary", prefix="o", acl=["ord"])
    )
    before = embedder.seconds
    t0 = time.perf_counter()
    chunks = 0
    for doc in docs:
        report = await engine.ingest(text=doc["text"], name=doc["name"], source_id="ordinary", acl=["ord"])
        chunks += report.totals["chunks"]
    wall = time.perf_counter() - t0
    embed = embedder.seconds - before
    return {
        "ordinary_documents": count,
        "ordinary_chunks": chunks,
        "ordinary_chunks_per_s": round(chunks / max(1e-9, wall - embed), 1),
        "load_average": load_average(),
    }


def query_texts(vocab: sc.Vocabulary, count: int) -> list[str]:
    """Short queries of 2 to 5 words from the middle of the frequency ranking (fixed seed)."""
    rng = np.random.default_rng(11)
    middle = vocab.words[50:5000]
    return [" ".join(rng.choice(middle, int(rng.integers(2, 6)), replace=False)) for _ in range(count)]


async def latency_phase(
    engines: dict[str, ContextEngine],
    vocab: sc.Vocabulary,
    layout: sc.Layout,
    count: int,
    alone: Sequence[str] = ("fts",),
) -> dict[str, dict]:
    """Fused search latency per caller, for each of ``engines`` (holding the same data), keyed by name,
    then each leg of ``alone`` by itself (``search`` with every other leg weighted 0), keyed
    ``"<leg> <caller>"``.

    With several engines the queries are interleaved: each query is asked of every engine in turn
    (the order alternating from query to query), so a change of the machine's load falls on all."""
    rng = np.random.default_rng(5)
    callers: dict[str, Any] = {
        "trusted": TRUSTED,
        "1%": sc.caller("random", 1, rng),
        "30%": sc.caller("random", 30, rng),
    }
    texts = query_texts(vocab, count)
    # warm, as a server that has been answering for a while is: the chunks read once (a sequential
    # scan puts the heap in the OS cache), then other queries once per caller, so the first caller
    # timed does not pay for reading the indexes from disk after the load (the model loads here too)
    for engine in engines.values():
        db = await engine.database()
        async with db.connect() as conn:
            await conn.execute(text("SELECT sum(tsv_tokens) FROM ce_chunks"))
        for principals in callers.values():
            for q in query_texts(vocab, count + 20)[count:]:
                await engine.search(q, top_k=10, principals=principals)
    out: dict[str, dict[str, Any]] = {name: {"load_average_before": load_average()} for name in engines}

    async def timed(key: str, principals: Any, k: int) -> None:
        times: dict[str, list[float]] = {name: [] for name in engines}
        for i, q in enumerate(texts):
            for name in interleaved(list(engines), i):
                t0 = time.perf_counter()
                await engines[name].search(q, top_k=k, principals=principals)
                times[name].append((time.perf_counter() - t0) * 1000)
        for name, values in times.items():
            out[name][key] = {"p50_ms": round(pct(values, 50), 1), "p95_ms": round(pct(values, 95), 1)}

    with PeakRss() as rss:
        for label, principals in callers.items():
            for k in (10, 100):
                await timed(f"{label} top_k={k}", principals, k)
        # each lexical leg alone: every other leg weighted 0 (so no query embedding either)
        fused = {name: engine.config for name, engine in engines.items()}
        for single in alone:
            for name, engine in engines.items():
                weights = {leg: 0.0 for leg in registry.names()} | {single: 1.0}
                engine.config = fused[name].model_copy(
                    update={"fusion": fused[name].fusion.model_copy(update={"weights": weights})}
                )
            try:
                for label, principals in callers.items():
                    await timed(f"{single} {label}", principals, 10)
            finally:
                for name, engine in engines.items():
                    engine.config = fused[name]
    for name in engines:
        out[name]["peak_rss_search_mb"] = round(rss.peak / 2**20)
        out[name]["load_average_after"] = load_average()
    return out


def interleaved(names: list[str], i: int) -> list[str]:
    """The order in which query ``i`` is asked of the engines: reversed on every other query."""
    return names if i % 2 == 0 else names[::-1]


async def recall_phase(
    engines: dict[str, ContextEngine], layout: sc.Layout, count: int, cell_seconds: float
) -> dict[str, list[dict[str, Any]]]:
    """The cells: recall@10 of the iterative scan and of the planner against the exact scan, for each
    of ``engines`` (holding the same data; each query asked of every engine in turn), keyed by name.

    100% is the same slice in every layout, asked as a caller who may see every row: once scoped to
    the benchmark's source, once naming no source (the index searched unfiltered). A
    cell stops after ``cell_seconds`` once it has three queries (exact scans of large slices of a
    million rows take seconds each); its row says how many queries it ran."""
    dbs = {name: await engine.database() for name, engine in engines.items()}
    centres = layout.centres(DIM)
    relaxed = planner.index_settings(40, "relaxed_order")
    iterative = VectorPlan(planner.ANN, None, settings=relaxed, allow_fallback=False)
    exact = VectorPlan(planner.EXACT, None, allow_fallback=False)
    cells: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    k = 10
    for percent in sc.PERCENTS:
        for layout_name in sc.LAYOUTS if percent < 100 else ("every row", "every row, no source scope"):
            which = sc.LAYOUTS.index(layout_name) if layout_name in sc.LAYOUTS else 0
            rng = np.random.default_rng([17, int(percent * 10), which])
            qs = sc.queries(layout, count, centres, seed=int(percent * 10) * 3 + which)
            cell = {name: RecallCell() for name in engines}
            started = time.perf_counter()
            for i in range(count):
                if i >= 3 and time.perf_counter() - started > cell_seconds:
                    break
                principals = sc.caller(layout_name, percent, rng) if percent < 100 else None
                # a caller who names no source filters nothing at all: the index is searched unfiltered
                unscoped = layout_name == "every row, no source scope"
                scope = ReadScope(principals) if unscoped else ReadScope(principals, source_ids=(SOURCE,))
                vector = qs[i].tolist()
                for name in interleaved(list(engines), i):
                    db, config, c = dbs[name], engines[name].config, cell[name]
                    t0 = time.perf_counter()
                    truth = {cid for cid, _ in await vector_leg(db, vector, scope, limit=k, plan=exact)}
                    c.times["exact"].append((time.perf_counter() - t0) * 1000)
                    for leg in ("iterative", "planner") if i % 2 == 0 else ("planner", "iterative"):
                        t0 = time.perf_counter()
                        plan = iterative if leg == "iterative" else await plan_for(db, scope, config)
                        found = await vector_leg(
                            db, vector, scope, limit=k, plan=plan, halfvec=config.storage.hnsw_halfvec
                        )
                        c.times[leg].append((time.perf_counter() - t0) * 1000)
                        ids = {cid for cid, _ in found}
                        c.recall[leg].append(len(ids & truth) / max(1, len(truth)))
                        c.short[leg] += len(found) < min(k, len(truth)) or len(found) < k
                        c.empty[leg] += not found
                        if leg == "planner":
                            c.chosen.append(plan.plan + ("+fallback" if plan.fallback else ""))
            for name in engines:
                cells[name].append(cell[name].row(f"{percent:g}%", layout_name))
                print(json.dumps({"engine": name} | cells[name][-1]), flush=True)
    return cells


class RecallCell:
    """What one cell of the recall grid collects for one engine."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {"exact": [], "iterative": [], "planner": []}
        self.recall: dict[str, list[float]] = {"iterative": [], "planner": []}
        self.short = {"iterative": 0, "planner": 0}
        self.empty = {"iterative": 0, "planner": 0}
        self.chosen: list[str] = []

    def row(self, slice_label: str, layout_name: str) -> dict[str, Any]:
        return {
            "slice": slice_label,
            "layout": layout_name,
            "queries": len(self.times["exact"]),
            "recall_iterative": round(statistics.fmean(self.recall["iterative"]), 3),
            "recall_planner": round(statistics.fmean(self.recall["planner"]), 3),
            "short_planner": self.short["planner"],
            "empty_planner": self.empty["planner"],
            "short_iterative": self.short["iterative"],
            "exact_p50_ms": round(pct(self.times["exact"], 50), 1),
            "iterative_p50_ms": round(pct(self.times["iterative"], 50), 1),
            "planner_p50_ms": round(pct(self.times["planner"], 50), 1),
            "planner_plans": ", ".join(f"{p} {self.chosen.count(p)}" for p in sorted(set(self.chosen))),
        }


def index_size(url: str) -> dict[str, Any]:
    """The HNSW index, ``ce_chunks`` and the database on disk; on a Citus coordinator, summed over
    every node's shards (the coordinator's own tables are empty shells there)."""
    with psycopg.connect(url) as conn:
        citus = conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'citus'").fetchone()
        if citus and citus[0]:
            sizes = (
                "(SELECT sum(CAST(result AS bigint)) FROM run_command_on_workers($$SELECT coalesce(sum("
                "pg_relation_size(oid)), 0) FROM pg_class WHERE relname LIKE 'ix_ce_chunks_embedding_%'$$))",
                "citus_total_relation_size('ce_chunks')",
                "citus_total_relation_size('ce_bm25_postings')",
                "(SELECT sum(CAST(result AS bigint)) FROM run_command_on_all_nodes("
                "$$SELECT pg_database_size(current_database())$$))",
            )
            buffers = "(SELECT string_agg(DISTINCT result, ', ') || ' per worker' FROM run_command_on_workers("
            buffers += "$$SHOW shared_buffers$$))"
        else:
            sizes = (
                "pg_relation_size(coalesce(to_regclass('ix_ce_chunks_embedding_half'), "
                "to_regclass('ix_ce_chunks_embedding')))",
                "pg_total_relation_size('ce_chunks')",
                "pg_total_relation_size('ce_bm25_postings')",
                "pg_database_size(current_database())",
            )
            buffers = "current_setting('shared_buffers')"
        row = conn.execute(
            f"SELECT pg_size_pretty(CAST({sizes[0]} AS bigint)), pg_size_pretty(CAST({sizes[1]} AS bigint)), "
            f"pg_size_pretty(CAST({sizes[2]} AS bigint)), pg_size_pretty(CAST({sizes[3]} AS bigint)), "
            f"{buffers}, (SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
            "current_setting('server_version')"
        ).fetchone()
    assert row is not None
    keys = ("hnsw_index_size", "ce_chunks_total_size", "postings_total_size", "database_size")
    keys += ("shared_buffers", "pgvector", "postgres")
    return dict(zip(keys, row, strict=True))


def build_halfvec(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build migration 0026's index over a kept database as a load builds it (not concurrently, with
    ``--maintenance-work-mem`` and the load's parallel workers), so its time compares with the float4
    build after a load; the engine's migration then finds it valid and drops the float4 one."""
    name = "ix_ce_chunks_embedding_half"
    workers = args.parallel_workers if args.parallel_workers is not None else max(1, (os.cpu_count() or 2) - 1)
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone() == (True,):
            return {}
        load_before = load_average()
        with conn.transaction():
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (args.maintenance_work_mem,))
            conn.execute("SELECT set_config('max_parallel_maintenance_workers', %s, true)", (str(workers),))
            t0 = time.perf_counter()
            conn.execute(index_definitions(DIM)[name].encode())
            seconds = time.perf_counter() - t0
    after = load_average()
    return {"halfvec_build_s": round(seconds, 1), "load_average_before": load_before, "load_average_after": after}


# ---------------------------------------------------------------------------------------- report
def markdown(results: dict[str, Any]) -> str:
    b, s = results.get("bulk", {}), results.get("sizes", {})
    lines = [
        f"Scale benchmark, {results['rows']:,} chunks ({results['machine']}); load average at the start "
        f"{results['load_average_start']}, at the end {results['load_average_end']}.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| HNSW index | {'halfvec' if results.get('halfvec') else 'float4'} |",
    ]
    if b:
        lines += [
            f"| bulk ingest, chunks/s (embedding excluded) | {b['bulk_chunks_per_s']:,} "
            f"({b['chunks']:,} chunks in {b['load_s']} s, of which {b['embed_s']} s stand-in embedding) |",
            f"| the same with the GIN builds after the load (full-text; trigram only when that leg is on) | "
            f"{round(b['chunks'] / max(1e-9, b['load_s'] - b['embed_s'] + b['gin_build_s'])):,} "
            f"(GIN builds {b['gin_build_s']} s) |",
            f"| HNSW build after the load | {b['hnsw_build_s']} s |",
            f"| peak RSS of the engine process, load | {b['peak_rss_load_mb']} MB |",
        ]
    if "ordinary" in results:
        o = results["ordinary"]
        lines.append(
            f"| ordinary ingest (`engine.ingest`, one at a time), chunks/s | {o['ordinary_chunks_per_s']} "
            f"({o['ordinary_documents']} documents of 10 chunks) |"
        )
    if "halfvec_build" in results:
        lines.append(f"| halfvec HNSW build on the kept database | {results['halfvec_build']['halfvec_build_s']} s |")
    lines += [f"| {key.replace('_', ' ')} | {value} |" for key, value in s.items()]
    if "latency" in results:
        lat = results["latency"]
        lines.append(f"| peak RSS of the engine process, search | {lat['peak_rss_search_mb']} MB |")
        lines += [
            "",
            "| caller | fused top_k=10 p50 / p95 ms | fused top_k=100 p50 / p95 ms | full-text leg alone p50 ms |",
        ]
        lines.append("|---|---|---|---|")
        for label in ("trusted", "1%", "30%"):
            a, c, f = lat[f"{label} top_k=10"], lat[f"{label} top_k=100"], lat[f"fts {label}"]
            lines.append(f"| {label} | {a['p50_ms']} / {a['p95_ms']} | {c['p50_ms']} / {c['p95_ms']} | {f['p50_ms']} |")
        others = [key for key in lat if key.startswith("document_fts ")]
        if others:
            lines += ["", "| leg alone, caller | p50 / p95 ms |", "|---|---|"]
            lines += [f"| {key} | {lat[key]['p50_ms']} / {lat[key]['p95_ms']} |" for key in others]
    if "recall" in results:
        lines += [
            "",
            "| slice | layout | queries | recall@10 iterative | recall@10 planner | planner short / empty | "
            "p50 ms exact | p50 ms iterative | p50 ms planner | planner's plans |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in results["recall"]:
            lines.append(
                f"| {c['slice']} | {c['layout']} | {c['queries']} | {c['recall_iterative']} | {c['recall_planner']} | "
                f"{c['short_planner']} / {c['empty_planner']} | {c['exact_p50_ms']} | {c['iterative_p50_ms']} | "
                f"{c['planner_p50_ms']} | {c['planner_plans']} |"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- main
def header(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "rows": args.rows,
        "machine": f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GB",
        "load_average_start": load_average(),
        "halfvec": args.halfvec,
    }


def engine_for(url: str, halfvec: bool = False) -> ContextEngine:
    """An engine on ``url`` whose documents take the generator's vectors (migrating it if needed)."""
    config = ContextEngineConfig(database_url=url, storage={"auto_migrate": True, "hnsw_halfvec": halfvec})
    return ContextEngine(config, embedder=GivenVectorsEmbedder(build_embedder(config.embedding)))


async def measure(args: argparse.Namespace, url: str, fresh: bool) -> dict[str, Any]:
    """Every phase against the database at ``url`` (loaded first when ``fresh``)."""
    layout = sc.make_layout(args.rows)
    vocab = sc.vocabulary(args.data)
    results = header(args)
    built = build_halfvec(url, args) if args.halfvec and not fresh else {}
    if built:
        results["halfvec_build"] = built
        print(json.dumps(built), flush=True)
    async with engine_for(url, args.halfvec) as engine:
        if fresh:
            print(f"bulk loading {args.rows:,} rows ...", flush=True)
            results["bulk"] = await bulk_phase(engine, layout, vocab, args)
            print(json.dumps(results["bulk"]), flush=True)
            if args.ordinary:
                results["ordinary"] = await ordinary_phase(engine, layout, vocab, args.ordinary)
                print(json.dumps(results["ordinary"]), flush=True)
        if "document_fts" in args.alone:  # that leg's chunk indexes (migration 0027), as weighting it builds them
            await migrate(await engine.database(), dim=DIM, document_fts=True, halfvec=args.halfvec)
        results["sizes"] = index_size(url)
        if args.latency_queries:
            timed = await latency_phase({"": engine}, vocab, layout, args.latency_queries, args.alone)
            results["latency"] = timed[""]
            print(json.dumps(results["latency"]), flush=True)
        if args.queries:
            results["recall"] = (await recall_phase({"": engine}, layout, args.queries, args.cell_seconds))[""]
    results["load_average_end"] = load_average()
    return results


async def run(args: argparse.Namespace, base: Path, fresh: bool) -> dict[str, Any]:
    """Every phase against the embedded server in ``base`` (started here, stopped afterwards)."""
    pgdata, url = embedded.acquire(base)
    try:
        if args.shared_buffers:
            with psycopg.connect(url, autocommit=True) as conn:
                current = conn.execute("SHOW shared_buffers").fetchone()
                if current is None or current[0] != args.shared_buffers:
                    conn.execute(f"ALTER SYSTEM SET shared_buffers = '{args.shared_buffers}'")
                    embedded.release(pgdata)
                    pgdata, url = embedded.acquire(base)
        return await measure(args, url, fresh)
    finally:
        embedded.release(pgdata)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of the load and the search phases (shared with ``benchmarks/citus/scale.py``)."""
    parser.add_argument("--data", type=Path, required=True, help="a BEIR corpus.jsonl.gz for the vocabulary")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=50, help="queries per ACL-recall cell (0 skips the grid)")
    parser.add_argument("--cell-seconds", type=float, default=120.0, help="time cap of one ACL-recall cell")
    parser.add_argument("--latency-queries", type=int, default=50, help="queries per caller (0 skips)")
    parser.add_argument("--ordinary", type=int, default=100, help="documents for the ordinary-ingest sample")
    parser.add_argument("--batch-chunks", type=int, default=20_000)
    parser.add_argument("--maintenance-work-mem", default="2GB")
    parser.add_argument("--parallel-workers", type=int, default=None)
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--out", type=Path, default=HERE / "results.json")
    parser.add_argument(
        "--float4",
        dest="halfvec",
        action="store_false",
        help="HNSW over float4 (storage.hnsw_halfvec off); by default over halfvec, built first on --reuse",
    )
    parser.add_argument(
        "--alone",
        type=lambda v: tuple(x for x in v.split(",") if x),
        default=("fts",),
        help="legs timed alone after the fused searches, comma-separated (fts, document_fts; default fts)",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser)
    parser.add_argument("--keep", type=Path, help="load into DIR and leave the database there")
    parser.add_argument("--reuse", type=Path, help="run the search phases on the database kept in DIR")
    parser.add_argument(
        "--database-url",
        help="run against this database instead of an embedded server of its own (a Citus coordinator "
        "migrated with `migrate --citus`, or any server); it is loaded unless --search-only",
    )
    parser.add_argument("--search-only", action="store_true", help="with --database-url: skip the load")
    args = parser.parse_args()
    if args.keep and args.reuse:
        parser.error("--keep and --reuse are exclusive")
    if args.database_url and (args.keep or args.reuse):
        parser.error("--database-url runs against that database: --keep and --reuse are for the embedded server")
    if args.search_only and not args.database_url:
        parser.error("--search-only goes with --database-url (the embedded server's is --reuse DIR)")
    if args.database_url:
        results = asyncio.run(measure(args, args.database_url, fresh=not args.search_only))
    else:
        base = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="ce-scale-"))
        try:
            results = asyncio.run(run(args, base, fresh=args.reuse is None))
        finally:
            if not (args.keep or args.reuse):
                embedded.remove(base)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
