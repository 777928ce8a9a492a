"""``get_doc``, ``get_docs``, ``get_chunks`` and ``list``: reading documents by their system ids.

A ``get_chunks`` item carries ``language``: the language of the code it holds (a Markdown fence's
info string, ``python``), null for prose. A ``list`` item carries ``parked``: null for a document
that is fully indexed (or failed, or skipped), else why it waits (``embedding``: vectors still
being written or waiting for ``resume_embeddings``; ``batch_pending``: waiting for the provider's
batch job) with how many of its chunks are embedded, so a model knows meaning search may miss it.

A document outside the host's ceiling reads exactly like one that does not exist: the ceiling is
part of the SQL that decides visibility, and both cases give the same sentence. Failed documents
show ``failure_reason`` and ``failure_message``, never the raw ``error``.
"""

from __future__ import annotations

from typing import Any

from context_engine.errors import NotFound
from context_engine.knowledge.tool import paging, reads
from context_engine.knowledge.tool.call import Narrowed, Refusal, ToolCall, document_id
from context_engine.models import shown_failure

#: characters of document text one get_doc or get_docs answer carries at most
TEXT_BUDGET = 40_000
#: chunks and characters one get_chunks answer carries at most (always at least one chunk)
CHUNK_PAGE = 25
CHUNK_CHARS = 12_000
LIST_DEFAULT = 20


def _ceiling(call: ToolCall) -> Narrowed:
    """The host's ceiling alone, as a scope: what get_doc, get_docs and get_chunks may reach."""
    sources = list(call.ceiling.source_ids) if call.ceiling.source_ids is not None else None
    documents = list(call.ceiling.document_ids) if call.ceiling.document_ids is not None else None
    return Narrowed(sources, documents, False)


def _not_found(doc_id: str) -> Refusal:
    return Refusal(
        f"document {doc_id} was not found. Use an id from discover, list or a search hit's document_id.",
        next_action={"action": "discover"},
    )


async def _document(call: ToolCall, doc_id: str, size: int, budget: int) -> tuple[dict[str, Any], int]:
    """One document as the model sees it, its text cut to ``budget`` at a chunk boundary when longer;
    returns the document and the characters of text it carries."""
    whole = size <= budget
    try:
        doc = await call.engine.get_document(
            doc_id,
            principals=call.caller,
            include_text=whole,
            redaction=call.redaction,
            redaction_secret_key=call.secret_key,
        )
    except NotFound:
        raise _not_found(doc_id) from None
    body = doc.model_dump(mode="json", exclude={"error"})
    body["kind"] = reads.kind_of(doc.mime)
    if whole:
        return body, len(doc.text or "")
    db = await call.engine.database()
    pieces: list[str] = []
    used = 0
    position = 0
    full = False
    while not full:
        _, chunks = await reads.chunk_range(db, call.principals, _ceiling(call), doc_id, start=position, limit=50)
        if not chunks:
            break
        for chunk in chunks:
            text = call.redactor.text(chunk["text"]) or ""
            if pieces and used + len(text) + 2 > budget:
                full = True
                break
            pieces.append(text)
            used += len(text) + 2
            position = chunk["position"] + 1
    body["text"] = "\n\n".join(pieces)
    body["text_truncated"] = True
    body["next_page"] = {"action": "get_chunks", "document_id": doc_id, "start": position}
    return body, used


async def get_doc(call: ToolCall) -> dict[str, Any]:
    doc_id = document_id(call.args["document_id"])
    db = await call.engine.database()
    sizes = await reads.visible_sizes(db, call.principals, _ceiling(call), [doc_id])
    if doc_id not in sizes:
        raise _not_found(doc_id)
    document, _ = await _document(call, doc_id, sizes[doc_id], TEXT_BUDGET)
    return {"success": True, "document": document}


async def get_docs(call: ToolCall) -> dict[str, Any]:
    wanted = list(dict.fromkeys(document_id(v, "document_ids") for v in call.args["document_ids"]))
    if not wanted:
        raise Refusal("get_docs needs at least one id in document_ids.")
    db = await call.engine.database()
    ceiling = _ceiling(call)
    visible_ids = [d for d in wanted if call.within_ceiling(d)]
    sizes = await reads.visible_sizes(db, call.principals, ceiling, visible_ids) if visible_ids else {}
    documents: list[dict[str, Any]] = []
    remaining: list[str] = []
    used = 0
    for doc_id in wanted:
        if doc_id not in sizes:
            continue
        if remaining or (documents and used + sizes[doc_id] > TEXT_BUDGET):
            remaining.append(doc_id)
            continue
        try:
            document, chars = await _document(call, doc_id, sizes[doc_id], TEXT_BUDGET - used)
        except Refusal:  # deleted since the size was read: now it reads like any missing id
            continue
        documents.append(document)
        used += chars
    answer: dict[str, Any] = {"success": True, "documents": documents, "count": len(documents)}
    missing = [d for d in wanted if d not in sizes]
    if missing:
        answer["not_found"] = missing
    if remaining:
        answer["remaining_document_ids"] = remaining
        answer["next_page"] = {"action": "get_docs", "document_ids": remaining}
    return answer


async def get_chunks(call: ToolCall) -> dict[str, Any]:
    doc_id = document_id(call.args["document_id"])
    start = call.args.get("start", 0)
    db = await call.engine.database()
    total, rows = await reads.chunk_range(db, call.principals, _ceiling(call), doc_id, start=start, limit=CHUNK_PAGE)
    if total is None:
        raise _not_found(doc_id)
    if start > 0 and start >= total:
        last = f"positions 0 to {total - 1}" if total else "no chunks"
        raise Refusal(
            f"start {start} is past the end: document {doc_id} has {total} chunks ({last}). "
            "Call get_chunks with a start inside that range.",
            next_action={"action": "get_chunks", "document_id": doc_id, "start": max(0, total - 1)},
        )
    chunks: list[dict[str, Any]] = []
    used = 0
    for row in rows:
        text = call.redactor.text(row["text"]) or ""
        if chunks and used + len(text) > CHUNK_CHARS:
            break
        chunks.append(
            {
                "position": row["position"],
                "text": text,
                "section": call.redactor.text(row["section"]),
                "page": row["page"],
                "language": call.redactor.text(row["language"]),
            }
        )
        used += len(text)
    end = chunks[-1]["position"] if chunks else None
    answer: dict[str, Any] = {
        "success": True,
        "document_id": doc_id,
        "total_chunks": total,
        "start": start,
        "end": end,
        "chunks": chunks,
        "has_more": end is not None and end + 1 < total,
    }
    if answer["has_more"]:
        answer["next_start"] = end + 1  # type: ignore[operator]
        answer["next_page"] = {"action": "get_chunks", "document_id": doc_id, "start": answer["next_start"]}
    return answer


#: per waiting status: what the model should know about reading the document meanwhile
_PARKED = {
    "embedding": "its vectors are still being written or wait for resume_embeddings: keyword search finds all "
    "of it, search by meaning only its embedded chunks",
    "batch_pending": "it waits for the embedding provider's batch job: keyword search finds it now, search by "
    "meaning once the job is collected",
}


def parked(status: str, meta: dict[str, Any], chunks: int) -> dict[str, Any] | None:
    """Why a document that is neither indexed nor failed waits, and how much of it is embedded."""
    note = _PARKED.get(status)
    if note is None:
        return None
    progress = meta.get("embedding_progress")
    done = progress.get("done") if isinstance(progress, dict) else None
    embedded = done if isinstance(done, int) and not isinstance(done, bool) and 0 <= done <= chunks else 0
    return {"reason": status, "embedded_chunks": embedded, "chunks": chunks, "note": note}


async def list_documents(call: ToolCall) -> dict[str, Any]:
    page = await paging.document_page(call, "list", LIST_DEFAULT)
    redactor = call.redactor
    documents = [
        {
            "id": str(r["id"]),
            "name": redactor.text(r["name"]),
            "source_id": r["source_id"],
            "kind": r["kind"],
            "document_type": redactor.text(r["document_type"]),
            "mode": r["meta"].get("mode") or "hybrid",
            "status": r["status"],
            "failure_reason": shown_failure(r["failure_reason"]),
            "chunks": int(r["chunk_count"]),
            "parked": parked(r["status"], r["meta"], int(r["chunk_count"])),
        }
        for r in page.rows
    ]
    return {"success": True, "documents": documents, "count": len(documents), "has_more": page.more,
            **page.continuation(call)}  # fmt: skip
