"""``search``: passages through the engine's one retriever, with two checks in front of it.

1. An aggregate question (a total, a count, a ranking...) over a scope where every visible document
   is a spreadsheet is refused and redirected to ``compute``: search returns excerpts, and adding up
   excerpts reports a sample as the figure. A mixed scope is searched and gets an additive ``hint``.
2. A question that names a file ("what is in report_2024.xlsx") is answered from document names:
   the named document's first chunk, ``matched_by: "filename"``. When no visible document has that
   name the ordinary search runs, so this branch can only add an answer.

``redirect_aggregates_to_compute=False`` and ``filename_search=False`` on the config turn each off.
"""

from __future__ import annotations

import re
from typing import Any

from context_engine.knowledge.tool import reads
from context_engine.knowledge.tool.call import Narrowed, Refusal, ToolCall
from context_engine.knowledge.tool.capabilities import graph_available
from context_engine.knowledge.tool.sheets import first_columns, frame_keys, is_aggregate, sheet_names

DEFAULT_TOP_K = 10
#: trigram similarity a document name needs to count as the file a question names
NAME_SIMILARITY = 0.5
_FILE_NAME = re.compile(
    r"(?:^|(?<=[\s\"'(\[<,;:]))([A-Za-z0-9][A-Za-z0-9_.-]*\.(?:pdf|docx|doc|xlsx|xls|csv|tsv|pptx|ppt|txt|md|"
    r"markdown|html|htm|json|jsonl|eml))(?=$|[\s\"')\]>,;:?!]|\.(?:\s|$))",
    re.IGNORECASE | re.ASCII,
)


def named_file(query: str) -> str | None:
    """The file name a question names, if any (ASCII names only)."""
    found = _FILE_NAME.search(query)
    return found.group(1) if found else None


async def search(call: ToolCall) -> dict[str, Any]:
    query: str = call.args["query"]
    mode = call.args.get("mode")
    if mode == "graph" and not (call.engine.config.graph.enabled and await graph_available(call.engine)):
        raise Refusal("mode graph is off: this deployment has no knowledge graph. Leave mode out to search.")
    scope = call.narrowed()
    top_k = call.args.get("top_k", DEFAULT_TOP_K)
    hint = await aggregate_check(call, scope, query)
    answer = await _by_file_name(call, scope, query, top_k) if call.engine.config.filename_search else None
    if answer is None:
        result = await call.engine.search(
            query,
            source_ids=scope.source_ids,
            document_ids=scope.document_ids,
            principals=call.caller,
            top_k=top_k,
            redaction=call.redaction,
            redaction_secret_key=call.secret_key,
            mode=mode,
        )
        hits = [
            {
                "document_id": h.document_id,
                "document_name": h.document_name,
                "chunk_text": h.chunk_text,
                "score": h.score,
                "source_id": h.source_id,
                "chunk_idx": h.chunk_idx,
                "section": h.section,
                "page": h.page,
            }
            for h in result.hits
        ]
        answer = {"success": True, "hits": hits, "usage": result.usage}
    if hint is not None:
        answer["hint"] = hint
    return answer


async def aggregate_check(call: ToolCall, scope: Narrowed, query: str) -> dict[str, Any] | None:
    """Refuse an aggregate question over an all-spreadsheet scope; a hint for a mixed one; else None
    (and always None with ``redirect_aggregates_to_compute=False``)."""
    if not call.engine.config.redirect_aggregates_to_compute or not is_aggregate(query):
        return None
    db = await call.engine.database()
    kinds = await reads.kinds_in_scope(db, call.principals, scope)
    if not kinds.get("spreadsheet"):
        return None
    if kinds.get("text"):
        return {"action": "compute", "reason": "aggregate question, and some documents in scope are spreadsheets"}
    raise Refusal(
        "these documents are spreadsheets, and search returns a few rows, so a figure added up from its hits "
        "would come from a sample. Ask compute, which reads every row.",
        next_action={"action": "compute", "query": query, "suggestion": await compute_suggestion(call, scope)},
    )


async def compute_suggestion(call: ToolCall, scope: Narrowed) -> dict[str, Any]:
    """Vocabulary for the compute call: the newest sheet's frame_key, first numeric and first text column."""
    db = await call.engine.database()
    sheets = await reads.newest_spreadsheets(db, call.principals, scope)
    if not sheets:
        return {"frame_key": None, "measure": None, "group_by": None}
    redactor = call.redactor
    newest = sheets[0]
    keys = frame_keys(sheets, redactor, max_documents=call.engine.config.compute.max_documents)
    names = sheet_names(newest["sheets"])
    if not names:
        return {"frame_key": None, "measure": None, "group_by": None}
    columns = await reads.sheet_columns(db, call.principals, scope, [str(newest["id"])])
    measure, group_by = first_columns(columns.get(str(newest["id"]), {}).get(names[0], []))
    return {
        "frame_key": keys.get((str(newest["id"]), names[0])),
        "measure": redactor.text(measure),
        "group_by": redactor.text(group_by),
    }


async def _by_file_name(call: ToolCall, scope: Narrowed, query: str, top_k: int) -> dict[str, Any] | None:
    name = named_file(query)
    if name is None:
        return None
    db = await call.engine.database()
    rows = await reads.by_file_name(db, call.principals, scope, name, limit=max(1, top_k), threshold=NAME_SIMILARITY)
    if not rows:
        return None
    redactor = call.redactor
    hits = [
        {
            "document_id": str(r["id"]),
            "document_name": redactor.text(r["name"]),
            "chunk_text": redactor.text(r["text"]) or "",
            "score": round(float(r["similarity"]), 6),
            "source_id": r["source_id"],
            "chunk_idx": r["position"],
            "matched_by": "filename",
        }
        for r in rows
    ]
    return {"success": True, "hits": hits, "usage": {"kind": "search", "legs": [], "leg_hits": {}}}
