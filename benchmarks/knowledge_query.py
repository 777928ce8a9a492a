"""``knowledge_query`` on BEIR SciFact: nDCG@10 of the no-model path against ``/search``, and its latency.

Run from the repository root::

    python benchmarks/knowledge_query.py --data PATH/TO/scifact [--docs 1500] [--database-url URL]

What it measures, and why this way:

- **Quality.** Every judged test query goes through ``engine.knowledge_query(expand=False,
  rerank=False, top_k=20)`` and through ``engine.search(top_k=20)`` on the same engine, database and
  vectors; each ranking of passages becomes a ranking of documents by their best passage (the
  BEIR harness's rule, ``context_engine.evaluation.dedupe_documents``) and is scored with nDCG@10.
  ``top_k=20`` is the route's ceiling, so both sides see the same depth. The two differ only in
  the pipeline: ``/search`` adds the trigram leg; ``knowledge_query`` runs vector + full-text.
- **Attribution.** Two more rows explain a difference between the two: ``knowledge_query`` with
  ``knowledge.candidates=30`` (candidate depth) and ``/search`` without its trigram leg (the same
  two channels as ``knowledge_query``), each through ``evaluation.overridden`` on the same engine.
- **Latency.** Wall time of each ``knowledge_query`` call, query embedding included, after a few
  warm-up queries; p50 and p95 (nearest rank). ``/search`` is timed alongside for comparison.
- **No model is called.** An LLM is configured (so a call *could* happen) behind an
  ``http_client_factory`` that counts every request; the run fails if the count is not zero.

``--docs N`` keeps every document judged relevant for a test query plus the first other documents
of the corpus file, ``N`` in all (0 = the full 5,183). A subset changes absolute figures (fewer
distractors) but not the comparison, which is on the same subset. Document vectors are cached
under ``benchmarks/.cache/`` by the SHA-256 of their text (seeded from the BEIR harness's cache
when present), so a second run does not re-embed. Results also go to
``benchmarks/results/knowledge_query.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.config import EmbeddingConfig
from context_engine.embeddings.factory import build_embedder
from context_engine.evaluation import (
    BeirDataset,
    CachingEmbedder,
    dedupe_documents,
    ingest_dataset,
    load_beir,
    overridden,
    percentile,
    score_run,
)
from context_engine.storage import embedded

HERE = Path(__file__).resolve().parent
SOURCE = "bench-scifact"
TOP_K = 20
WARMUP = 5
#: path -> (what is called, settings overridden for it); the last two attribute a difference
PATHS: dict[str, tuple[str, dict[str, Any]]] = {
    "knowledge": ("knowledge", {}),
    "search": ("search", {}),
    "knowledge, 30 candidates": ("knowledge", {"knowledge": {"candidates": 30}}),
    "search, no trigram leg": ("search", {"fusion": {"weights": {"trigram": 0.0}}}),
}


class _Cache(CachingEmbedder):
    """``CachingEmbedder`` saving its hashes as raw bytes.

    The harness saves digests as numpy ``S32``, which drops trailing NUL bytes: about one digest
    in 256 then reloads under a shortened key, misses, is embedded again and saved twice, and the
    next save overruns its hash array. Raw ``uint8`` rows keep all 32 bytes and load the same way.
    """

    def save(self) -> None:
        if self.path is None or self._unsaved == 0:
            return
        items = sorted(((d, i) for d, i in self._index.items() if len(d) == 32), key=lambda item: item[1])
        hashes = np.frombuffer(b"".join(d for d, _ in items), dtype=np.uint8).reshape(-1, 32)
        vectors = np.stack([self._vectors[i] for _, i in items]).astype(np.float32)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp.npz")
        np.savez(tmp, hashes=hashes, vectors=vectors, dim=np.int64(self.dim), key=np.str_(self.inner.key))
        tmp.replace(self.path)
        self._unsaved = 0


def subset(dataset: BeirDataset, docs: int) -> BeirDataset:
    """Every relevant document of the judged queries, then the first others, ``docs`` in all."""
    if docs <= 0 or docs >= len(dataset.corpus):
        return dataset
    relevant = {d for rels in dataset.qrels.values() for d in rels}
    keep = [d for d in dataset.corpus if d in relevant]
    keep += [d for d in dataset.corpus if d not in relevant][: max(0, docs - len(keep))]
    chosen = set(keep)
    corpus = {d: v for d, v in dataset.corpus.items() if d in chosen}
    return BeirDataset(dataset.name, corpus, dataset.queries, dataset.qrels, dataset.corpus_sha256)


def cache_path(embedder_key: str, corpus_sha: str) -> Path:
    """Our cache file, seeded once from the BEIR harness's chunk cache when it exists."""
    slug = embedder_key.replace("\t", "-")
    folder = HERE / ".cache" / "embeddings" / slug
    mine = folder / f"{corpus_sha[:16]}-knowledge-query.npz"
    if not mine.exists():
        for seed in sorted(folder.glob(f"{corpus_sha[:16]}-heading-*.npz")):
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(seed, mine)
            break
    return mine


async def run(args: argparse.Namespace) -> dict[str, Any]:
    full = load_beir(args.data)
    dataset = subset(full, args.docs)
    inner = build_embedder(EmbeddingConfig())
    embedder = _Cache(inner, cache_path(inner.key, full.corpus_sha256))
    model_requests: list[str] = []

    async def count(request: httpx.Request) -> None:
        model_requests.append(str(request.url))

    counted = httpx.AsyncClient(event_hooks={"request": [count]})
    throwaway: Path | None = None
    config = ContextEngineConfig(
        llm={"provider": "custom", "base_url": "http://127.0.0.1:9/v1", "model": "never-called", "max_retries": 0},
        rerank={"provider": "llm"},
    )
    if args.database_url:
        config.database_url = args.database_url
        config.storage.auto_migrate = True
    else:
        throwaway = Path(tempfile.mkdtemp(prefix="ce-bench-kq-"))
        config.storage.data_dir = throwaway

    def progress(stage: str, done: int, total: int) -> None:
        print(f"  {stage}: {done}/{total}", file=sys.stderr, flush=True)

    try:
        async with ContextEngine(config, embedder=embedder, http_client_factory=lambda purpose: counted) as engine:
            started = time.perf_counter()
            failed, _ = await ingest_dataset(engine, dataset, source_id=SOURCE, progress=progress)
            ingest_s = time.perf_counter() - started
            embedder.save()
            stats = await engine.stats(principals=TRUSTED, source_ids=[SOURCE])
            queries = list(dataset.queries.items())
            for _, text in queries[:WARMUP]:
                await engine.knowledge_query(
                    text, top_k=TOP_K, expand=False, rerank=False, principals=TRUSTED, source_ids=[SOURCE]
                )
                await engine.search(text, top_k=TOP_K, principals=TRUSTED, source_ids=[SOURCE])
            rankings: dict[str, dict[str, list[str]]] = {name: {} for name in PATHS}
            latency: dict[str, list[float]] = {name: [] for name in PATHS}
            candidates: list[int] = []
            for name, (kind, overrides) in PATHS.items():
                with overridden(engine, overrides):
                    for n, (qid, text) in enumerate(queries, start=1):
                        t0 = time.perf_counter()
                        if kind == "knowledge":
                            result = await engine.knowledge_query(
                                text, top_k=TOP_K, expand=False, rerank=False, principals=TRUSTED, source_ids=[SOURCE]
                            )
                            pairs = [(m.source_name, m.score) for m in result.matches]
                            if name == "knowledge":
                                candidates.append(result.trace.candidate_count)
                        else:
                            found = await engine.search(text, top_k=TOP_K, principals=TRUSTED, source_ids=[SOURCE])
                            pairs = [(h.document_name, h.score) for h in found.hits]
                        latency[name].append((time.perf_counter() - t0) * 1000)
                        rankings[name][qid] = dedupe_documents(pairs)
                        if n % 100 == 0 or n == len(queries):
                            progress(name, n, len(queries))
    finally:
        await counted.aclose()
        if throwaway is not None:
            embedded.remove(throwaway)  # stops the server if closing the engine left it running
    if model_requests:
        raise SystemExit(f"the no-model path called a model {len(model_requests)} time(s)")
    rows = {name: score_run(name, rankings[name], dataset.qrels, latency[name]) for name in PATHS}
    return {
        "dataset": dataset.name,
        "documents": len(dataset.corpus),
        "chunks": stats.chunks,
        "failed": failed,
        "queries": len(dataset.queries),
        "ingest_seconds": round(ingest_s, 1),
        "cache": {"hits": embedder.hits, "misses": embedder.misses},
        "top_k": TOP_K,
        "model_requests": len(model_requests),
        "mean_candidates": round(sum(candidates) / len(candidates), 1),
        "rows": {
            name: {
                "ndcg10": round(row.ndcg10, 4),
                "mrr10": round(row.mrr10, 4),
                "p50_ms": round(percentile(latency[name], 50), 1),
                "p95_ms": round(percentile(latency[name], 95), 1),
            }
            for name, row in rows.items()
        },
    }


def table(report: dict[str, Any]) -> str:
    names = {
        "knowledge": "knowledge_query (expand=false, rerank=false)",
        "search": "/search (engine.search, default settings)",
        "knowledge, 30 candidates": "knowledge_query, knowledge.candidates=30",
        "search, no trigram leg": "/search without its trigram leg (vector + full-text, as knowledge_query)",
    }
    lines = [
        f"SciFact test: {report['queries']} queries over {report['documents']} documents "
        f"({report['chunks']} chunks); top_k={report['top_k']}, documents ranked by best passage",
        "",
        "| path | nDCG@10 | MRR@10 | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, row in report["rows"].items():
        lines.append(f"| {names[key]} | {row['ndcg10']:.3f} | {row['mrr10']:.3f} | {row['p50_ms']} | {row['p95_ms']} |")
    lines.append("")
    lines.append(
        f"model requests on the no-model path: {report['model_requests']}; "
        f"mean candidates fused: {report['mean_candidates']}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a BEIR-format folder (e.g. BEIR SciFact)")
    parser.add_argument("--docs", type=int, default=1500, help="corpus subset size (0 = the full corpus)")
    parser.add_argument("--database-url", default=None, help="default: a throwaway embedded PostgreSQL")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    out = HERE / "results" / "knowledge_query.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(report))


if __name__ == "__main__":
    main()
