"""``discover``: the documents in scope with what is inside each one, the census, and what can run.

One call is meant to be enough to write the next correct call: every listed document carries the
``chunks`` count and, where it has headings, each heading's first chunk position (a ready ``start``
for ``get_chunks``); spreadsheets carry their typed columns and ``frame_key``. Lists inside a
structure are capped when the call did not name its documents, with the remainder counted.
``fields_by_type`` summarises the documents' structured fields (their attributes) by ``(kind,
document_type)``; ``document_type`` is null until something writes ``meta.document_type``.
"""

from __future__ import annotations

from typing import Any

from context_engine.knowledge.tool import paging, reads
from context_engine.knowledge.tool.actions import actions, off_reason
from context_engine.knowledge.tool.call import ToolCall
from context_engine.knowledge.tool.sheets import frame_keys
from context_engine.models import shown_failure
from context_engine.redaction.apply import Redactor
from context_engine.tools.availability import stored_tools_off

DEFAULT_LIMIT = 50
#: items of one list inside a structure (columns, sections, keys) when the documents were not named
LIST_CAP = 25
SHEET_CAP = 10
#: a capped list whose whole length is at most this gets the filled-in call that reads the rest
WORTH_FETCHING = 200


async def discover(call: ToolCall) -> dict[str, Any]:
    page = await paging.document_page(call, "discover", DEFAULT_LIMIT)
    scope, rows = page.scope, page.rows
    db = await call.engine.database()
    ids = [str(r["id"]) for r in rows]
    sheet_ids = [str(r["id"]) for r in rows if r["kind"] == "spreadsheet"]
    text_ids = [str(r["id"]) for r in rows if r["kind"] != "spreadsheet"]
    headings = await reads.sections(db, call.principals, scope, text_ids)
    pages = await reads.last_pages(db, call.principals, scope, text_ids)
    columns = await reads.sheet_columns(db, call.principals, scope, sheet_ids)
    types = await reads.census(db, call.principals, scope)
    field_rows = await reads.fields(db, call.principals, scope)
    revision = await reads.view_revision(db, call.principals, scope)

    redactor = call.redactor
    names = {doc_id: redactor.text(r["name"]) or "" for doc_id, r in zip(ids, rows, strict=True)}
    keys = (
        frame_keys(
            await reads.newest_spreadsheets(db, call.principals, scope),
            redactor,
            max_documents=call.engine.config.compute.max_documents,
        )
        if sheet_ids
        else {}
    )
    capped = not scope.named_documents
    documents = []
    for row in rows:
        doc_id = str(row["id"])
        if row["kind"] == "spreadsheet":
            structure = _sheets(doc_id, row, columns.get(doc_id, {}), keys, redactor, capped)
        else:
            structure = _text(doc_id, row, headings.get(doc_id, []), pages.get(doc_id), redactor, capped)
        documents.append(
            {
                "id": doc_id,
                "name": names[doc_id],
                "source_id": row["source_id"],
                "kind": row["kind"],
                "document_type": redactor.text(row["document_type"]),
                "mode": row["meta"].get("mode") or "hybrid",
                "status": row["status"],
                "failure_reason": shown_failure(row["failure_reason"]),
                "structure": structure,
            }
        )
    answer: dict[str, Any] = {
        "success": True,
        "revision": revision,
        "documents": documents,
        "count": len(documents),
        "has_more": page.more,
        **page.continuation(call),
    }
    answer["document_types"] = [
        {"kind": t["kind"], "document_type": redactor.text(t["document_type"]), "count": int(t["count"])} for t in types
    ]
    answer["fields_by_type"] = _fields(field_rows, redactor)
    answer["available_actions"] = _available(call)
    tools_off = stored_tools_off(call.engine.config.secret_key)
    if tools_off is not None:  # so an agent does not plan on a governed tool that cannot run here
        answer["governed_tools"] = f"OFF: {tools_off}"
    answer["next_action"] = _next_actions(call, documents)
    return answer


def _cap(items: list[Any], capped: bool, cap: int) -> tuple[list[Any], int]:
    if not capped or len(items) <= cap:
        return items, 0
    return items[:cap], len(items) - cap


def _sheets(
    doc_id: str,
    row: dict[str, Any],
    typed: dict[str, list[dict[str, Any]]],
    keys: dict[tuple[str, str], str],
    redactor: Redactor,
    capped: bool,
) -> dict[str, Any]:
    all_sheets = [s for s in row["meta"].get("sheets") or [] if isinstance(s, dict)]
    shown, more_sheets = _cap(all_sheets, capped, SHEET_CAP)
    sheets = []
    largest = 0
    for sheet in shown:
        raw_name = str(sheet.get("name"))
        kinds = {str(c.get("name")): c.get("type") for c in typed.get(raw_name, [])}
        names = [str(c) for c in sheet.get("columns") or []]
        largest = max(largest, len(names))
        listed, more_columns = _cap(names, capped, LIST_CAP)
        name = redactor.text(raw_name) or ""
        entry: dict[str, Any] = {
            "name": name,
            "columns": [{"name": redactor.text(c), "type": kinds.get(c)} for c in listed],
            "rows": int(sheet.get("rows") or 0),
            "frame_key": keys.get((doc_id, raw_name)),
        }
        if more_columns:
            entry["more_columns"] = more_columns
        sheets.append(entry)
    structure: dict[str, Any] = {"sheets": sheets, "chunks": int(row["chunk_count"])}
    if more_sheets:
        structure["more_sheets"] = more_sheets
    if more_sheets or (capped and largest > LIST_CAP):
        _rest(structure, doc_id, max(len(all_sheets), largest), "compute over its sheets rather than reading them back")
    return structure


def _text(
    doc_id: str,
    row: dict[str, Any],
    headings: list[dict[str, Any]],
    last_page: int | None,
    redactor: Redactor,
    capped: bool,
) -> dict[str, Any]:
    meta = row["meta"]
    structure: dict[str, Any] = {"chunks": int(row["chunk_count"])}
    json_keys = meta.get("keys")
    if isinstance(json_keys, list):
        listed, more = _cap([redactor.text(str(k)) for k in json_keys], capped, LIST_CAP)
        structure["keys"] = listed
        if more:
            structure["more_keys"] = more
            _rest(structure, doc_id, len(json_keys), "search for the key you need")
        return structure
    if headings:
        listed, more = _cap(headings, capped, LIST_CAP)
        structure["sections"] = [{"name": redactor.text(h["name"]), "start": h["start"]} for h in listed]
        if more:
            structure["more_sections"] = more
            _rest(structure, doc_id, len(headings), "search for the section you need, or walk it with get_chunks")
    pages = meta.get("pages") if isinstance(meta.get("pages"), int) else last_page
    if pages:
        structure["last_page"] = pages
    return structure


def _rest(structure: dict[str, Any], doc_id: str, total: int, otherwise: str) -> None:
    """The call that reads the rest of a capped structure, or what to do when that would be too long."""
    if total <= WORTH_FETCHING:
        structure["next_page"] = {"action": "discover", "document_ids": [doc_id]}
    else:
        structure["instead"] = f"too large to list ({total} items): {otherwise}"


def _fields(rows: list[dict[str, Any]], redactor: Redactor) -> dict[str, Any]:
    """``"kind"`` or ``"kind/document_type"`` -> field name -> {type, documents}."""
    grouped: dict[str, dict[str, Any]] = {}
    for row in rows:
        doc_type = redactor.text(row["document_type"])
        key = row["kind"] if doc_type is None else f"{row['kind']}/{doc_type}"
        name = redactor.text(row["field"]) or ""
        fields = grouped.setdefault(key, {})
        if name in fields:  # one field seen with several JSON types: report the most common, count all
            fields[name]["documents"] += int(row["count"])
        else:
            fields[name] = {"type": row["type"], "documents": int(row["count"])}
    return grouped


def _available(call: ToolCall) -> dict[str, str]:
    available = {}
    for action in actions():
        off = off_reason(action.name, call)
        available[action.name] = action.purpose if off is None else f"{action.purpose} (OFF: {off})"
    return available


def _next_actions(call: ToolCall, documents: list[dict[str, Any]]) -> dict[str, Any]:
    suggestions: dict[str, Any] = {"for a clause or a fact": {"action": "search", "query": "<your question>"}}
    readable = next((d for d in documents if d["structure"].get("chunks")), None)
    if readable is not None:
        suggestions["to read a document in order"] = {
            "action": "get_chunks",
            "document_id": readable["id"],
            "start": 0,
        }
    sheet = next((d for d in documents if d["kind"] == "spreadsheet"), None)
    if sheet is not None and off_reason("compute", call) is None:
        suggestions["for a figure from a spreadsheet"] = {"action": "compute", "query": "<your question>"}
    return suggestions
