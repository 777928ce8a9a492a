"""``ingest(batch=True)``: a stored document's whole chunk set submitted as one provider batch job.

The document is extracted, chunked and stored as any ingest does; then every chunk row of the new
version goes to the provider's batch API, input ``i`` being the chunk at position ``i`` (so a job
always covers the whole chunk set, and a chunk whose vector was reused from the previous version
is embedded again). The texts are read back from the database a page at a time and staged by the
provider client, never all held, and no connection is held while the provider is called. Once
the job exists the document is ``batch_pending``: it holds no lease, the text legs read it, and
:mod:`context_engine.ingest.batch_poll` completes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from context_engine.embeddings.batches import BatchHandle
from context_engine.errors import ContextEngineError
from context_engine.ingest.pool_share import IngestShare
from context_engine.models import DocumentReport
from context_engine.storage import embedding_batches as store

if TYPE_CHECKING:
    from context_engine.embeddings.openai_batches import OpenAIBatchClient
    from context_engine.services import Services

log = logging.getLogger("context_engine.ingest")


def batch_client(services: Services, chunk_count: int | None = None) -> OpenAIBatchClient:
    """The configured embedder's batch API, refusing (``batch_unsupported``, naming
    ``embedding.provider``) a provider without one, or a chunk count one job cannot hold."""
    api = services.embedder.batch_api()
    if chunk_count is not None:
        api.check_count(chunk_count)
    return api


async def submit(services: Services, share: IngestShare, report: DocumentReport, holder: str) -> DocumentReport:
    """Submit the stored version in ``report`` while the run (``holder``) leases it; the report says
    ``batch_pending``, or ``skipped`` when another run took the document over meanwhile."""
    doc_id, version = report.document_id, report.version
    if doc_id is None or version is None:
        raise ValueError("submit needs a stored document version")
    embedder = services.embedder
    api = batch_client(services, report.chunks)
    page_size = services.config.ingest.hold_chunks
    counted = {"tokens": 0}

    async def pages() -> AsyncIterator[Sequence[str]]:
        after = -1
        while True:
            async with share.connect() as conn:
                page = await store.chunk_texts(conn, doc_id, version, after=after, limit=page_size)
            if not page:
                return
            if [p for p, _ in page] != list(range(after + 1, after + 1 + len(page))):
                raise ContextEngineError(
                    "the stored chunk positions have a gap, so a batch could not be paired with them",
                    code="chunk_set_changed",
                )
            after = page[-1][0]
            texts = [t for _, t in page]
            # counting tokens is CPU work (a tokenizer pass per chunk): off the event loop
            counted["tokens"] += await asyncio.to_thread(_count_tokens, embedder.count_tokens, texts)
            yield texts

    handle = await api.submit_pages(pages(), report.chunks)
    async with share.begin() as conn:
        superseded = await store.mark_pending(
            conn, doc_id, holder, handle=handle, version=version, tokens=counted["tokens"]
        )
    if superseded is None:
        log.warning(
            "document %s was taken over by another run while batch %s was submitted; the job is not used",
            doc_id,
            handle.batch_id,
        )
        await cancel_quietly(api, [handle])
        return report.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
    await cancel_quietly(api, superseded)
    log.info("batch: document=%s chunks=%d submitted as %s", doc_id, handle.count, handle.batch_id)
    return report.model_copy(
        update={"status": "batch_pending", "failure_reason": None, "failure_message": None, "error": None}
    )


async def cancel_quietly(api: OpenAIBatchClient, handles: Sequence[BatchHandle | dict[str, Any]]) -> None:
    """Ask the provider to stop jobs nobody will collect, so the rest of their inputs are not billed.
    Best effort: a job that already ended, or a provider out of reach, leaves a line in the log; a job
    of another provider than the configured one is left alone."""
    for stored in handles:
        try:
            handle = stored if isinstance(stored, BatchHandle) else BatchHandle.from_dict(stored)
            if handle.provider != api.provider:
                continue
            await api.cancel(handle)
        except ContextEngineError as exc:
            log.warning("a superseded batch job could not be cancelled at the provider (%s)", exc.code)
        else:
            log.info("batch %s cancelled at the provider: nothing will collect it", handle.batch_id)


def _count_tokens(count: Callable[[str], int], texts: Sequence[str]) -> int:
    return sum(count(t) for t in texts)
