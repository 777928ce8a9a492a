"""One function per route: read the validated input, call the engine, shape the reply.

Authentication, access policy, size caps and body parsing happened before a handler runs (see
``routing_core.lifecycle``); a handler only turns a call into an engine call and its result
into a :class:`CoreResponse`.
"""

from __future__ import annotations

import json
from typing import Any, cast

from context_engine.limits import LIST_LIMIT_DEFAULT
from context_engine.models import IngestReport
from routing_core.call import Call
from routing_core.http import CoreRequest, CoreResponse, HttpError
from routing_core.schemas import (
    DeletedBody,
    IngestTextBody,
    KnowledgeQueryBody,
    SearchBody,
    UpdateDocumentBody,
)


async def ingest(call: Call) -> CoreResponse:
    if call.body is None:
        return await _ingest_upload(call)
    body = cast(IngestTextBody, call.body)
    report = await call.engine.ingest(
        text=body.text,
        name=body.name,
        source_id=body.source_id,
        acl=body.acl,
        attributes=body.attributes,
        principals=call.who.principals_arg(),
    )
    return _report(report, call)


async def _ingest_upload(call: Call) -> CoreResponse:
    upload = call.request.files.get("file")
    if upload is None:
        raise HttpError(400, "invalid_request", "multipart body needs a 'file' part")
    form = call.request.form
    report = await call.engine.ingest(
        file=upload.file,
        name=form.get("name") or upload.filename or "upload",
        source_id=form.get("source_id") or "default",
        acl=_form_list(form.get("acl"), "acl"),
        attributes=_form_json(form.get("attributes"), "attributes"),
        principals=call.who.principals_arg(),
    )
    return _report(report, call)


def _report(report: IngestReport, call: Call) -> CoreResponse:
    if not call.who.trusted:  # raw provider text is an operator's copy only
        for doc in report.documents:
            doc.error = None
    status = 200 if all(d.status == "skipped" for d in report.documents) else 201
    return CoreResponse(status, report.model_dump(mode="json"))


async def list_documents(call: Call) -> CoreResponse:
    page = await call.engine.list_documents(
        principals=call.who.principals_arg(),
        source_ids=call.request.query.get("source_id") or None,
        limit=_int_param(call.request, "limit", LIST_LIMIT_DEFAULT),
        cursor=_one(call.request, "cursor"),
    )
    for doc in page.documents:
        doc.failure_message = None  # a list carries the code only
    return CoreResponse(200, page.model_dump(mode="json"))


async def get_document(call: Call) -> CoreResponse:
    doc = await call.engine.get_document(
        call.params["document_id"],
        principals=call.who.principals_arg(),
        include_text=_bool_param(call.request, "include_text", True),
    )
    return CoreResponse(200, doc.model_dump(mode="json"))


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
    revision = await call.engine.delete_document(document_id, principals=call.who.principals_arg())
    return CoreResponse(200, DeletedBody(id=document_id, deleted=True, revision=revision).model_dump())


async def search(call: Call) -> CoreResponse:
    body = cast(SearchBody, call.body)
    result = await call.engine.search(
        body.query,
        source_ids=body.source_ids,
        document_ids=body.document_ids,
        principals=call.who.principals_arg(),
        top_k=body.top_k,
    )
    return CoreResponse(200, result.model_dump(mode="json"))


async def knowledge_query(call: Call) -> CoreResponse:
    body = cast(KnowledgeQueryBody, call.body)
    result = await call.engine.knowledge_query(
        body.query,
        top_k=body.top_k,
        agent_id=body.agent_id,
        expand=body.expand,
        rerank=body.rerank,
        principals=call.who.principals_arg(),
    )
    return CoreResponse(200, result.model_dump(mode="json", by_alias=True))


async def stats(call: Call) -> CoreResponse:
    result = await call.engine.stats(
        principals=call.who.principals_arg(), source_ids=call.request.query.get("source_id") or None
    )
    return CoreResponse(200, result.model_dump(mode="json"))


# ---------------------------------------------------------------------- query and form fields
def _one(request: CoreRequest, name: str) -> str | None:
    values = request.query.get(name)
    return values[-1] if values else None


def _int_param(request: CoreRequest, name: str, default: int) -> int:
    raw = _one(request, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise HttpError(400, "invalid_request", f"{name}: must be an integer") from None


def _bool_param(request: CoreRequest, name: str, default: bool) -> bool:
    raw = _one(request, name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise HttpError(400, "invalid_request", f"{name}: must be true or false")


def _form_list(raw: str | None, name: str) -> list[str] | None:
    if raw is None or raw == "":
        return None
    if raw.lstrip().startswith("["):
        value = _form_json(raw, name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise HttpError(400, "invalid_request", f"{name}: must be a JSON list of strings")
        return value
    return [part.strip() for part in raw.split(",") if part.strip()]


def _form_json(raw: str | None, name: str) -> Any:
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise HttpError(400, "invalid_request", f"{name}: must be valid JSON") from None


__all__ = [
    "delete_document",
    "get_document",
    "ingest",
    "knowledge_query",
    "list_documents",
    "search",
    "stats",
    "update_document",
]
