"""Write rates of ordinary ingest: one large document, many small ones concurrently, and a batch call.

Starts its own embedded PostgreSQL in a temporary directory and embeds with the stand-in embedder of
``run.py`` (hashed vectors, the local model's tokenizer, batched as the local model is), so the figures
are the pipeline's and the database's own work. Three rates, each printed with the time spent inside
the embedder taken out:

1. one generated CSV (``--csv-mb``, 22 MB is the 43,594-chunk file of the ingestion table): chunks/s;
   its ``prepare`` pass (extraction and chunking, run twice for a document of more than
   ``ingest.hold_chunks`` chunks) is timed on its own too, so the storage part can be read apart;
2. ``--docs`` one-chunk documents through ``engine.ingest``, ``--concurrency`` calls at a time: documents/s;
3. the same number of other one-chunk documents through ``engine.ingest_many`` in batches of
   ``--batch``: documents/s.

    .venv/bin/python benchmarks/ingest/rates.py [--csv-mb 22] [--docs 600] [--concurrency 16] [--batch 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import StandInEmbedder, TimedEmbedder, engine_config, load, paragraph, write_csv

from context_engine import TRUSTED, ContextEngine
from context_engine.embeddings.local import LocalEmbedder
from context_engine.ingest.pipeline import chunk_stream, prepare
from context_engine.storage import embedded


def out(message: str = "") -> None:
    print(message, flush=True)


class VectorStoreClock:
    """Wall-clock seconds while at least one statement that stores vectors runs
    (``UPDATE ce_chunks c SET embedding ...``): the HNSW insert and the other indexes' upkeep of each
    row, which set-based writing cannot remove. Overlapping stores are counted once."""

    PREFIX = "UPDATE ce_chunks c SET embedding"

    def __init__(self) -> None:
        self.seconds = 0.0
        self._running = 0
        self._since = 0.0

    def attach(self, sql_engine: Any) -> None:
        event.listen(sql_engine.sync_engine, "before_cursor_execute", self._before)
        event.listen(sql_engine.sync_engine, "after_cursor_execute", self._after)
        event.listen(sql_engine.sync_engine, "handle_error", self._failed)

    def _before(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith(self.PREFIX):
            if self._running == 0:
                self._since = time.perf_counter()
            self._running += 1

    def _after(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith(self.PREFIX):
            self._running -= 1
            if self._running == 0:
                self.seconds += time.perf_counter() - self._since

    def _failed(self, context: Any) -> None:
        if (context.statement or "").startswith(self.PREFIX):
            self._after(None, None, context.statement)


def notes(rng: random.Random, count: int, tag: str) -> list[str]:
    """Short notes of one chunk each (a heading and two to four sentences)."""
    return [f"# {tag} note {i}\n\n{paragraph(rng, rng.randint(2, 4))}" for i in range(count)]


async def large_document(
    engine: ContextEngine, embedder: TimedEmbedder, clock: VectorStoreClock, path: Path, hold: int
) -> str:
    size_mb = path.stat().st_size / 1e6  # noqa: ASYNC240 (one stat of a local file)
    local = embedder.inner
    budget = min(engine.config.ingest.chunk_tokens, embedder.max_input_tokens)
    started = time.perf_counter()
    prepared = await asyncio.to_thread(
        lambda: prepare(
            chunk_stream(path, path.name, None, budget, local.count_tokens, None), local.count_tokens, hold=hold
        )
    )
    one_pass = time.perf_counter() - started
    passes = 1 if prepared.chunks is not None else 2
    del prepared
    embedder.seconds = clock.seconds = 0.0
    started = time.perf_counter()
    report = await engine.ingest(file=path, name=path.name, source_id="large")
    seconds = time.perf_counter() - started
    doc = report.documents[0]
    without_embed = seconds - embedder.seconds
    storage = without_embed - passes * one_pass
    return (
        f"| large document ({size_mb:.1f} MB CSV) | {doc.chunks:,} chunks | {seconds:.1f} | "
        f"{embedder.seconds:.1f} | {clock.seconds:.1f} | **{doc.chunks / without_embed:,.0f} chunks/s** | "
        f"{passes} x {one_pass:.1f} s prepare; storage alone {doc.chunks / max(storage, 1e-9):,.0f} chunks/s, "
        f"without the vector stores {doc.chunks / max(storage - clock.seconds, 1e-9):,.0f} chunks/s | {doc.status} |"
    )


async def concurrent_singles(
    engine: ContextEngine, embedder: TimedEmbedder, clock: VectorStoreClock, texts: list[str], concurrency: int
) -> str:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, body: str) -> str:
        async with gate:
            report = await engine.ingest(text=body, name=f"single-{i}", source_id="singles")
            return report.documents[0].status

    embedder.seconds = clock.seconds = 0.0
    started = time.perf_counter()
    statuses = await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
    seconds = time.perf_counter() - started
    done = statuses.count("completed")
    return (
        f"| `engine.ingest`, {concurrency} at a time | {len(texts)} documents | {seconds:.1f} | "
        f"{embedder.seconds:.1f} | {clock.seconds:.1f} | **{done / (seconds - embedder.seconds):,.0f} documents/s** | "
        f"{done / seconds:,.0f} documents/s with embedding; {_without(done, seconds, embedder, clock)} | "
        f"{done} completed |"
    )


def _without(done: int, seconds: float, embedder: TimedEmbedder, clock: VectorStoreClock) -> str:
    """The rate with the vector stores' time taken out too (an upper bound: stores overlap other work)."""
    rest = max(seconds - embedder.seconds - clock.seconds, 1e-9)
    return f"without the vector stores {done / rest:,.0f} documents/s"


async def batched(
    engine: ContextEngine, embedder: TimedEmbedder, clock: VectorStoreClock, texts: list[str], batch: int
) -> str:
    if not hasattr(engine, "ingest_many"):
        return "| `engine.ingest_many` | not available in this version | | | | | | |"
    embedder.seconds = clock.seconds = 0.0
    started = time.perf_counter()
    done = 0
    for start in range(0, len(texts), batch):
        documents = [
            {"text": body, "name": f"many-{start + i}", "source_id": "many"}
            for i, body in enumerate(texts[start : start + batch])
        ]
        report = await engine.ingest_many(documents)
        done += sum(1 for item in report.items if item.report is not None and item.report.status == "completed")
    seconds = time.perf_counter() - started
    return (
        f"| `engine.ingest_many`, {batch} per call | {len(texts)} documents | {seconds:.1f} | "
        f"{embedder.seconds:.1f} | {clock.seconds:.1f} | **{done / (seconds - embedder.seconds):,.0f} documents/s** | "
        f"{done / seconds:,.0f} documents/s with embedding; {_without(done, seconds, embedder, clock)} | "
        f"{done} completed |"
    )


async def measure(url: str, args: argparse.Namespace, csv_path: Path) -> None:
    local = LocalEmbedder()
    embedder = TimedEmbedder(StandInEmbedder(local))
    rng = random.Random(7)
    singles, many = notes(rng, args.docs, "single"), notes(rng, args.docs, "batch")
    async with ContextEngine(engine_config(url), embedder=embedder) as engine:
        await engine.stats(principals=TRUSTED)
        clock = VectorStoreClock()
        clock.attach(await engine.database())
        await embedder.embed(["warm up the tokenizer"])
        out(f"before: {load()}")
        out("| input | size | s | s in embedder | s storing vectors | rate without embedding time | note | outcome |")
        out("|---|---|---|---|---|---|---|---|")
        if args.csv_mb > 0:
            out(await large_document(engine, embedder, clock, csv_path, engine.config.ingest.hold_chunks))
            out(f"<!-- {load()} -->")
        out(await concurrent_singles(engine, embedder, clock, singles, args.concurrency))
        out(f"<!-- {load()} -->")
        out(await batched(engine, embedder, clock, many, args.batch))
        out(f"after: {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--csv-mb", type=float, default=22.0, help="size of the generated CSV (0: skip it)")
    parser.add_argument("--docs", type=int, default=600, help="one-chunk documents per small-document rate")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=200, help="documents per ingest_many call")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ce-rates-"))
    pgdata = None
    try:
        csv_path = work / "orders.csv"
        if args.csv_mb > 0:
            write_csv(csv_path, int(args.csv_mb * 1e6), random.Random(11))
        pgdata, url = embedded.acquire(work / "pg")
        asyncio.run(measure(url, args, csv_path))
    finally:
        if pgdata is not None:
            embedded.release(pgdata)
        embedded.remove(work)


if __name__ == "__main__":
    main()
