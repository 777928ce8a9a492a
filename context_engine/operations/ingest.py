"""Ingesting one document, loading many new ones in bulk, and finishing embeddings later (resume,
provider batches); the steps a stored document may take after (its fields, its graph facts)."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import IO, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ContextEngineError, InvalidRequest
from context_engine.hooks import holding_ingest_usage
from context_engine.ingest.batch_embedding import batch_client
from context_engine.ingest.batch_poll import BatchOutcome, poll_batches
from context_engine.ingest.bulk import BulkLoader, BulkReport
from context_engine.ingest.pipeline import open_source
from context_engine.models import DocumentReport, IngestReport
from context_engine.operations.context import EngineContext
from context_engine.operations.graph import check_graph_ingest, graph_step
from context_engine.operations.ingest_checks import check_filing, check_source_and_name, default_mime
from context_engine.operations.model_actions import extract_fields
from context_engine.principals import TRUSTED, Principals, resolve
from context_engine.revisions import idempotency, keyed
from context_engine.validation import check_document_id

log = logging.getLogger("context_engine")

FileInput = bytes | str | os.PathLike[str] | IO[bytes]


async def ingest(
    ctx: EngineContext,
    *,
    text: str | None = None,
    file: FileInput | None = None,
    name: str | None = None,
    source_id: str = "default",
    acl: Sequence[str] | None = None,
    attributes: dict[str, Any] | None = None,
    mime: str | None = None,
    principals: Principals = TRUSTED,
    mode: str = "hybrid",
    idempotency_key: str | None = None,
    batch: bool = False,
) -> IngestReport:
    """Ingest one document. A bad document becomes a ``failed`` report, never an exception.

    ``mode="graph"`` also extracts the document's entities and relationships once it is stored
    (the graph tables must exist: ``migrate --graph``; an ``llm`` is needed); a spreadsheet stays
    hybrid, and the report says which mode ran and why (``mode_used``, ``mode_reason``).

    Raises only for a bad call (both or neither of text/file, an ACL the caller does not hold)
    and for ``IngestTooLarge`` (an intake cap refuses, it never trims). A provider failure
    mid-embedding leaves the document in status ``embedding``; see ``resume_embeddings``.
    ``idempotency_key`` (per source): the same key with the same request returns the first
    report without writing; with other content it raises ``IdempotencyKeyReused`` (409).
    Ingests of one document take turns (each a complete version, in order); one whose turn does
    not come within ``ingest.write_wait_seconds`` answers ``skipped`` / ``in_progress``, which is
    retryable: nothing was written and its idempotency key was not spent.
    ``batch=True`` submits the stored chunk set through the provider's batch API: the document
    reports ``batch_pending`` until ``poll_batches`` completes it; a provider without a batch API
    raises ``BatchNotSupported`` (400) before anything is stored.
    """
    if (text is None) == (file is None):
        raise InvalidRequest("pass exactly one of text= or file=")
    if mode not in ("hybrid", "graph"):
        raise InvalidRequest('mode must be "hybrid" or "graph"')
    if not isinstance(batch, bool):
        raise InvalidRequest("batch must be true or false")
    if batch:  # refused before anything is read or stored
        batch_client(ctx.services)
    key = idempotency.check_key(idempotency_key) if idempotency_key is not None else None
    caller = resolve(principals)
    acl_list = check_filing(acl, caller)
    check_source_and_name(source_id, name)
    if mode == "graph":  # refused before anything is stored: no graph tables, or no model to extract with
        await check_graph_ingest(ctx)
    source, name = open_source(text, file, name, ctx.config.ingest.max_file_bytes)
    scrub = ctx.scrubber()
    name = scrub.text(name) if name is not None else None  # None: named after its content
    attributes = scrub.obj(dict(attributes or {}))
    mime = default_mime(text, name, mime)

    async def run() -> DocumentReport:
        return await ctx.ingestor.ingest(
            source,
            name=name,
            source_id=source_id,
            acl=acl_list,
            attributes=attributes,
            mime=mime,
            caller=caller,
            batch=batch,
        )

    if mode == "graph":  # its usage event waits for the mode the graph step settles on
        with holding_ingest_usage() as held:
            report = await _ingest_one(ctx, run, key, source, name, source_id, acl_list, attributes, mime, batch)
            if stored(report):
                await graph_step(ctx, report)
        for usage in held:
            usage.detail.update(mode=report.mode_used or "hybrid", mode_reason=report.mode_reason)
            await ctx.hooks.emit("on_usage", usage)
    else:
        report = await _ingest_one(ctx, run, key, source, name, source_id, acl_list, attributes, mime, batch)
    redactor = ctx.redactor(caller, None, None)
    report.name = redactor.text(report.name) or report.name
    report.error = redactor.text(report.error)
    report.revision = (await ctx.revisions(caller)).told_or_none(report.revision)
    return totals([report])


async def _ingest_one(
    ctx: EngineContext,
    run: Callable[[], Awaitable[DocumentReport]],
    key: str | None,
    source: Any,
    name: str | None,
    source_id: str,
    acl_list: list[str],
    attributes: dict[str, Any],
    mime: str | None,
    batch: bool,
) -> DocumentReport:
    """One document through the pipeline (under its idempotency key when given), then its fields."""
    if key is None:
        report = await run()
    else:
        digest = keyed.ingest_fingerprint(
            await keyed.content_digest(source),
            name=name,
            source_id=source_id,
            acl=acl_list,
            attributes=attributes,
            mime=mime,
            batch=batch,
        )
        wait = float(ctx.config.ingest.write_wait_seconds)
        report = await _keyed_ingest(await ctx.db(), source_id, key, digest, run, wait)
    if ctx.config.ingest.extract_fields and stored(report):
        await extract_after_ingest(ctx, report.document_id)  # type: ignore[arg-type]
    return report


async def bulk_ingest(
    ctx: EngineContext,
    documents: Iterable[Any],
    *,
    build_index: bool = True,
    batch_chunks: int = 20_000,
    principals: Principals = TRUSTED,
    maintenance_work_mem: str = "1GB",
    parallel_workers: int | None = None,
) -> BulkReport:
    """Load many new documents fast (``context_engine.ingest.bulk``): a batch of
    ``batch_chunks`` chunks per transaction, written with binary COPY. ``documents`` are
    mappings (``text``, ``name``, ``source_id``, ``acl``, ``attributes``, ``mime``) or
    ``BulkDocument``. With ``build_index`` the vector and text indexes are dropped for the load
    and built once after it (``maintenance_work_mem``, ``parallel_workers`` for that build). Documents
    whose identity is taken go through the ordinary ingest. Returns a ``BulkReport``."""
    loader = BulkLoader(ctx.services, ctx.ingestor)
    return await loader.load(
        documents,
        caller=resolve(principals),
        build_index=build_index,
        batch_chunks=batch_chunks,
        maintenance_work_mem=maintenance_work_mem,
        parallel_workers=parallel_workers,
    )


async def extract_after_ingest(ctx: EngineContext, document_id: str) -> None:
    """``ingest.extract_fields``: the stored document's structured fields; a model failure is
    logged and reported to ``on_error``, never a failed ingest (the document is stored)."""
    if ctx.config.llm is None:
        log.warning("ingest.extract_fields is on but no llm is configured; fields were not extracted")
        return
    try:
        found = await extract_fields(ctx, document_id, field_hints=ctx.config.ingest.field_hints)
    except ContextEngineError as exc:
        log.warning("structured extraction failed for document %s (%s)", document_id, exc.code)
        return
    if found["quality"] == "failed":
        log.warning("structured extraction failed for document %s (%s)", document_id, found["failure_reason"])


async def resume_embeddings(ctx: EngineContext, document_id: str | None = None) -> IngestReport:
    """Embed only the rows still missing a vector, for one document or every resumable one.

    A sweep (no id) skips documents whose run is still moving (its lock is held).
    """
    doc_id = check_document_id(document_id) if document_id is not None else None
    return totals(await ctx.ingestor.resume(doc_id))


async def poll_embedding_batches(ctx: EngineContext) -> list[BatchOutcome]:
    """Ask the provider once about every embedding batch ``ingest(batch=True)`` submitted; store
    the vectors of finished ones (the document completes) and report what each poll did. A job
    that ended without every vector leaves its document in ``embedding`` (``batch_failed``), for
    ``resume_embeddings`` or a new batch ingest. An operator's call: it reads every source."""
    return await poll_batches(ctx.services, ctx.scrubber().text)


def stored(report: DocumentReport) -> bool:
    """Whether the report's document is stored (searchable now, or once its vectors arrive)."""
    return report.status in ("completed", "embedding", "batch_pending") and report.document_id is not None


def totals(reports: list[DocumentReport]) -> IngestReport:
    counts = {
        "files": len(reports),
        "completed": 0,
        "failed": 0,
        "skipped": 0,
        "embedding": 0,
        "batch_pending": 0,
        "chunks": 0,
    }
    for report in reports:
        counts[report.status] = counts.get(report.status, 0) + 1
        counts["chunks"] += report.chunks
    return IngestReport(documents=reports, totals=counts)


class _NotAdmitted(Exception):
    """The run could not take its turn on the document: nothing happened, so the key is not spent."""

    def __init__(self, report: DocumentReport):
        super().__init__("not admitted")
        self.report = report


async def _keyed_ingest(
    db: AsyncEngine, source_id: str, key: str, digest: str, run: Callable[[], Any], wait: float
) -> DocumentReport:
    """``run()`` once per (source, key): a retry gets the first report back and writes nothing. A
    run that was not admitted (``skipped`` / ``in_progress``) records nothing: the key stays free."""

    async def work() -> idempotency.Outcome:
        report: DocumentReport = await run()
        if report.status == "skipped" and report.skip_reason == "in_progress":
            raise _NotAdmitted(report)
        result = report.model_dump(mode="json")
        return idempotency.Outcome(report.document_id, report.version, report.revision, result, replayed=False)

    try:
        outcome = await idempotency.run_once(
            db, source_id=source_id, key=key, operation="ingest", digest=digest, work=work, wait_seconds=wait
        )
    except _NotAdmitted as exc:
        return exc.report
    return DocumentReport(**outcome.result)
