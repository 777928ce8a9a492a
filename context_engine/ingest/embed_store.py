"""Embed and store: the one path by which single, many and bulk ingest turn chunks into vectors.

:class:`Embedding` is a run's requests to the model (the provider's caps from the config, the
configured concurrency, fair turns across runs); every ingest path embeds through it and hands each
finished batch to its own store. Single and many ingest store into :class:`LeasedStore`, which
keeps each document's progress and lease and completes a document with its last vector; a bulk load
keeps the vectors in memory for its ``COPY``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from context_engine.errors import ContextEngineError
from context_engine.ingest import batching, fair_share
from context_engine.ingest.pool_share import IngestShare
from context_engine.models import FAILURE_MESSAGES, DocumentReport
from context_engine.storage import repository as repo

if TYPE_CHECKING:
    from context_engine.services import Services

log = logging.getLogger("context_engine.ingest")

#: what receives each embedded batch: its items and their vectors, in the same order
OnBatch = Callable[[list[batching.Item], list[list[float]]], Awaitable[None]]


class Embedding:
    """One run's embedding requests. ``owner`` names the run for the embedder's fair turns
    (:mod:`context_engine.ingest.fair_share`); ``None`` asks without taking turns (a bulk load).
    ``stats`` add up over every :meth:`run`, and an item cap halved by the provider holds for the
    rest of the run (a document embedded a page at a time)."""

    def __init__(self, services: Services, *, owner: str | None):
        self.embedder = services.embedder
        self.config = services.config.embedding
        max_items, self.max_tokens = batching.batch_limits(self.config, self.embedder.provider)
        self.stats = batching.RunStats(item_cap=max_items)
        self.owner = owner
        self.gate = fair_share.gate_for(self.embedder, self.config.max_inflight) if owner is not None else None

    async def run(self, items: Sequence[batching.Item], on_batch: OnBatch) -> None:
        """Embed ``items``; ``on_batch`` stores each finished batch (a failure stops the run)."""
        await batching.run(
            self.embedder,
            items,
            max_items=self.stats.item_cap,
            max_tokens=self.max_tokens,
            concurrency=self.config.max_concurrency,
            on_batch=on_batch,
            stats=self.stats,
            gate=self.gate,
            owner=self.owner or "",
        )


def items_of(
    rows: list[tuple[int, int, str | None]], texts: list[str] | None, count_tokens: Callable[[str], int]
) -> list[batching.Item]:
    """The embedding inputs of ``(chunk id, position, stored text)`` rows: the texts (held, by
    position, or as read) and their token counts."""
    items = []
    for cid, position, stored in rows:
        chunk_text = texts[position] if texts is not None else stored
        assert chunk_text is not None
        items.append(batching.Item(cid, chunk_text, count_tokens(chunk_text)))
    return items


class LeaseLost(Exception):
    """Another run took documents over (this one lost its lock): it stops storing them."""

    def __init__(self, documents: set[str]):
        super().__init__(f"{len(documents)} documents were taken over")
        self.documents = documents


class LeasedStore:
    """Where a run's vectors land, batch by batch, while the run (``holder``) leases its documents.

    A batch is one transaction: the lease of every document it touches is renewed (a document no
    longer the run's stops the run: :class:`LeaseLost`), its vectors are stored, each document's
    progress is recorded, and a document whose last vector it carries is completed. Batches are
    stored one at a time: requests to the model may overlap, but a run never takes more than one
    database backend from searches (each vector is an index insert). Counts are kept only once the
    transaction committed. ``progress`` is each document's ``{"done", "total", "tokens"}``, its
    reused and earlier-stored chunks counted done; ``document_of`` names a chunk id's document.
    """

    def __init__(
        self,
        share: IngestShare,
        *,
        embedding_key: str,
        holder: str,
        lease_seconds: float,
        progress: dict[str, dict[str, int]],
        document_of: Callable[[int], str],
    ):
        self.share = share
        self.embedding_key = embedding_key
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.progress = progress
        self.document_of = document_of
        #: documents not completed yet, and those another run took over
        self.open = set(progress)
        self.lost: set[str] = set()
        self._storing = asyncio.Lock()

    async def store(self, batch: list[batching.Item], vectors: list[list[float]]) -> None:
        async with self._storing:
            after: dict[str, dict[str, int]] = {}
            for item in batch:
                doc_id = self.document_of(item.key)
                progress = after.setdefault(doc_id, dict(self.progress[doc_id]))
                progress["done"] += 1
                progress["tokens"] += item.tokens
            done = {d: p for d, p in after.items() if p["done"] >= p["total"]}
            moving = {d: p for d, p in after.items() if d not in done}
            async with self.share.begin() as conn:
                held = await repo.renew_leases(conn, list(after), self.holder, self.lease_seconds)
                if held != set(after):
                    raise self._lose(set(after) - held)
                await repo.store_vectors(conn, [i.key for i in batch], vectors, self.embedding_key)
                await repo.set_progress_many(conn, moving)
                finished = await repo.finish_many(conn, done, self.holder)
                if finished != set(done):
                    raise self._lose(set(done) - finished)
            self.progress.update(after)
            self.open.difference_update(done)

    async def finish_open(self) -> None:
        """Complete the documents no batch completed (nothing of them was pending, or a resume
        found no rows left)."""
        if not self.open:
            return
        rest = {d: self.progress[d] for d in self.open}
        async with self.share.begin() as conn:
            finished = await repo.finish_many(conn, rest, self.holder)
        self.open.difference_update(finished)
        if finished != set(rest):
            raise self._lose(set(rest) - finished)

    async def fail(self, reason: str, error: str) -> None:
        """The run stops with vectors missing: each open document records why and lets go of its
        lease, so a resume may start at once."""
        if not self.open:
            return
        async with self.share.begin() as conn:
            await repo.fail_many(
                conn,
                {d: self.progress[d] for d in self.open},
                holder=self.holder,
                failure_reason=reason,
                error=error,
            )

    async def let_go(self) -> None:
        """A cancelled run clears its fencing token on the open documents, which stay resumable.
        Best effort: the session lock is what counts."""
        try:
            async with self.share.begin() as conn:
                for doc_id in self.open:
                    await repo.let_go(conn, doc_id, self.holder)
        except Exception as exc:
            log.warning("could not clear the run of %d documents: %s", len(self.open), type(exc).__name__)

    def _lose(self, documents: set[str]) -> LeaseLost:
        self.lost |= documents
        self.open -= documents
        return LeaseLost(documents)


def failure_reason(exc: Exception) -> str:
    """What a failed embedding records: an error of ours names its code, anything else is ``unknown``."""
    if isinstance(exc, ContextEngineError) and exc.code in FAILURE_MESSAGES:
        return exc.code
    return "unknown"


def embedding_failed(report: DocumentReport, reason: str, error: str) -> DocumentReport:
    """The report of a document left in ``embedding`` (resumable) saying why."""
    return report.model_copy(
        update={
            "status": "embedding",
            "failure_reason": reason,
            "failure_message": FAILURE_MESSAGES[reason],
            "error": error,
        }
    )
