"""Throughput of the local numpy embedder on chunk-sized texts.

Run: ``python benchmarks/embed_local.py [--chunks 200] [--tokens 200] [--threads 1 2]``.
Prints chunks/s and tokens/s per thread count, so a change to the forward pass can be judged
against the previous figure on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.local import LocalEmbedder

_WORDS = (
    "postgres index vector search query planner table row column permission tenant document chunk "
    "embedding retrieval ranking fusion lexical trigram semantic cosine distance latency throughput "
    "the a of to and in is for on with as by at from that this be are was it or an which their "
    "database transaction replica backup schema migration pipeline ingest extract section heading"
).split()


def make_texts(count: int, tokens: int, seed: int = 7) -> list[str]:
    """Deterministic English-like texts; the word list is mostly single word pieces."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = [rng.choice(_WORDS) for _ in range(tokens)]
        texts.append(" ".join(words) + ".")
    return texts


async def run(chunks: int, tokens: int, threads: int, rounds: int) -> None:
    embedder = LocalEmbedder(EmbeddingConfig(local_threads=threads))
    texts = make_texts(chunks, tokens)
    # trim each text to the target size (and under the cap), so every chunk is a valid document
    limit = min(tokens, embedder.max_input_tokens)
    sizes = []
    for i, text in enumerate(texts):
        while embedder.count_tokens(text) > limit:
            text = text.rsplit(" ", 1)[0]
        texts[i] = text
        sizes.append(embedder.count_tokens(text))
    total_tokens = sum(sizes)
    started = time.perf_counter()
    await embedder.embed(texts[:2])  # load weights outside the timing
    load_s = time.perf_counter() - started
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        await embedder.embed(texts)
        best = min(best, time.perf_counter() - t0)
    await embedder.aclose()
    print(
        f"threads={threads} chunks={chunks} mean_tokens={total_tokens / chunks:.0f} "
        f"load={load_s:.2f}s best={best:.2f}s -> {chunks / best:.1f} chunks/s, "
        f"{total_tokens / best:.0f} tokens/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=200, help="approximate tokens per chunk")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for threads in args.threads:
        asyncio.run(run(args.chunks, args.tokens, threads, args.rounds))


if __name__ == "__main__":
    main()
