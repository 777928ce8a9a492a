"""Search latency in one process while it ingests a large document: idle against during the ingest.

Seeds a small corpus, then measures ``engine.search`` from a few concurrent searchers: for a
fixed time with nothing else running (idle), and for as long as one large generated Markdown
document (10 MB by default) is being ingested by the same engine (during). Prints p50/p95/max per
phase and the ingest's own figures, then measures idle again once the document is in (the corpus
is larger then, so "after" against "during" is the ingest's own cost to searches). The searchers
pause briefly between searches, as clients do.

The default embedder is a stand-in (hashed vectors computed on a worker thread, token counts
estimated from bytes) so that a 10 MB document takes minutes, not the hour the local model would;
``--embedder local`` uses the local model for both the ingest and the query embeddings (use a
smaller ``--megabytes`` with it).

    .venv/bin/python benchmarks/load/fairness.py                      # 10 MB, stand-in embedder
    .venv/bin/python benchmarks/load/fairness.py --megabytes 1 --embedder local

Starts the embedded PostgreSQL in a temporary directory unless ``--database-url`` is given (an
empty database: the run creates its own documents). Tables go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.storage import embedded

DIM = 384
WORDS = (
    "harbour crane berth cargo manifest customs ledger invoice pallet container vessel pilot tide "
    "schedule inspection permit tariff freight warehouse forklift quay dredging ballast hull anchor "
    "the a of to and in is for on with as by at from that this be are was it or an which their"
).split()
QUERIES = [
    "crane inspection schedule",
    "customs tariff on freight",
    "ballast and hull permit",
    "warehouse forklift ledger",
    "pilot tide berth",
]


class StandInEmbedder(Embedder):
    """Hashed unit vectors computed on a worker thread: a provider whose work is off the event loop."""

    provider = "local"  # batched as the local model is
    model = "stand-in-hash"
    dim = DIM
    #: above the 256-token chunk budget: byte-estimated counts of a packed chunk can land a token or two over it
    max_input_tokens = 512

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        return await asyncio.to_thread(_hashed, texts)


def _hashed(texts: list[str]) -> list[list[float]]:
    out = np.empty((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
        vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        out[i] = vector / np.linalg.norm(vector)
    return out.tolist()  # type: ignore[no-any-return]


def paragraph(rng: random.Random, words: int) -> str:
    """About ``words`` words in sentences of 8-16."""
    sentences = []
    while words > 0:
        n = min(words, rng.randint(8, 16))
        sentences.append(" ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + ".")
        words -= n
    return " ".join(sentences)


def large_document(megabytes: float, seed: int = 7) -> str:
    """Markdown of about ``megabytes`` MB: headed sections of a few paragraphs each."""
    rng = random.Random(seed)
    target = int(megabytes * 1024 * 1024)
    parts: list[str] = []
    size = 0
    section = 0
    while size < target:
        block = f"## Section {section}\n\n" + "\n\n".join(paragraph(rng, rng.randint(30, 90)) for _ in range(3))
        parts.append(block)
        size += len(block) + 2
        section += 1
    return "\n\n".join(parts)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def search_loop(engine: ContextEngine, done: asyncio.Event, latencies: list[float], pause: float) -> None:
    rng = random.Random(len(latencies))
    while not done.is_set():
        started = time.perf_counter()
        await engine.search(rng.choice(QUERIES), principals=TRUSTED, top_k=10)
        latencies.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(pause)


async def phase(engine: ContextEngine, searchers: int, pause: float, until: asyncio.Future[object]) -> list[float]:
    """Search from ``searchers`` clients until ``until`` resolves; the latencies in ms."""
    done = asyncio.Event()
    latencies: list[float] = []
    tasks = [asyncio.create_task(search_loop(engine, done, latencies, pause)) for _ in range(searchers)]
    try:
        await until
    finally:
        done.set()
        await asyncio.gather(*tasks)
    return latencies


async def run(args: argparse.Namespace, url: str) -> None:
    config = ContextEngineConfig(database_url=url, storage={"auto_migrate": True})  # type: ignore[arg-type]
    embedder = StandInEmbedder() if args.embedder == "stand-in" else None
    async with ContextEngine(config, embedder=embedder) as engine:
        rng = random.Random(1)
        print(f"seeding {args.seed_documents} documents ...", file=sys.stderr)
        for i in range(args.seed_documents):
            body = "\n\n".join(paragraph(rng, 60) for _ in range(3))
            await engine.ingest(text=body, name=f"seed-{i}")
        await engine.search("warm up", principals=TRUSTED)

        print(f"idle: {args.searchers} searchers for {args.idle_seconds} s ...", file=sys.stderr)
        idle = await phase(engine, args.searchers, args.pause, asyncio.ensure_future(asyncio.sleep(args.idle_seconds)))

        text = large_document(args.megabytes)
        print(f"during: ingesting {len(text) / 1e6:.1f} MB ...", file=sys.stderr)
        started = time.perf_counter()
        ingest = asyncio.ensure_future(engine.ingest(text=text, name="large-document"))
        during = await phase(engine, args.searchers, args.pause, ingest)
        seconds = time.perf_counter() - started
        report = ingest.result().documents[0]

        # the corpus now holds the large document too: idle again, to tell its size from the ingest's load
        print(f"after: {args.searchers} searchers for {args.idle_seconds} s ...", file=sys.stderr)
        after = await phase(engine, args.searchers, args.pause, asyncio.ensure_future(asyncio.sleep(args.idle_seconds)))

    print(
        f"\nSearch latency, {args.searchers} concurrent searchers ({args.pause * 1000:.0f} ms pause), embedder "
        f"{args.embedder}, {args.seed_documents} seed documents\n"
    )
    print("| phase | searches | p50 ms | p95 ms | max ms | mean ms |")
    print("|---|---:|---:|---:|---:|---:|")
    phases = (
        ("idle, before", idle),
        (f"during the {len(text) / 1e6:.1f} MB ingest", during),
        ("idle, after (the large document searchable)", after),
    )
    for label, values in phases:
        print(
            f"| {label} | {len(values)} | {percentile(values, 0.5):.1f} | {percentile(values, 0.95):.1f} | "
            f"{max(values):.1f} | {statistics.fmean(values):.1f} |"
        )
    if report.status != "completed":
        print(f"the ingest did not complete: {report.failure_reason}: {report.error}", file=sys.stderr)
    print(
        f"\nIngest: status {report.status}, {report.chunks} chunks in {seconds:.1f} s "
        f"({report.chunks / seconds:.0f} chunks/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=10.0)
    parser.add_argument("--embedder", choices=["stand-in", "local"], default="stand-in")
    parser.add_argument("--searchers", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.1, help="seconds each searcher waits between searches")
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--seed-documents", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    if args.database_url:
        asyncio.run(run(args, args.database_url))
        return
    base = Path(tempfile.mkdtemp(prefix="ce-fairness-"))
    pgdata, url = embedded.acquire(base)
    try:
        asyncio.run(run(args, url))
    finally:
        embedded.release(pgdata)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
