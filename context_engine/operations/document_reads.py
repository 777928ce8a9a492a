"""Reading stored documents: one (now, as of a revision, or one version), its versions, a page, stats.

Each read runs under the caller's ACL in SQL and is redacted by the output policy; a read may run on
a read replica (``consistency``, ``min_revision``: docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_engine.errors import InvalidRequest, NotFound
from context_engine.limits import LIST_LIMIT_MAX, LIST_LIMIT_MIN
from context_engine.models import FAILURE_MESSAGES, Document, DocumentPage, Stats, shown_failure
from context_engine.operations.context import EngineContext
from context_engine.principals import Principals, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import Redactor
from context_engine.revisions import view as revision_view
from context_engine.revisions.models import DocumentVersion
from context_engine.services import Consistency
from context_engine.storage import page_cursor, stored_text
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_document_id, check_id_list, check_int_range


async def get_document(
    ctx: EngineContext,
    document_id: str,
    *,
    principals: Principals = None,
    include_text: bool = True,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
    as_of: int | None = None,
    version: int | None = None,
    consistency: Consistency = "replica",
    min_revision: int | None = None,
) -> Document:
    """The document now, as of revision ``as_of``, or one ``version`` of it; a past version is
    answered under the ACL it had then. A ``version`` is a write's own token, so it is read on the
    writer, where a version just written is found."""
    caller = resolve(principals)
    redactor = ctx.redactor(caller, redaction, redaction_secret_key)
    doc_id = check_document_id(document_id)
    if version is not None and as_of is not None:
        raise InvalidRequest("pass as_of or version, not both")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise InvalidRequest("version must be a positive integer")

    revs = await ctx.revisions(caller)
    at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

    async def read() -> dict[str, Any] | None:
        db = await ctx.services.read_db()
        scope = ReadScope(caller, as_of=await revision_view.resolve(db, at, revs, caller, document_ids=[doc_id]))
        return await repo.get_document(db, doc_id, scope, with_text=include_text, version=version)

    where = "primary" if version is not None and consistency == "replica" else consistency
    row, _ = await ctx.services.reading(read, consistency=where, as_of=at, min_revision=floor, trusted=caller is None)
    if row is None:
        what = f"version {version} of document" if version is not None else "document"
        raise NotFound(f"{what} {document_id} not found")
    return document(row, revs=revs, redactor=redactor)


async def document_versions(
    ctx: EngineContext,
    document_id: str,
    *,
    principals: Principals = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> list[DocumentVersion]:
    """Every version of the document the caller may see (each under its own ACL), oldest first,
    with its revision range; ``NotFound`` when there is none."""
    caller = resolve(principals)
    redactor = ctx.redactor(caller, redaction, redaction_secret_key)
    doc_id = check_document_id(document_id)
    rows = await repo.document_versions(await ctx.db(), doc_id, ReadScope(caller))
    if not rows:
        raise NotFound(f"document {document_id} not found")
    revs = await ctx.revisions(caller)
    return [
        DocumentVersion(
            **{
                **r,
                "name": redactor.text(r["name"]),
                "attributes": redactor.obj(r["attributes"] or {}),
                "valid_from": revs.told(r["valid_from"]),
                "valid_to": revs.told_or_none(r["valid_to"]),
            }
        )
        for r in rows
    ]


async def list_documents(
    ctx: EngineContext,
    *,
    principals: Principals = None,
    source_ids: Sequence[str] | None = None,
    limit: int = 50,
    cursor: str | None = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
    as_of: int | None = None,
    consistency: Consistency = "replica",
    min_revision: int | None = None,
) -> DocumentPage:
    """A page of the documents the caller may see, now or as of revision ``as_of``."""
    caller = resolve(principals)
    redactor = ctx.redactor(caller, redaction, redaction_secret_key)
    check_int_range(limit, "limit", LIST_LIMIT_MIN, LIST_LIMIT_MAX)
    after = page_cursor.decode(cursor) if cursor else None
    sources = check_id_list(source_ids, "source_ids")

    revs = await ctx.revisions(caller)
    at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

    async def read() -> list[dict[str, Any]]:
        db = await ctx.services.read_db()
        revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources)
        scope = ReadScope(caller, sources, as_of=revision)
        return await repo.list_documents(db, scope, limit=limit + 1, after=after)

    rows, _ = await ctx.services.reading(
        read, consistency=consistency, as_of=at, min_revision=floor, trusted=caller is None
    )
    more = len(rows) > limit
    rows = rows[:limit]
    docs = [document(r, revs=revs, redactor=redactor) for r in rows]
    next_cursor = page_cursor.encode(rows[-1]) if more and rows else None
    return DocumentPage(documents=docs, next_cursor=next_cursor)


async def stats(
    ctx: EngineContext, *, principals: Principals = None, source_ids: Sequence[str] | None = None,
    as_of: int | None = None,
) -> Stats:
    """Counts of what the caller may see, now or as of revision ``as_of``."""
    caller = resolve(principals)
    db = await ctx.db()
    revs = await ctx.revisions(caller)
    at, sources = revs.heard(as_of), check_id_list(source_ids, "source_ids")
    revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources)
    found = await repo.stats(db, ReadScope(caller, sources, as_of=revision))
    if caller is not None:  # the revision of its view, at the revision it asked about
        found["revision"] = revs.told(await revision_view.view_revision(db, caller, source_ids=sources, as_of=revision))
    return Stats(**found)


def document(row: dict[str, Any], *, revs: revision_view.CallerRevisions, redactor: Redactor) -> Document:
    """A stored row as the caller sees it: redacted, its revision told, its error for the trusted only."""
    trusted = revs.trusted
    reason = shown_failure(row.get("failure_reason"))
    return Document(
        id=str(row["id"]),
        name=redactor.text(row["name"]),
        source_id=row["source_id"],
        mime=row["mime"],
        acl=list(row["acl"]),
        attributes=redactor.obj(row["attributes"] or {}),
        status=row["status"],
        failure_reason=reason,
        failure_message=FAILURE_MESSAGES.get(reason) if reason else None,
        error=redactor.text(row.get("error")) if trusted else None,
        version=row["version"],
        revision=revs.told(row["updated_revision"]),
        chunk_count=row["chunk_count"],
        meta=redactor.obj(row["meta"] or {}),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        text=redactor.text(row.get("text")),
        # a version read (it has valid_from) assembles the whole text from the chunks: never cut
        text_truncated=stored_text.is_truncated(row.get("meta")) and "valid_from" not in row,
    )
