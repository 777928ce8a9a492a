"""``knowledge_query`` on BEIR SciFact: nDCG@10 of the no-model path against ``/search``, and its latency.

Run from the repository root::

    python benchmarks/knowledge_query.py --data PATH/TO/scifact --cache PATH/TO/cache [--store DIR]

What it measures, and why this way:

- **Quality.** Every judged test query goes through ``engine.knowledge_query(expand=False,
  rerank=False, top_k=20)`` and through ``engine.search(top_k=20)`` on the same engine, database and
  vectors; each ranking of passages becomes a ranking of documents by their best passage (the
  BEIR harness's rule, ``context_engine.evaluation.dedupe_documents``) and is scored with nDCG@10,
  on all the queries and on the two fixed halves of ``benchmarks/beir/halves.py``. ``top_k=20`` is
  the route's ceiling, so both sides see the same depth.
- **The store.** The plain-text store of ``benchmarks/beir/halves.py`` (each document ingested as
  ``title + "\n\n" + text``, the chunk vectors cached under ``--cache``), kept under ``--store`` or
  built in a temporary directory.
- **Latency.** Wall time of each call, query embedding included, after a few warm-up queries;
  p50 and p95 (nearest rank), the two paths interleaved query by query.
- **No model is called.** An LLM is configured (so a call *could* happen) behind an
  ``http_client_factory`` that counts every request; the run fails if the count is not zero.

Results also go to ``benchmarks/results/knowledge_query.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "beir"))

from halves import build, halves  # noqa: E402

from context_engine import TRUSTED  # noqa: E402
from context_engine.evaluation import dedupe_documents, load_beir, ndcg_at_k, percentile  # noqa: E402
from context_engine.storage import embedded  # noqa: E402

TOP_K = 20
WARMUP = 5
PATHS = ("knowledge", "search")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    dataset = load_beir(args.data)
    qids = [q for q in dataset.qrels if q in dataset.queries]
    model_requests: list[str] = []

    async def count(request: httpx.Request) -> None:
        model_requests.append(str(request.url))

    counted = httpx.AsyncClient(event_hooks={"request": [count]})
    store = args.store or Path(tempfile.mkdtemp(prefix="ce-bench-kq-"))
    settings = {
        "llm": {"provider": "custom", "base_url": "http://127.0.0.1:9/v1", "model": "never-called", "max_retries": 0},
        "rerank": {"provider": "llm"},
    }
    rankings: dict[str, dict[str, list[str]]] = {name: {} for name in PATHS}
    latency: dict[str, list[float]] = {name: [] for name in PATHS}
    try:
        engine = await build(dataset, store, args.cache, settings, http_client_factory=lambda purpose: counted)
        try:
            stats = await engine.stats(principals=TRUSTED)

            async def one(name: str, query: str) -> tuple[list[str], float]:
                t0 = time.perf_counter()
                if name == "knowledge":
                    result = await engine.knowledge_query(
                        query, top_k=TOP_K, expand=False, rerank=False, principals=TRUSTED
                    )
                    pairs = [(m.source_name, m.score) for m in result.matches]
                else:
                    found = await engine.search(query, top_k=TOP_K, principals=TRUSTED)
                    pairs = [(h.document_name, h.score) for h in found.hits]
                return dedupe_documents(pairs), (time.perf_counter() - t0) * 1000

            for qid in qids[:WARMUP]:
                for name in PATHS:
                    await one(name, dataset.queries[qid])
            load_before = os.getloadavg()
            for n, qid in enumerate(qids):
                for name in PATHS if n % 2 == 0 else PATHS[::-1]:
                    ranked, ms = await one(name, dataset.queries[qid])
                    rankings[name][qid] = ranked
                    latency[name].append(ms)
            load_after = os.getloadavg()
        finally:
            await engine.aclose()
    finally:
        await counted.aclose()
        if args.store is None:
            embedded.remove(store)
            shutil.rmtree(store, ignore_errors=True)
    if model_requests:
        raise SystemExit(f"the no-model path called a model {len(model_requests)} time(s)")
    first, second = halves(qids)

    def mean(name: str, part: list[str]) -> float:
        return sum(ndcg_at_k(rankings[name][q], dataset.qrels[q]) for q in part) / len(part)

    same = sum(1 for q in qids if rankings["knowledge"][q] == rankings["search"][q])
    return {
        "dataset": dataset.name,
        "documents": len(dataset.corpus),
        "chunks": stats.chunks,
        "queries": len(qids),
        "top_k": TOP_K,
        "model_requests": len(model_requests),
        "identical_rankings": same,
        "load": [round(x, 2) for x in (*load_before, *load_after)],
        "rows": {
            name: {
                "ndcg10": round(mean(name, qids), 4),
                "half_a": round(mean(name, first), 4),
                "half_b": round(mean(name, second), 4),
                "p50_ms": round(percentile(latency[name], 50), 1),
                "p95_ms": round(percentile(latency[name], 95), 1),
            }
            for name in PATHS
        },
    }


def table(report: dict[str, Any]) -> str:
    names = {
        "knowledge": "knowledge_query (expand=false, rerank=false)",
        "search": "/search (engine.search, default settings)",
    }
    lines = [
        f"SciFact test: {report['queries']} queries over {report['documents']} documents "
        f"({report['chunks']} chunks); top_k={report['top_k']}, documents ranked by best passage; "
        f"load {report['load']}",
        "",
        "| path | nDCG@10 | half A | half B | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, row in report["rows"].items():
        lines.append(
            f"| {names[key]} | {row['ndcg10']:.4f} | {row['half_a']:.4f} | {row['half_b']:.4f} | "
            f"{row['p50_ms']} | {row['p95_ms']} |"
        )
    lines.append("")
    lines.append(
        f"model requests on the no-model path: {report['model_requests']}; "
        f"queries whose two document rankings are identical: {report['identical_rankings']}/{report['queries']}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="a BEIR-format folder (e.g. BEIR SciFact)")
    parser.add_argument("--cache", type=Path, default=HERE / ".cache", help="vector cache folder")
    parser.add_argument("--store", type=Path, help="the store halves.py builds (kept between runs)")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    out = HERE / "results" / "knowledge_query.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(report))


if __name__ == "__main__":
    main()
