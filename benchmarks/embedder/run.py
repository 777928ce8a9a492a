"""Local embedder throughput and query latency: the numpy, ONNX Runtime and OpenVINO forward passes, interleaved.

Run from the repository root::

    python benchmarks/embedder/run.py                              # synthetic ~200-token chunks
    python benchmarks/embedder/run.py --data PATH/TO/beir/scifact  # SciFact abstracts as chunks
    python benchmarks/embedder/run.py --backends numpy onnxruntime openvino   # with the openvino extra

Every backend embeds the *same* batch in alternating rounds in one process, so a busy machine slows
all alike and the ratio of each one's chunks/s to the first backend's is the figure to compare (each
round's ratio is printed; the summary is the median). Then each backend's vectors are compared per
chunk with the first's, over the batch and over short and odd chunks of 2-256 word pieces. Query
latency embeds one short query at a time, alternating backends.
Chunks per CPU-second (process time) is printed beside each wall-clock rate: it says how much work
each backend gets out of the CPU it was given, which the machine's load moves far less. It prints
the load average before and after, the BLAS kernel numpy runs (threadpoolctl) and the
OPENBLAS_* variables in force, since those change the numpy figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.local import LocalEmbedder

_WORDS = (
    "postgres index vector search query planner table row column permission tenant document chunk "
    "embedding retrieval ranking fusion lexical trigram semantic cosine distance latency throughput "
    "the a of to and in is for on with as by at from that this be are was it or an which their "
    "database transaction replica backup schema migration pipeline ingest extract section heading"
).split()


def synthetic_texts(count: int, words: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(words)) + "." for _ in range(count)]


def scifact_texts(data: Path, count: int) -> list[str]:
    texts: list[str] = []
    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(f"{row['title']}\n{row['text']}")
            if len(texts) >= count:
                break
    return texts


def scifact_queries(data: Path, count: int) -> list[str]:
    with gzip.open(data / "queries.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(count), f, strict=False)]


def fit_to_cap(embedder: LocalEmbedder, texts: list[str]) -> list[str]:
    """Trim each text word by word until it is a valid document (at most the token cap)."""
    fitted = []
    for text in texts:
        words = text.split()
        while embedder.count_tokens(" ".join(words)) > embedder.max_input_tokens:
            words = words[: max(1, int(len(words) * 0.9))]
        fitted.append(" ".join(words))
    return fitted


def blas_description() -> str:
    from threadpoolctl import threadpool_info

    parts = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in threadpool_info()]
    env = {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")}
    return f"BLAS: {'; '.join(parts) or 'none'}; OPENBLAS_* env: {env or 'unset'}"


def mixed_texts(texts: list[str]) -> list[str]:
    """Short and odd chunks (2-256 word pieces): prefixes of the batch's texts, code, symbols."""
    words = " ".join(texts).split()
    mixed = [" ".join(words[start : start + size]) for size in (1, 3, 8, 20, 45, 100, 160) for start in (0, 57, 131)]
    return [*mixed, "SELECT * FROM ce_chunks WHERE id = 42;", "Ünïcödé — 東京 — 😀", "  ", "a " * 254]


async def compare_vectors(embedders: dict[str, LocalEmbedder], texts: list[str], mixed: list[str]) -> None:
    """Worst and mean cosine per chunk of each backend against the first, over the batch and mixed chunks."""
    names = list(embedders)
    for label, batch in (("batch", texts), ("short/odd", mixed)):
        want = np.asarray(await embedders[names[0]].embed(batch), dtype=np.float64)
        for name in names[1:]:
            got = np.asarray(await embedders[name].embed(batch), dtype=np.float64)
            cosines = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
            print(
                f"  vectors {name} vs {names[0]} over {len(batch)} {label} chunks: worst cosine "
                f"{cosines.min():.6f}, mean {cosines.mean():.6f}, "
                f"max component difference {np.abs(got - want).max():.1e}"
            )


async def main_async(args: argparse.Namespace) -> None:
    backends = args.backends
    process = psutil.Process()
    embedders: dict[str, LocalEmbedder] = {}
    for name in backends:
        before = process.memory_info().rss
        embedder = LocalEmbedder(EmbeddingConfig(local_threads=args.threads, local_backend=name))
        started = time.perf_counter()
        await embedder.embed(["warm up"])
        print(
            f"{name}: loaded in {time.perf_counter() - started:.2f} s, "
            f"resident +{(process.memory_info().rss - before) / 2**20:.0f} MiB"
        )
        embedders[name] = embedder

    probe = embedders[backends[0]]
    if args.data:
        texts = fit_to_cap(probe, scifact_texts(Path(args.data), args.chunks))
        queries = scifact_queries(Path(args.data), args.queries)
    else:
        texts = fit_to_cap(probe, synthetic_texts(args.chunks, args.words))
        queries = [" ".join(random.Random(i).sample(_WORDS, 6)) for i in range(args.queries)]
    tokens = sum(probe.count_tokens(t) for t in texts)
    print(
        f"batch: {len(texts)} chunks, {tokens / len(texts):.0f} tokens mean; threads={args.threads}; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()}"
    )
    print(blas_description())

    rates: dict[str, list[float]] = {name: [] for name in backends}
    cpu_rates: dict[str, list[float]] = {name: [] for name in backends}
    for round_no in range(args.rounds):
        order = backends if round_no % 2 == 0 else list(reversed(backends))
        line = []
        for name in order:
            t0, c0 = time.perf_counter(), time.process_time()
            await embedders[name].embed(texts)
            rate = len(texts) / (time.perf_counter() - t0)
            rates[name].append(rate)
            cpu_rates[name].append(len(texts) / (time.process_time() - c0))
            line.append(f"{name} {rate:.1f} chunks/s ({cpu_rates[name][-1]:.1f} per CPU-s)")
        ratio = "".join(
            f"  {name}/{backends[0]} {rates[name][-1] / rates[backends[0]][-1]:.2f}x" for name in backends[1:]
        )
        print(f"round {round_no + 1}: " + ", ".join(line) + ratio + f"  (load {os.getloadavg()[0]:.1f})")

    latencies: dict[str, list[float]] = {name: [] for name in backends}
    for query in queries:
        for name in backends:
            t0 = time.perf_counter()
            await embedders[name].embed([query], kind="query")
            latencies[name].append((time.perf_counter() - t0) * 1000)

    print("\nsummary (median over rounds; query latency over", len(queries), "queries, one at a time)")
    for name in backends:
        lat = sorted(latencies[name])
        p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
        print(
            f"  {name:12s} {statistics.median(rates[name]):7.1f} chunks/s  "
            f"{statistics.median(rates[name]) * tokens / len(texts):7.0f} tokens/s  "
            f"{statistics.median(cpu_rates[name]):6.1f} chunks per CPU-second  "
            f"query p50 {statistics.median(lat):6.1f} ms  p95 {p95:6.1f} ms"
        )
    for name in backends[1:]:
        ratios = [b / a for a, b in zip(rates[backends[0]], rates[name], strict=True)]
        cpu_ratios = [b / a for a, b in zip(cpu_rates[backends[0]], cpu_rates[name], strict=True)]
        print(
            f"  {name} / {backends[0]}: median round ratio {statistics.median(ratios):.2f}x "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}); per CPU-second "
            f"{statistics.median(cpu_ratios):.2f}x (min {min(cpu_ratios):.2f}, max {max(cpu_ratios):.2f})"
        )
    await compare_vectors(embedders, texts, fit_to_cap(probe, mixed_texts(texts)))
    print(f"load average at the end {os.getloadavg()}")
    for embedder in embedders.values():
        await embedder.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="a BEIR dataset directory (corpus.jsonl.gz, queries.jsonl.gz)")
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--words", type=int, default=200, help="words per synthetic chunk")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2, help="embedding.local_threads")
    parser.add_argument("--backends", nargs="+", default=["numpy", "onnxruntime"])
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
