"""Fusion defaults chosen on one half of the test queries and reported on the other half and on all.

    python benchmarks/beir/halves.py --data PATH/TO/scifact --cache PATH/TO/cache [--store DIR]

Each document is ingested as plain text (``title + "\\n\\n" + text``), as ``benchmarks/peers/run.py``
ingests it, through ``ContextEngine.ingest`` into an embedded server (under ``--store``, kept between
runs, or a temporary directory). Every registered lexical and dense leg then runs alone for each test
query through the engine's own retriever at depth 200 (the candidates a 100-document search asks
for), and fusion is replayed over those candidates with the engine's ``fusion.fuse`` and its rules:
documents ranked by their best fused chunk, ties by chunk id.

The 300 queries are split into the same fixed halves as the peers harness (even and odd positions
in the qrels file). A grid of settings (which legs, the fusion method, ``k``, the lexical weights) is
scored on each half; the rule picks a setting on one half only, and its figures on the other half
and on all the queries are printed, both ways round. The rule, stated before looking:

* the setting with the highest mean nDCG@10 on the choosing half; among settings within
  ``--tie`` (0.002) of it, the one with the fewest tuned values (a weight other than 1 or an RRF
  ``k`` other than 60 each count one), then the higher P@1.

Also printed: the whole-document alternative to the document leg, each document scored by the sum
of its chunks' BM25 scores (the chunk leg's own candidates aggregated), so both ways of giving a
document its spread-out words are measured on the same queries.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from context_engine import TRUSTED, ContextEngine  # noqa: E402
from context_engine.config import ContextEngineConfig, EmbeddingConfig  # noqa: E402
from context_engine.embeddings.local import LocalEmbedder  # noqa: E402
from context_engine.evaluation import BeirDataset, CachingEmbedder, cache_file, load_beir, ndcg_at_k  # noqa: E402
from context_engine.ingest.pipeline import chunk_stream, prepare  # noqa: E402
from context_engine.retrieval import fusion  # noqa: E402
from context_engine.retrieval.retriever import Retriever  # noqa: E402
from context_engine.storage import embedded  # noqa: E402
from context_engine.storage.predicates import ReadScope  # noqa: E402

DEPTH = 200
LEGS = ("fts", "vector", "document_fts")
#: a ranking computed here, not by a leg: each document's chunk-leg scores summed
SUMMED = "fts_summed"

Candidates = dict[str, list[tuple[int, float]]]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def plain_text(title: str, body: str) -> str:
    return f"{title}\n\n{body}" if title else body


def halves(qids: Sequence[str]) -> tuple[list[str], list[str]]:
    """The peers harness's halves: even and odd positions in the qrels file."""
    return list(qids[0::2]), list(qids[1::2])


def load_average() -> str:
    """The machine's load averages (1, 5, 15 minutes), for every figure's line."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def store_parser(doc: str | None, queries: int) -> argparse.ArgumentParser:
    """The options every script on the kept store shares: the dataset, the vector cache, the store
    and how many test queries (the first ``queries`` by default)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="a BEIR-format folder (e.g. scifact)")
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache", help="vector cache folder")
    parser.add_argument("--store", required=True, type=Path, help="the store halves.py builds (kept between runs)")
    parser.add_argument("--queries", type=int, default=queries, help="the first N test queries")
    return parser


# ------------------------------------------------------------------------------------------ store


async def build(
    dataset: BeirDataset, store: Path, cache: Path, settings: dict[str, Any] | None = None, **engine: Any
) -> ContextEngine:
    """The engine over ``store``, every document ingested (unchanged ones are skipped).

    ``settings`` are more configuration sections (for example ``llm``); ``engine`` goes to
    ``ContextEngine`` (for example ``http_client_factory``)."""
    model = LocalEmbedder(EmbeddingConfig())
    config = ContextEngineConfig(storage={"data_dir": store}, search={"max_top_k": 1000}, **(settings or {}))
    budget = min(config.ingest.chunk_tokens, model.max_input_tokens)
    chunks = CachingEmbedder(model, cache_file(cache / "embeddings", model, dataset.corpus_sha256, f"plain-{budget}"))
    texts: list[str] = []
    for doc_id, (title, body) in dataset.corpus.items():
        streamed = chunk_stream(
            plain_text(title, body).encode(), doc_id, "text/markdown", budget, model.count_tokens, None
        )
        texts.extend(c.text for c in prepare(streamed, model.count_tokens, hold=1_000_000).chunks or [])
    embedded_now = await chunks.warm(texts)
    log(f"{len(texts)} chunks, {embedded_now} embedded now")
    built = ContextEngine(config, embedder=chunks, **engine)
    stats = await built.stats(principals=TRUSTED)
    if stats.documents < len(dataset.corpus):
        gate = asyncio.Semaphore(4)
        started = time.perf_counter()

        async def one(doc_id: str, title: str, body: str) -> None:
            async with gate:
                await built.ingest(text=plain_text(title, body), name=doc_id, source_id="scifact")

        await asyncio.gather(*(one(d, t, b) for d, (t, b) in dataset.corpus.items()))
        log(f"ingested in {time.perf_counter() - started:.0f} s")
    return built


async def candidates(engine: ContextEngine, dataset: BeirDataset, qids: Sequence[str]) -> dict[str, Candidates]:
    """Each leg alone, through the engine's retriever, at :data:`DEPTH` per query; plus the chunk
    leg's scores summed per document (:data:`SUMMED`)."""
    retriever = Retriever(engine.services)
    every = {leg: 1.0 for leg in LEGS}
    saved = engine.config
    engine.config = saved.model_copy(
        update={"fusion": saved.fusion.model_copy(update={"weights": {**saved.fusion.weights, **every}})}
    )
    out: dict[str, Candidates] = {}
    timings: dict[str, list[float]] = {leg: [] for leg in LEGS}
    try:
        for n, qid in enumerate(qids):
            found = await retriever.retrieve([dataset.queries[qid]], ReadScope(None), DEPTH)
            out[qid] = {leg: found.for_query(0).get(leg, []) for leg in LEGS}
            for leg in LEGS:
                timings[leg].append(found.timings.get(leg, 0.0))
            if n % 50 == 0:
                log(f"  legs: {n}/{len(qids)}")
    finally:
        engine.config = saved
    for leg, values in timings.items():
        log(f"  {leg} leg at depth {DEPTH}: p50 {statistics.median(values):.1f} ms (legs run concurrently)")
    return out


async def documents_of(engine: ContextEngine, found: Mapping[str, Candidates]) -> dict[int, str]:
    ids = sorted({cid for legs in found.values() for pairs in legs.values() for cid, _ in pairs})
    db = await engine.database()
    async with db.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT c.id, d.name FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id "
                "WHERE c.id = ANY(:ids)"
            ),
            {"ids": ids},
        )
        return {int(r[0]): str(r[1]) for r in rows}


def summed(pairs: Sequence[tuple[int, float]], doc_of: Mapping[int, str]) -> list[tuple[int, float]]:
    """Each document's chunk scores summed, handed on every chunk of it the leg returned."""
    totals: dict[str, float] = {}
    for cid, score in pairs:
        totals[doc_of[cid]] = totals.get(doc_of[cid], 0.0) + score
    return sorted(((cid, totals[doc_of[cid]]) for cid, _ in pairs), key=lambda p: (-p[1], doc_of[p[0]], p[0]))


# ----------------------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class Setting:
    method: str
    k: int
    weights: tuple[tuple[str, float], ...]

    @property
    def name(self) -> str:
        legs = " + ".join(f"{leg} {w:g}" for leg, w in self.weights if w > 0)
        return f"{self.method}{f' k {self.k}' if self.method == 'rrf' else ''}: {legs}"

    @property
    def tuned(self) -> int:
        """How many values were fitted: weights other than 1, and an RRF ``k`` other than 60."""
        return sum(1 for _, w in self.weights if w not in (0.0, 1.0)) + int(self.method == "rrf" and self.k != 60)


def ranking(setting: Setting, legs: Candidates, doc_of: Mapping[int, str], top_k: int = 100) -> list[str]:
    weights = dict(setting.weights)
    scored = {leg: pairs for leg, pairs in legs.items() if weights.get(leg, 0) > 0}
    shared = [leg for leg in scored if leg in ("document_fts", SUMMED)]
    seen: list[str] = []
    for cid, _ in fusion.fuse(setting.method, scored, weights, setting.k, shared):
        name = doc_of[cid]
        if name not in seen:
            seen.append(name)
            if len(seen) == top_k:
                break
    return seen


def grid() -> list[Setting]:
    settings: list[Setting] = []
    lexical_sets = [("fts",), ("document_fts",), ("fts", "document_fts"), (SUMMED,), ("fts", SUMMED)]
    weights = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
    for lex in lexical_sets:
        for ws in itertools.product(weights, repeat=len(lex)):
            w = (*zip(lex, ws, strict=True), ("vector", 1.0))
            settings.append(Setting("convex", 60, w))
            for k in (10, 20, 60):
                settings.append(Setting("rrf", k, w))
    return settings


@dataclass
class Scored:
    setting: Setting
    ndcg: dict[str, float]  # per query
    p1: dict[str, float]

    def mean(self, qids: Sequence[str]) -> float:
        return statistics.fmean(self.ndcg[q] for q in qids)

    def precision1(self, qids: Sequence[str]) -> float:
        return statistics.fmean(self.p1[q] for q in qids)


def choose(scored: Sequence[Scored], qids: Sequence[str], tie: float) -> Scored:
    best = max(s.mean(qids) for s in scored)
    near = [s for s in scored if s.mean(qids) >= best - tie]
    return min(near, key=lambda s: (s.setting.tuned, -s.precision1(qids), -s.mean(qids), s.setting.name))


def main(args: argparse.Namespace) -> None:
    dataset = load_beir(args.data)
    qids = [q for q in dataset.qrels if q in dataset.queries]
    first, second = halves(qids)
    store = args.store or Path(tempfile.mkdtemp(prefix="ce-halves-"))

    async def collect() -> tuple[dict[str, Candidates], dict[int, str]]:
        engine = await build(dataset, store, args.cache)
        try:
            found = await candidates(engine, dataset, qids)
            return found, await documents_of(engine, found)
        finally:
            await engine.aclose()

    try:
        found, doc_of = asyncio.run(collect())
    finally:
        if args.store is None:
            embedded.remove(store)
            shutil.rmtree(store, ignore_errors=True)
    for legs in found.values():
        legs[SUMMED] = summed(legs["fts"], doc_of)
    results: list[Scored] = []
    for setting in grid():
        ndcg, p1 = {}, {}
        for q in qids:
            ranked = ranking(setting, found[q], doc_of)
            ndcg[q] = ndcg_at_k(ranked, dataset.qrels[q])
            p1[q] = float(bool(ranked) and dataset.qrels[q].get(ranked[0], 0) > 0)
        results.append(Scored(setting, ndcg, p1))

    def row(s: Scored, label: str = "") -> str:
        name = f"{label}{s.setting.name}"
        return (
            f"| {name} | {s.mean(qids):.4f} | {s.mean(first):.4f} | {s.mean(second):.4f} | "
            f"{s.precision1(qids):.3f} | {s.precision1(first):.3f} | {s.precision1(second):.3f} |"
        )

    head = (
        "| setting | nDCG@10 all | half A | half B | P@1 all | half A | half B |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    print(f"\n{dataset.name}: {len(qids)} queries, halves of {len(first)} and {len(second)}\n")
    print("Reference settings\n\n" + head)
    by_name = {s.setting.name: s for s in results}
    for name in (
        "convex: fts 1.5 + vector 1",
        "convex: fts 1 + vector 1",
        "rrf k 60: fts 1 + vector 1",
        "rrf k 60: document_fts 1 + vector 1",
        "rrf k 60: fts 1 + document_fts 1 + vector 1",
        "convex: document_fts 1 + vector 1",
        "convex: fts 1 + document_fts 1 + vector 1",
        f"convex: {SUMMED} 1 + vector 1",
        f"rrf k 60: {SUMMED} 1 + vector 1",
    ):
        if name in by_name:
            print(row(by_name[name]))
    print(f"\nChosen by the rule (tie {args.tie}) on one half, reported on the other and on all\n\n{head}")
    for label, part in (("on half A: ", first), ("on half B: ", second)):
        print(row(choose(results, part, args.tie), label))
    for label, part in (("half A", first), ("half B", second)):
        print(f"\nBest ten on {label}\n\n{head}")
        for s in sorted(results, key=lambda s: -s.mean(part))[:10]:
            print(row(s))
    if args.save:
        payload = {s.setting.name: {"all": s.mean(qids), "A": s.mean(first), "B": s.mean(second)} for s in results}
        args.save.write_text(json.dumps(payload, indent=1), encoding="utf-8")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="a BEIR-format folder (e.g. scifact)")
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / ".cache", help="vector cache folder")
    parser.add_argument("--store", type=Path, help="keep the ingested store here between runs")
    parser.add_argument("--tie", type=float, default=0.002, help="the rule's tie margin, nDCG@10")
    parser.add_argument("--save", type=Path, help="write every setting's figures here as JSON")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
