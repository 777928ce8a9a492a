"""One function per route: read the validated input, call the engine, shape the reply.

Authentication, access policy, size caps and body parsing happened before a handler runs (see
``routing_core.lifecycle``); a handler only turns a call into an engine call and its result
into a :class:`CoreResponse`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from context_engine.errors import DocumentBusy
from context_engine.limits import LIST_LIMIT_DEFAULT
from context_engine.models import FAILURE_MESSAGES, IngestReport, search_wire
from context_engine.tools.availability import stored_tools_off
from routing_core.call import Call
from routing_core.http import CoreResponse, HttpError
from routing_core.schemas import (
    DeletedBody,
    ErrorDetail,
    IngestFields,
    IngestListItem,
    IngestListReport,
    IngestTextBody,
    IngestTextList,
    KnowledgeQueryBody,
    SearchBody,
    ToolExecuteBody,
    UpdateDocumentBody,
)

log = logging.getLogger("context_engine.routes")

#: how long ``GET /ready`` waits for the database before answering 503
READY_TIMEOUT_SECONDS = 5.0


async def ingest(call: Call) -> CoreResponse:
    """A JSON text or a multipart upload: the same engine call either way (a JSON list: ``ingest_many``)."""
    if isinstance(call.body, IngestTextList):
        return await ingest_list(call, call.body)
    if isinstance(call.body, IngestTextBody):
        body = call.body
        content: dict[str, Any] = {"text": body.text, "name": body.name}
        fields: IngestTextBody | IngestFields = body
    else:
        upload = call.request.files.get("file")
        if upload is None:
            raise HttpError(400, "invalid_request", "multipart body needs a 'file' part")
        fields = cast(IngestFields, call.body)
        content = {"file": upload.file, "name": fields.name or upload.filename or "upload"}
    report = await call.engine.ingest(
        **content,
        source_id=fields.source_id,
        acl=fields.acl,
        attributes=fields.attributes,
        principals=call.authenticated_caller.principals_arg(),
        idempotency_key=call.request.header("idempotency-key"),
        batch=fields.batch,
    )
    return _report(report, call)


async def ingest_list(call: Call, body: IngestTextList) -> CoreResponse:
    """A JSON list: one ``ingest_many`` call for the entries that validated; entries answer in order.

    201 when every entry was stored; when none was stored or found unchanged, the first entry's
    error beside the items, with the status that entry alone would have answered (403 for an ACL
    the caller does not hold, 400 for an entry that does not validate, 422 for one that could not
    be read); 200 otherwise, and then each item says what became of its entry.
    """
    if call.request.header("idempotency-key") is not None:
        raise HttpError(
            400, "invalid_request", "an Idempotency-Key names one document; post a list without it, or one at a time"
        )
    valid = [(i, d) for i, d in enumerate(body.documents) if isinstance(d, IngestTextBody)]
    documents = [
        {"text": d.text, "name": d.name, "source_id": d.source_id, "acl": d.acl, "attributes": d.attributes}
        for _, d in valid
    ]
    principals = call.authenticated_caller.principals_arg()
    report = await call.engine.ingest_many(documents, principals=principals) if documents else None
    by_index = dict(zip((i for i, _ in valid), report.items if report else [], strict=True))
    items: list[IngestListItem] = []
    statuses: list[int] = []  # what each entry alone would have answered, when it was refused
    for index, entry in enumerate(body.documents):
        if isinstance(entry, ErrorDetail):
            items.append(IngestListItem(index=index, error=entry))
            statuses.append(400)  # the single body's answer to a field that does not validate
            continue
        outcome = by_index[index]
        if outcome.report is not None:
            if not call.authenticated_caller.trusted:  # raw provider text is an operator's copy only
                outcome.report.error = None
            items.append(IngestListItem(index=index, report=outcome.report))
        else:
            assert outcome.error is not None
            error = ErrorDetail(code=outcome.error.code, message=outcome.error.message)
            items.append(IngestListItem(index=index, error=error))
            statuses.append(outcome.error.status)
            continue
        statuses.append(422)
    answer = IngestListReport(items=items, totals=_list_totals(items)).model_dump(mode="json")
    stored = [i for i in items if i.report is not None and i.report.status in ("completed", "embedding")]
    if len(stored) == len(items):
        return CoreResponse(201, answer)
    if any(i.report is not None and i.report.status == "skipped" for i in items) or stored:
        return CoreResponse(200, answer)
    first = items[0]
    if first.error is not None:
        detail = first.error
    else:
        assert first.report is not None
        reason = first.report.failure_reason or "unknown"
        detail = ErrorDetail(code=reason, message=first.report.failure_message or FAILURE_MESSAGES[reason])
    return CoreResponse(statuses[0], {"error": detail.model_dump(), **answer})


def _list_totals(items: list[IngestListItem]) -> dict[str, int]:
    totals = {"files": len(items), "completed": 0, "failed": 0, "skipped": 0, "embedding": 0, "refused": 0, "chunks": 0}
    for item in items:
        if item.report is None:
            totals["refused"] += 1
        else:
            totals[item.report.status] += 1
            totals["chunks"] += item.report.chunks
    return totals


def _report(report: IngestReport, call: Call) -> CoreResponse:
    """201 when a document was stored, 200 when all were unchanged, 422 when nothing was stored,
    409 ``document_busy`` (with ``Retry-After``) when another run kept the document past the wait."""
    if not call.authenticated_caller.trusted:  # raw provider text is an operator's copy only
        for doc in report.documents:
            doc.error = None
    body = report.model_dump(mode="json")
    if any(d.status in ("completed", "embedding", "batch_pending") for d in report.documents):
        return CoreResponse(201, body)
    if any(d.status == "skipped" and d.skip_reason == "in_progress" for d in report.documents):
        raise DocumentBusy()
    failed = next((d for d in report.documents if d.status == "failed"), None)
    if failed is None:
        return CoreResponse(200, body)
    reason = failed.failure_reason or "unknown"
    message = failed.failure_message or FAILURE_MESSAGES[reason]
    return CoreResponse(422, {"error": {"code": reason, "message": message}, **body})


async def list_documents(call: Call) -> CoreResponse:
    page = await call.engine.list_documents(
        principals=call.authenticated_caller.principals_arg(),
        source_ids=call.query.get("source_id"),
        limit=call.one("limit", LIST_LIMIT_DEFAULT),
        cursor=call.one("cursor"),
        as_of=call.one("as_of"),
    )
    return CoreResponse(200, page.model_dump(mode="json"))


async def get_document(call: Call) -> CoreResponse:
    doc = await call.engine.get_document(
        call.params["document_id"],
        principals=call.authenticated_caller.principals_arg(),
        include_text=call.one("include_text", True),
        as_of=call.one("as_of"),
        version=call.one("version"),
    )
    return CoreResponse(200, doc.model_dump(mode="json"))


async def document_versions(call: Call) -> CoreResponse:
    versions = await call.engine.document_versions(
        call.params["document_id"], principals=call.authenticated_caller.principals_arg()
    )
    return CoreResponse(200, {"versions": [v.model_dump(mode="json") for v in versions]})


async def update_document(call: Call) -> CoreResponse:
    body = cast(UpdateDocumentBody, call.body)
    doc = await call.engine.update_document(
        call.params["document_id"],
        principals=call.authenticated_caller.principals_arg(),
        acl=body.acl,
        attributes=body.attributes,
        name=body.name,
    )
    return CoreResponse(200, doc.model_dump(mode="json"))


async def delete_document(call: Call) -> CoreResponse:
    document_id = call.params["document_id"]
    revision = await call.engine.delete_document(
        document_id,
        principals=call.authenticated_caller.principals_arg(),
        idempotency_key=call.request.header("idempotency-key"),
    )
    return CoreResponse(200, DeletedBody(id=document_id, deleted=True, revision=revision).model_dump())


async def search(call: Call) -> CoreResponse:
    body = cast(SearchBody, call.body)
    result = await call.engine.search(
        body.query,
        source_ids=body.source_ids,
        document_ids=None if body.document_ids is None else [str(i) for i in body.document_ids],
        principals=call.authenticated_caller.principals_arg(),
        top_k=body.top_k,
        group_by=body.group_by,
        compress_to_tokens=body.compress_to_tokens,
        as_of=body.as_of,
        mode=body.mode,
    )
    return CoreResponse(200, search_wire(result))


async def knowledge_query(call: Call) -> CoreResponse:
    body = cast(KnowledgeQueryBody, call.body)
    result = await call.engine.knowledge_query(
        body.query,
        top_k=body.top_k,
        agent_id=body.agent_id,
        expand=body.expand,
        rerank=body.rerank,
        principals=call.authenticated_caller.principals_arg(),
        as_of=body.as_of,
    )
    return CoreResponse(200, result.model_dump(mode="json", by_alias=True))


async def stats(call: Call) -> CoreResponse:
    result = await call.engine.stats(
        principals=call.authenticated_caller.principals_arg(),
        source_ids=call.query.get("source_id"),
        as_of=call.one("as_of"),
    )
    return CoreResponse(200, result.model_dump(mode="json"))


async def execute_tool(call: Call) -> CoreResponse:
    """One governed call: 200 with the result, 202 while it waits for approval (in the host's scope)."""
    body = cast(ToolExecuteBody, call.body)
    answer = await call.engine.execute_tool(
        body.name,
        body.arguments,
        principals=call.authenticated_caller.principals_arg(),
        tool_id=body.tool_id,
        approval_scope=call.approval_scope,
        response_mode=body.response_mode,
    )
    return CoreResponse(202 if "approval_required" in answer else 200, answer)


async def list_tools(call: Call) -> CoreResponse:
    page = await call.engine.search_tools(
        call.one("q", "") or "",
        principals=call.authenticated_caller.principals_arg(),
        kind=call.one("kind"),
        name_contains=call.one("name_contains"),
        requires_approval=call.one("requires_approval"),
        limit=call.one("limit", 20),
        cursor=call.one("cursor"),
    )
    return CoreResponse(200, {"tools": list(page), "next_cursor": getattr(page, "next_cursor", None)})


async def mcp_oauth_callback(call: Call) -> CoreResponse:
    """The provider's redirect back to the popup: finish the flow and answer the page posting its outcome.

    A failed flow is a 200 page too: the browser shows the page either way, and its message's
    ``code`` is the outcome (the JSON error contract would reach no one in a popup).
    """
    params = {name: call.one(name) for name in ("state", "code", "error", "error_description", "iss")}
    _, page, headers = await call.engine.mcp_oauth_popup({k: v for k, v in params.items() if v is not None})
    return CoreResponse(200, page, headers)


async def health(call: Call) -> CoreResponse:
    """Liveness: answering at all is the answer; nothing else is looked at or revealed."""
    return CoreResponse(200, {"status": "ok"})


async def ready(call: Call) -> CoreResponse:
    """Readiness: the store answers ``revision()``, which needs the database and its schema.

    The reason of a failure goes to the log, never to the caller of this unauthenticated route.
    """
    try:
        await asyncio.wait_for(call.engine.revision(), READY_TIMEOUT_SECONDS)
    except Exception as exc:
        log.warning("readiness check failed: %s", type(exc).__name__)
        raise HttpError(503, "not_ready", "the service is not ready") from None
    body: dict[str, Any] = {"status": "ready"}
    tools_off = stored_tools_off(call.engine.config.secret_key)
    if tools_off is not None:
        body["disabled"] = {"tools": tools_off}
    replicas = await _replica_counts(call)
    if replicas is not None:
        body["replicas"] = replicas
    return CoreResponse(200, body)


async def _replica_counts(call: Call) -> dict[str, int] | None:
    """How many read replicas are configured and how many answer (counts only: the route is public).

    A replica that is down does not make the service unready: the writer takes its reads."""
    configured = len(call.engine.config.database.read_urls)
    if not configured:
        return None
    try:
        replicas = await asyncio.wait_for(call.engine.read_replicas(), READY_TIMEOUT_SECONDS)
    except Exception as exc:
        log.warning("read replica check failed: %s", type(exc).__name__)
        return {"configured": configured, "up": 0}
    return {"configured": configured, "up": sum(1 for r in replicas if r["up"])}


__all__ = [
    "delete_document",
    "get_document",
    "health",
    "ingest",
    "knowledge_query",
    "list_documents",
    "ready",
    "search",
    "stats",
    "update_document",
]
