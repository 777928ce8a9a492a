"""Polling submitted embedding batches: each waiting job is asked once, and a finished one collected.

A job the provider finished is read as a stream and its vectors are written a page at a time, each
page one UPDATE in a short transaction that first checks, under a row lock on the document, that
the job is still the document's live one; the document is then ``completed`` as a normal ingest
would leave it. A job that ended without every vector (failed, expired, cancelled, an output that
does not cover every chunk, vectors of the wrong width, or one that cannot be read under the current
embedding settings) sends the document back to ``embedding`` with failure code ``batch_failed``:
the vectors already stored stay, and ``resume_embeddings`` (or a new ``ingest(batch=True)``)
finishes it. A provider that cannot be reached leaves the job waiting for the next poll. No
connection is held while the provider is asked or while its output is read.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.embeddings.batches import BatchHandle, BatchProgress, BatchResultInvalid
from context_engine.errors import DimensionMismatch, InvalidRequest, ProviderError
from context_engine.hooks import ProgressEvent, UsageEvent
from context_engine.ingest.batch_embedding import cancel_quietly
from context_engine.ingest.pool_share import IngestShare, share_for
from context_engine.storage import embedding_batches as store
from context_engine.storage import repository as repo

if TYPE_CHECKING:
    from context_engine.embeddings.openai_batches import OpenAIBatchClient
    from context_engine.services import Services

log = logging.getLogger("context_engine.ingest")

#: results written per UPDATE while a finished job is collected
WRITE_PAGE = 500

Outcome = Literal["pending", "completed", "failed", "superseded", "in_progress", "unreachable"]


class BatchOutcome(BaseModel):
    """What one poll did with one waiting job.

    ``pending``: still running; ``completed``: vectors stored, document complete; ``failed``: the job
    ended without every vector (the document is back in ``embedding``, code ``batch_failed``);
    ``superseded``: the document was ingested again or removed, nothing written; ``in_progress``:
    another poll holds the job; ``unreachable``: the provider could not be asked, try again later.
    """

    document_id: str
    name: str
    source_id: str
    batch_id: str
    version: int
    outcome: Outcome
    #: the provider's own word for the job's state (``in_progress``, ``expired``...), when it answered
    provider_status: str | None = None
    #: vectors stored by this poll
    stored: int = 0
    chunks: int = 0
    message: str | None = None


class _Stop(Exception):
    """The job stopped being this poll's to write (superseded or taken) while it was collected."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome)
        self.outcome = outcome


async def poll_batches(services: Services, scrub: Callable[[str], str]) -> list[BatchOutcome]:
    """Poll every waiting job once, oldest first. ``scrub`` applies the ingest redaction rules to a
    provider's message before it is stored on the document."""
    share = share_for(await services.db(), services.config.storage)
    async with share.connect() as conn:
        waiting = await store.pending_batches(conn)
    outcomes = []
    for job in waiting:
        async with share.run():
            outcomes.append(await _JobPoll(services, share, job, scrub).run())
    return outcomes


class _JobPoll:
    """One poll of one job, under a short claim on its row (``ingest.resume_stale_seconds``)."""

    def __init__(self, services: Services, share: IngestShare, job: store.PendingBatch, scrub: Callable[[str], str]):
        self.services, self.share, self.job, self.scrub = services, share, job, scrub
        self.holder = str(uuid.uuid4())
        self.seconds = float(services.config.ingest.resume_stale_seconds)
        self.stored = 0
        #: why the job stopped being this poll's to write (set when :meth:`live` says no)
        self.stopped: Outcome = "superseded"

    def outcome(self, outcome: Outcome, provider_status: str | None = None, message: str | None = None) -> BatchOutcome:
        job = self.job
        return BatchOutcome(
            document_id=job.document_id,
            name=job.name,
            source_id=job.source_id,
            batch_id=str(job.handle.get("batch_id", "")),
            version=job.version,
            outcome=outcome,
            provider_status=provider_status,
            stored=self.stored,
            chunks=job.chunk_count,
            message=message,
        )

    async def run(self) -> BatchOutcome:
        async with self.share.begin() as conn:
            if not await store.claim(conn, self.job.row_id, self.holder, self.seconds):
                return self.outcome("in_progress")
        # a transaction of its own: the check locks the document before the job, as every writer does
        async with self.share.begin() as conn:
            version = await self.live(conn)
        if version is None:
            if self.stopped == "superseded":  # a newer version or a removal: nobody will collect it
                await self.cancel()
            return self.outcome(self.stopped)
        try:
            handle = BatchHandle.from_dict(self.job.handle)
            api = self.services.embedder.batch_api()
            progress = await api.poll(handle)
        except InvalidRequest as exc:  # no batch API any more, other embedding settings, a broken handle
            return await self.fail("not_collectable", exc.message)
        except ProviderError as exc:
            return await self.unreachable(exc)
        if progress.status == "pending":
            async with self.share.begin() as conn:
                await store.release(conn, self.job.row_id, self.holder, progress.provider_status)
            return self.outcome("pending", progress.provider_status)
        if progress.status == "failed":
            reason = progress.message or f"the batch ended as {progress.provider_status}"
            return await self.fail(progress.provider_status, reason)
        return await self.collect(api, handle, progress)

    async def collect(self, api: OpenAIBatchClient, handle: BatchHandle, progress: BatchProgress) -> BatchOutcome:
        positions: list[int] = []
        vectors: list[list[float]] = []
        try:
            async for position, vector in api.vectors(handle, progress):
                positions.append(position)
                vectors.append(vector)
                if len(positions) >= WRITE_PAGE:
                    await self.write(positions, vectors, handle.embedding_key)
                    positions, vectors = [], []
            if positions:
                await self.write(positions, vectors, handle.embedding_key)
        except _Stop as stop:
            return self.outcome(stop.outcome, progress.provider_status)
        except (BatchResultInvalid, DimensionMismatch, InvalidRequest) as exc:
            return await self.fail(progress.provider_status, exc.message)
        except ProviderError as exc:  # the output could not be downloaded: the next poll reads it again
            return await self.unreachable(exc)
        return await self.finish(progress.provider_status)

    async def write(self, positions: list[int], vectors: list[list[float]], key: str) -> None:
        job = self.job
        async with self.share.begin() as conn:
            version = await self.live(conn)
            if version is not None:
                await store.store_by_position(conn, job.document_id, version, positions, vectors, key)
                await repo.set_embedding_progress(conn, job.document_id, self.progress(self.stored + len(positions)))
        if version is None:
            raise _Stop(self.stopped)
        self.stored += len(positions)
        await self.services.hooks.emit(
            "on_progress", ProgressEvent("embed", "progress", job.name, job.document_id, self.progress(self.stored))
        )

    async def live(self, conn: AsyncConnection) -> int | None:
        """The document's current version when the job may still write onto it in this transaction;
        else None, with the reason in ``stopped`` (a superseded job is closed in the same transaction,
        so the caller lets it commit)."""
        state, version = await store.live_version(
            conn, self.job.row_id, self.job.document_id, self.holder, self.seconds
        )
        if state == "live":
            return version
        if state == "superseded":
            await store.supersede(conn, self.job.row_id)
        self.stopped = "superseded" if state == "superseded" else "in_progress"
        return None

    async def cancel(self) -> None:
        """Stop the superseded job at the provider, if this embedder can still reach its batch API."""
        try:
            api = self.services.embedder.batch_api()
        except InvalidRequest:
            return  # an embedder without a batch API now: nothing to ask
        await cancel_quietly(api, [self.job.handle])

    def progress(self, done: int) -> dict[str, int]:
        """``embedding_progress``; the job's tokens count once every vector is in."""
        total = self.job.chunk_count
        return {"done": done, "total": total, "tokens": self.job.tokens if done >= total else 0}

    async def finish(self, provider_status: str) -> BatchOutcome:
        job = self.job
        async with self.share.begin() as conn:
            version = await self.live(conn)
            if version is not None:
                missing = await store.missing_vectors(conn, job.document_id, version)
                if missing == 0:
                    await store.finish(conn, job.row_id, job.document_id, provider_status, self.progress(self.stored))
        if version is None:
            return self.outcome(self.stopped, provider_status)
        if missing:
            return await self.fail(
                provider_status, f"{missing} of {job.chunk_count} chunks have no vector after the batch"
            )
        await self.services.hooks.emit(
            "on_progress", ProgressEvent("embed", "done", job.name, job.document_id, self.progress(self.stored))
        )
        await self.services.hooks.emit(
            "on_usage",
            UsageEvent(
                "ingest",
                units=job.chunk_count,
                document_id=job.document_id,
                detail={
                    "mode": "hybrid",
                    "mode_reason": None,
                    "chunks": job.chunk_count,
                    "embedded": self.stored,
                    "reused": 0,
                    "requests": 1,
                    "tokens": job.tokens,
                    "halvings": 0,
                    "batch_id": job.handle.get("batch_id"),
                },
            ),
        )
        log.info(
            "batch: document=%s chunks=%d completed by %s", job.document_id, self.stored, job.handle.get("batch_id")
        )
        return self.outcome("completed", provider_status)

    async def fail(self, provider_status: str, message: str) -> BatchOutcome:
        job = self.job
        message = self.scrub(message)
        async with self.share.begin() as conn:
            version = await self.live(conn)
            if version is not None:
                await store.fail(
                    conn,
                    job.row_id,
                    job.document_id,
                    provider_status=provider_status,
                    message=message,
                    progress=self.progress(self.stored),
                )
        if version is None:
            return self.outcome(self.stopped, provider_status)
        log.warning("batch: document=%s batch %s failed: %s", job.document_id, job.handle.get("batch_id"), message)
        return self.outcome("failed", provider_status, message)

    async def unreachable(self, exc: ProviderError) -> BatchOutcome:
        async with self.share.begin() as conn:
            await store.release(conn, self.job.row_id, self.holder, None)
        return self.outcome("unreachable", message=self.scrub(exc.message))
