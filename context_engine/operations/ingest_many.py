"""Ingesting many documents in one call: few transactions, set-based statements, one embedding run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_engine.errors import ContextEngineError, InvalidRequest
from context_engine.ingest import many
from context_engine.ingest.document import DocumentInput
from context_engine.ingest.pipeline import open_source
from context_engine.limits import INGEST_MANY_MAX, MAX_ATTRIBUTES_DEPTH, MAX_NAME_CHARS, MAX_SOURCE_ID_CHARS
from context_engine.models import DocumentReport, IngestManyError, IngestManyItem, IngestManyReport
from context_engine.operations.context import EngineContext
from context_engine.operations.ingest import extract_after_ingest, ingest
from context_engine.operations.ingest_checks import batch_fields, check_filing, check_source_and_name, default_mime
from context_engine.principals import TRUSTED, Principals, resolve
from context_engine.revisions import idempotency
from context_engine.validation import check_json_object, check_text


async def ingest_many(
    ctx: EngineContext, documents: Sequence[Mapping[str, Any]], *, principals: Principals = TRUSTED
) -> IngestManyReport:
    """Each document is a mapping with the keywords of ``ingest`` (``text`` or ``file``, ``name``,
    ``source_id``, ``acl``, ``attributes``, ``mime``, ``idempotency_key``); every rule of ``ingest``
    holds per document.

    Answers one item per document, in input order: its report, or the error that refused it
    (a bad field, an ACL the caller does not hold, a name a hidden document holds, a cap), which
    fails that document alone. Raises only for a bad call (not a list, more than
    ``INGEST_MANY_MAX`` documents). A name given twice is written in order, as two calls would be.
    """
    if isinstance(documents, str | bytes | Mapping) or not isinstance(documents, Sequence):
        raise InvalidRequest("documents must be a list of documents")
    if len(documents) > INGEST_MANY_MAX:
        raise InvalidRequest(f"at most {INGEST_MANY_MAX} documents may be ingested in one call")
    caller = resolve(principals)
    results: dict[int, DocumentReport | ContextEngineError] = {}
    entries: list[many.Entry] = []
    raw: dict[int, dict[str, Any]] = {}
    told: set[int] = set()
    for index, document in enumerate(documents):
        try:
            raw[index] = batch_fields(document)
            entries.append(_entry(ctx, index, raw[index], caller))
        except ContextEngineError as exc:
            results[index] = exc

    async def single(entry: many.Entry) -> DocumentReport:
        fields = dict(raw[entry.index])
        if fields.get("file") is not None:
            fields["file"] = entry.doc.source  # already opened (and read back to its start)
        report = await ingest(ctx, **fields, principals=principals)
        told.add(entry.index)  # ingest already told its revision in the caller's terms
        return report.documents[0]

    results.update(await many.BatchIngestor(ctx.ingestor).ingest(entries, caller, single))
    redactor = ctx.redactor(caller, None, None)
    revs = await ctx.revisions(caller)
    items = []
    for index in range(len(documents)):
        outcome = results[index]
        if isinstance(outcome, ContextEngineError):
            error = IngestManyError(code=outcome.code, message=outcome.message, status=outcome.status)
            items.append(IngestManyItem(index=index, error=error))
            continue
        if ctx.config.ingest.extract_fields and outcome.status in ("completed", "embedding"):
            await extract_after_ingest(ctx, outcome.document_id)  # type: ignore[arg-type]
        outcome.name = redactor.text(outcome.name) or outcome.name
        outcome.error = redactor.text(outcome.error)
        if index not in told:
            outcome.revision = revs.told_or_none(outcome.revision)
        items.append(IngestManyItem(index=index, report=outcome))
    return IngestManyReport(items=items, totals=_totals(items))


def _entry(ctx: EngineContext, index: int, fields: dict[str, Any], caller: tuple[str, ...] | None) -> many.Entry:
    """One document of a batch checked as ``ingest`` checks it, opened and scrubbed."""
    text, file = fields.get("text"), fields.get("file")
    if (text is None) == (file is None):
        raise InvalidRequest("pass exactly one of text or file")
    key = fields.get("idempotency_key")
    if key is not None:
        idempotency.check_key(key)
    acl = check_filing(fields.get("acl"), caller)
    source_id = fields.get("source_id", "default")
    name = fields.get("name")
    check_source_and_name(source_id, name)
    attributes = fields.get("attributes")
    if attributes is not None:  # what the database would refuse, refused here for this document alone
        attributes = check_json_object(attributes, "attributes", MAX_ATTRIBUTES_DEPTH)
    if isinstance(text, str):
        check_text(text, "text")
    if name is not None:
        check_text(name, "name", MAX_NAME_CHARS)
    check_text(source_id, "source_id", MAX_SOURCE_ID_CHARS)
    source, name = open_source(text, file, name, ctx.config.ingest.max_file_bytes)
    scrub = ctx.scrubber()
    name = scrub.text(name) if name is not None else None
    mime = default_mime(text, name, fields.get("mime"))
    doc = DocumentInput(source, name, source_id, acl, scrub.obj(dict(attributes or {})), mime)
    return many.Entry(index=index, doc=doc, single=key is not None, keyed=key is not None)


def _totals(items: list[IngestManyItem]) -> dict[str, int]:
    totals = {"files": len(items), "completed": 0, "failed": 0, "skipped": 0, "embedding": 0, "refused": 0, "chunks": 0}
    for item in items:
        if item.report is None:
            totals["refused"] += 1
        else:
            totals[item.report.status] = totals.get(item.report.status, 0) + 1
            totals["chunks"] += item.report.chunks
    return totals
