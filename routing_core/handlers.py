"""One function per route: read the validated input, call the engine, shape the reply.

Authentication, access policy, size caps and body parsing happened before a handler runs (see
``routing_core.lifecycle``); a handler only turns a call into an engine call and its result
into a :class:`CoreResponse`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from context_engine.limits import LIST_LIMIT_DEFAULT
from context_engine.models import FAILURE_MESSAGES, IngestReport
from routing_core.call import Call
from routing_core.http import CoreResponse, HttpError
from routing_core.schemas import (
    DeletedBody,
    IngestFields,
    IngestTextBody,
    KnowledgeQueryBody,
    SearchBody,
    ToolExecuteBody,
    UpdateDocumentBody,
)

log = logging.getLogger("context_engine.routes")

#: how long ``GET /ready`` waits for the database before answering 503
READY_TIMEOUT_SECONDS = 5.0


async def ingest(call: Call) -> CoreResponse:
    """A JSON text or a multipart upload: the same engine call either way."""
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
        principals=call.who.principals_arg(),
        idempotency_key=call.request.header("idempotency-key"),
        batch=fields.batch,
    )
    return _report(report, call)


def _report(report: IngestReport, call: Call) -> CoreResponse:
    """201 when a document was stored, 200 when all were unchanged, 422 when nothing was stored."""
    if not call.who.trusted:  # raw provider text is an operator's copy only
        for doc in report.documents:
            doc.error = None
    body = report.model_dump(mode="json")
    if any(d.status in ("completed", "embedding", "batch_pending") for d in report.documents):
        return CoreResponse(201, body)
    failed = next((d for d in report.documents if d.status == "failed"), None)
    if failed is None:
        return CoreResponse(200, body)
    reason = failed.failure_reason or "unknown"
    message = failed.failure_message or FAILURE_MESSAGES[reason]
    return CoreResponse(422, {"error": {"code": reason, "message": message}, **body})


async def list_documents(call: Call) -> CoreResponse:
    page = await call.engine.list_documents(
        principals=call.who.principals_arg(),
        source_ids=call.query.get("source_id"),
        limit=call.one("limit", LIST_LIMIT_DEFAULT),
        cursor=call.one("cursor"),
        as_of=call.one("as_of"),
    )
    return CoreResponse(200, page.model_dump(mode="json"))


async def get_document(call: Call) -> CoreResponse:
    doc = await call.engine.get_document(
        call.params["document_id"],
        principals=call.who.principals_arg(),
        include_text=call.one("include_text", True),
        as_of=call.one("as_of"),
        version=call.one("version"),
    )
    return CoreResponse(200, doc.model_dump(mode="json"))


async def document_versions(call: Call) -> CoreResponse:
    versions = await call.engine.document_versions(call.params["document_id"], principals=call.who.principals_arg())
    return CoreResponse(200, {"versions": [v.model_dump(mode="json") for v in versions]})


async def update_document(call: Call) -> CoreResponse:
    body = cast(UpdateDocumentBody, call.body)
    doc = await call.engine.update_document(
        call.params["document_id"],
        principals=call.who.principals_arg(),
        acl=body.acl,
        attributes=body.attributes,
        name=body.name,
    )
    return CoreResponse(200, doc.model_dump(mode="json"))


async def delete_document(call: Call) -> CoreResponse:
    document_id = call.params["document_id"]
    revision = await call.engine.delete_document(
        document_id, principals=call.who.principals_arg(), idempotency_key=call.request.header("idempotency-key")
    )
    return CoreResponse(200, DeletedBody(id=document_id, deleted=True, revision=revision).model_dump())


async def search(call: Call) -> CoreResponse:
    body = cast(SearchBody, call.body)
    result = await call.engine.search(
        body.query,
        source_ids=body.source_ids,
        document_ids=None if body.document_ids is None else [str(i) for i in body.document_ids],
        principals=call.who.principals_arg(),
        top_k=body.top_k,
        group_by=body.group_by,
        compress_to_tokens=body.compress_to_tokens,
        as_of=body.as_of,
    )
    passages_only = {"documents"} if result.documents is None else None
    return CoreResponse(200, result.model_dump(mode="json", exclude=passages_only))


async def knowledge_query(call: Call) -> CoreResponse:
    body = cast(KnowledgeQueryBody, call.body)
    result = await call.engine.knowledge_query(
        body.query,
        top_k=body.top_k,
        agent_id=body.agent_id,
        expand=body.expand,
        rerank=body.rerank,
        principals=call.who.principals_arg(),
        as_of=body.as_of,
    )
    return CoreResponse(200, result.model_dump(mode="json", by_alias=True))


async def stats(call: Call) -> CoreResponse:
    result = await call.engine.stats(
        principals=call.who.principals_arg(), source_ids=call.query.get("source_id"), as_of=call.one("as_of")
    )
    return CoreResponse(200, result.model_dump(mode="json"))


async def execute_tool(call: Call) -> CoreResponse:
    """One governed call: 200 with the result, 202 while it waits for approval (in the host's scope)."""
    body = cast(ToolExecuteBody, call.body)
    answer = await call.engine.execute_tool(
        body.name,
        body.arguments,
        principals=call.who.principals_arg(),
        tool_id=body.tool_id,
        approval_scope=call.approval_scope,
        response_mode=body.response_mode,
    )
    return CoreResponse(202 if "approval_required" in answer else 200, answer)


async def list_tools(call: Call) -> CoreResponse:
    page = await call.engine.search_tools(
        call.one("q", "") or "",
        principals=call.who.principals_arg(),
        kind=call.one("kind"),
        name_contains=call.one("name_contains"),
        requires_approval=call.one("requires_approval"),
        limit=call.one("limit", 20),
        cursor=call.one("cursor"),
    )
    return CoreResponse(200, {"tools": list(page), "next_cursor": getattr(page, "next_cursor", None)})


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
