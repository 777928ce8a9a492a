"""Compute and map_reduce benchmark: a total over a 100,000-row stored sheet, and 25 concurrent map calls.

Starts the embedded PostgreSQL in a temporary directory and a scripted OpenAI-compatible model on
127.0.0.1 (this process), then through the real ``ContextEngine``:

1. ingests a generated 100,000-row CSV (a stand-in embedder with hashed vectors, so the run measures
   compute rather than the embedding model), asks ``compute`` for the total of its amount column,
   checks the answer against the exact decimal sum, and prints the time to rebuild the frame from
   the stored chunks, the worker's wall-clock time (process start, frame transfer and the code) and
   the code's CPU time inside the worker;
2. ingests 25 short contracts and runs ``map_reduce`` over them with the model answering each call
   after a fixed delay, printing the elapsed time against the sequential sum of delays, the most
   calls in flight at once, and the cost reported in ``usage``.

    .venv/bin/python benchmarks/compute/run.py                 # about two minutes (mostly the ingest)
    .venv/bin/python benchmarks/compute/run.py --rows 20000    # smaller sheet

Tables go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy.ext.asyncio import create_async_engine

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.compute import ComputeConfig, load_stored_frames
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.storage import embedded
from context_engine.storage.database import to_driver_url
from tests.fakes import FakeHTTPServer

DIM = 384
MAP_DELAY = 0.2
CODE = "result = round(float(dfs['sales']['amount'].sum()), 2)"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class HashedEmbedder(Embedder):
    """Deterministic vectors from a hash: the pipeline's own cost without a model's."""

    provider, model, dim, max_input_tokens = "stand-in", "hashed", DIM, 100_000

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
            rng = random.Random(seed)
            out.append([rng.uniform(-1, 1) for _ in range(DIM)])
        return out


class ScriptedModel:
    """Codegen replies for compute, slow JSON answers for map_reduce; counts calls in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def __call__(self, body: Any, _h: dict[str, str], _t: Any) -> Any:
        fmt = body.get("response_format") or {}
        usage = {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100}
        if fmt.get("type") == "json_schema" and fmt["json_schema"]["name"] == "compute_code":
            content = json.dumps({"code": CODE})
        else:
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            time.sleep(MAP_DELAY)
            with self.lock:
                self.now -= 1
            content = json.dumps({"answer": "auto-renews" in body["messages"][-1]["content"]})
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        return 200, {}, {"id": "x", "object": "chat.completion", "choices": [choice], "usage": usage}


def sheet(rows: int) -> tuple[bytes, Decimal]:
    rng = random.Random(7)
    lines = ["id,region,amount,owner"]
    total = Decimal(0)
    for i in range(1, rows + 1):
        amount = Decimal(rng.randint(1, 10_000_000)) / 100
        total += amount
        lines.append(f"{i},{rng.choice(['north', 'south', 'east', 'west'])},{amount},owner{i % 97}")
    return ("\r\n".join(lines) + "\r\n").encode(), total


async def run(rows: int, database_url: str) -> None:
    model = ScriptedModel()
    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", model)
        llm = {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "max_retries": 0, "timeout": 30}
        config = ContextEngineConfig(database_url=database_url, storage={"auto_migrate": True}, llm=llm)
        async with ContextEngine(config, embedder=HashedEmbedder()) as engine:
            data, expected = sheet(rows)
            log(f"ingesting a {rows:,}-row CSV ({len(data) / 1e6:.1f} MB) ...")
            started = time.perf_counter()
            report = await engine.ingest(file=data, name="sales.csv", source_id="fin")
            ingest_s = time.perf_counter() - started
            chunks = report.totals["chunks"]

            started = time.perf_counter()
            trusted = SimpleNamespace(principals=None, source_ids=None, document_ids=None)
            pool = create_async_engine(to_driver_url(database_url))
            try:
                stored = await load_stored_frames(pool, trusted, max_documents=20)
            finally:
                await pool.dispose()
            load_s = time.perf_counter() - started
            assert len(stored.frames["sales"]) == rows

            log("compute ...")
            settings = ComputeConfig(enable_code_execution=True, cpu_seconds=30, wall_seconds=120, memory_mb=2048)
            started = time.perf_counter()
            out = await engine.compute("What is the total amount?", principals=TRUSTED, settings=settings)
            compute_s = time.perf_counter() - started
            exact = out["success"] and out["result"] == float(expected)

            log("map_reduce over 25 documents ...")
            for i in range(25):
                clause = "This agreement auto-renews yearly." if i % 3 == 0 else "This agreement ends in 2026."
                await engine.ingest(text=f"Contract {i}. {clause}", name=f"c{i:02d}.md", source_id="legal")
            started = time.perf_counter()
            mapped = await engine.map_reduce("Does it auto-renew?", principals=TRUSTED, source_ids=["legal"])
            map_s = time.perf_counter() - started

    print(f"\n## compute over a {rows:,}-row stored sheet\n")
    print("| measure | value |\n|---|---:|")
    print(f"| ingest (stand-in embedder), {chunks:,} chunks | {ingest_s:.2f} s |")
    print(f"| rebuild the frame from stored chunks | {load_s:.2f} s |")
    print(f"| worker wall-clock (start, frame transfer, code) | {out['execution_time']:.2f} s |")
    print(f"| code CPU time inside the worker | {out['cpu_time']:.4f} s |")
    print(f"| compute call end to end (frames, model, worker) | {compute_s:.2f} s |")
    print(f"| answer | {out['result']} |")
    print(f"| exact decimal total | {expected} |")
    print(f"| exact | {'yes' if exact else 'NO'} |")
    usage = mapped["usage"]
    print("\n## map_reduce over 25 documents\n")
    print("| measure | value |\n|---|---:|")
    print(f"| model delay per call | {MAP_DELAY:.2f} s |")
    print(f"| elapsed | {map_s:.2f} s (sequential sum of delays: {25 * MAP_DELAY:.1f} s) |")
    print(f"| calls in flight at once (server / usage) | {model.peak} / {usage['max_in_flight']} |")
    print(f"| concurrency bound | {usage['concurrency']} |")
    print(f"| processed / failed / considered | {mapped['processed']} / {mapped['failed']} / {mapped['considered']} |")
    print(f"| usage.llm_calls, provider_tokens | {usage['llm_calls']}, {usage['provider_tokens']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ce-bench-compute-"))
    pgdata, url = embedded.acquire(base)
    try:
        asyncio.run(run(args.rows, url))
    finally:
        embedded.release(pgdata)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
