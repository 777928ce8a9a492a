"""Changing stored documents: an update of the ACL, attributes or name, a delete, and vacuuming
the history no revision can see any more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import NameTaken, NotFound
from context_engine.models import Document
from context_engine.operations.context import EngineContext
from context_engine.operations.document_reads import get_document
from context_engine.operations.graph import repair_graph
from context_engine.operations.ingest_checks import check_filing, check_name
from context_engine.principals import TRUSTED, Principals, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.revisions import idempotency, keyed, retention
from context_engine.revisions.models import VacuumReport
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_document_id
from context_engine.write_access import WriteAccess


async def update_document(
    ctx: EngineContext,
    document_id: str,
    *,
    principals: Principals = None,
    acl: Sequence[str] | None = None,
    attributes: dict[str, Any] | None = None,
    name: str | None = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> Document:
    """A new revision of the document's ACL, attributes or name (scrubbed as ingest scrubs them)."""
    caller = resolve(principals)
    doc_id = check_document_id(document_id)
    scrub = ctx.scrubber()  # ingest rules cover what is stored by an update too
    if attributes is not None:
        attributes = scrub.obj(attributes)
    if name is not None and isinstance(name, str):
        name = scrub.text(name)
    acl_list = check_filing(acl, caller) if acl is not None else None
    check_name(name)
    db = await ctx.db()
    try:
        revision = await repo.update_document(
            db,
            doc_id,
            ReadScope(caller),
            acl=acl_list,
            attributes=attributes,
            name=name,
            access=ctx.services.write_access,
        )
    except Exception as exc:
        if "ux_ce_documents_identity" in str(exc):
            raise NameTaken() from exc
        raise
    if revision is None:
        raise NotFound(f"document {document_id} not found")
    return await get_document(
        ctx,
        doc_id,
        principals=TRUSTED if caller is None else list(caller),
        include_text=False,
        redaction=redaction,
        redaction_secret_key=redaction_secret_key,
        consistency="primary",  # its own write: a replica may not have it yet
    )


async def delete_document(
    ctx: EngineContext, document_id: str, *, principals: Principals = None, idempotency_key: str | None = None
) -> int:
    """Delete from the next revision on; returns that revision (reads as of earlier ones still see
    it), told as a handle to a non-trusted caller. With ``idempotency_key`` a retry is a no-op that
    returns the revision of the first delete."""
    caller = resolve(principals)
    doc_id = check_document_id(document_id)
    db = await ctx.db()
    if idempotency_key is None:
        revision = await repo.delete_document(db, doc_id, ReadScope(caller), ctx.services.write_access)
    else:
        revision = await _keyed_delete(
            db, doc_id, caller, idempotency.check_key(idempotency_key), ctx.services.write_access
        )
    if revision is None:
        raise NotFound(f"document {document_id} not found")
    await repair_graph(ctx, doc_id)  # frequencies, orphans, touched communities (one query without a graph)
    return (await ctx.revisions(caller)).told(revision)


async def vacuum_revisions(ctx: EngineContext, keep_after: int) -> VacuumReport:
    """Remove history no revision from ``keep_after`` on can see; reads as of earlier revisions
    then answer ``revision_expired``. Current documents are untouched."""
    return VacuumReport(**await retention.vacuum(await ctx.db(), keep_after))


async def _keyed_delete(
    db: AsyncEngine, document_id: str, caller: tuple[str, ...] | None, key: str, access: WriteAccess
) -> int | None:
    """One delete per (source, key); a retry answers the first delete's revision if the caller
    could see the document just before it."""
    source_id = await repo.document_source(db, document_id)
    if source_id is None:
        return None

    async def work() -> idempotency.Outcome:
        revision = await repo.delete_document(db, document_id, ReadScope(caller), access)
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        return idempotency.Outcome(document_id, None, revision, {"revision": revision}, replayed=False)

    outcome = await idempotency.run_once(
        db, source_id=source_id, key=key, operation="delete", digest=keyed.delete_fingerprint(document_id), work=work
    )
    if outcome.replayed and outcome.revision is not None:
        seen = await repo.get_document(db, document_id, ReadScope(caller, as_of=outcome.revision - 1), with_text=False)
        if seen is None:
            return None
    return outcome.revision
