"""Embedding requests packed by items and by tokens, run a few at a time, paid for once.

A batch closes on whichever cap it reaches first (items per request, tokens per request) from the
provider's registered caps (:mod:`context_engine.providers.registry`), which the config can
override. A provider that refuses a batch for its size makes the run halve its item cap and retry
the pieces. Each finished batch is handed to ``on_batch``
at once (the pipeline stores it), so a failure later in the run never costs the earlier batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import ProviderError
from context_engine.ingest.fair_share import FairGate
from context_engine.providers import registry
from context_engine.providers.failures import BatchTooLarge


@dataclass(slots=True)
class Item:
    key: int  # the chunk row id
    text: str
    tokens: int


@dataclass
class RunStats:
    requests: int = 0
    embedded: int = 0
    tokens: int = 0
    halvings: int = 0
    #: the batch item cap at the end of the run (lower than asked for after halvings)
    item_cap: int = 0


class EmbeddingBatchRejected(ProviderError):
    """Even a one-item batch was refused for size: the input or the provider limit is wrong."""

    code = "provider_rejected"


def batch_limits(config: EmbeddingConfig, provider: str) -> tuple[int, int | None]:
    """The provider's registered caps (64 items for one the registry does not know), as configured."""
    registered = registry.embedding_providers().get(provider)
    items, tokens = (registered.batch_items, registered.batch_tokens) if registered else (64, None)
    if config.max_batch_items is not None:
        items = config.max_batch_items
    if config.max_batch_tokens is not None:
        tokens = config.max_batch_tokens
    if tokens is not None:
        tokens = int(tokens * config.safety_margin)  # headroom for estimated counts
    return items, tokens


def plan(items: Sequence[Item], max_items: int, max_tokens: int | None) -> list[list[Item]]:
    batches: list[list[Item]] = []
    current: list[Item] = []
    used = 0
    for item in items:
        full = len(current) >= max_items or (max_tokens is not None and current and used + item.tokens > max_tokens)
        if full:
            batches.append(current)
            current, used = [], 0
        current.append(item)
        used += item.tokens
    if current:
        batches.append(current)
    return batches


async def run(
    embedder: Embedder,
    items: Sequence[Item],
    *,
    max_items: int,
    max_tokens: int | None,
    concurrency: int,
    on_batch: Callable[[list[Item], list[list[float]]], Awaitable[None]],
    stats: RunStats | None = None,
    gate: FairGate | None = None,
    owner: str = "",
) -> RunStats:
    """Embed ``items``; ``on_batch`` stores each finished batch before the next result is awaited.

    ``stats`` accumulates across calls when given (a document embedded a page at a time). With
    ``gate``, each request first waits for ``owner``'s turn (shared fairly with other runs).
    """
    stats = stats if stats is not None else RunStats()
    queue: asyncio.Queue[list[Item]] = asyncio.Queue()
    for batch in plan(items, max_items, max_tokens):
        queue.put_nowait(batch)
    item_cap = max_items
    failure: BaseException | None = None

    async def worker() -> None:
        nonlocal item_cap, failure
        while failure is None:
            try:
                batch = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if len(batch) > item_cap:  # the cap was halved since this batch was planned
                for piece in plan(batch, item_cap, max_tokens):
                    queue.put_nowait(piece)
                continue
            try:
                stats.requests += 1
                if gate is None:
                    vectors = await embedder.embed([i.text for i in batch], kind="document")
                else:
                    async with gate.turn(owner):
                        vectors = await embedder.embed([i.text for i in batch], kind="document")
            except ProviderError as exc:
                if _is_batch_too_large(exc):
                    if len(batch) == 1:
                        failure = EmbeddingBatchRejected(
                            "the provider refused a single input for its size: either that chunk is larger "
                            "than the provider accepts or embedding.max_input_tokens is set too high"
                        )
                        return
                    item_cap = max(1, min(item_cap, len(batch)) // 2)
                    stats.halvings += 1
                    for piece in plan(batch, item_cap, max_tokens):
                        queue.put_nowait(piece)
                    continue
                failure = exc
                return
            except BaseException as exc:
                failure = exc
                return
            try:
                await on_batch(batch, vectors)
            except BaseException as exc:  # storing failed: the other workers stop at their next batch
                failure = exc
                return
            stats.embedded += len(batch)
            stats.tokens += sum(i.tokens for i in batch)

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    if failure is not None:
        raise failure
    stats.item_cap = item_cap
    return stats


def _is_batch_too_large(exc: ProviderError) -> bool:
    return isinstance(exc, BatchTooLarge)
