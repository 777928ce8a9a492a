"""``map_reduce``: the same question asked of each document in scope, one answer per document.

For questions search answers badly because the answer is in every document ("which contracts
auto-renew"): search returns a handful of passages and misses the rest. Each document (the
newest ``limit``, default 25) is read once, masked by the caller's redaction, and handed to the
model with the question; the calls run concurrently up to a bound, and their cost is reported in
``usage``.

It reads a SAMPLE of each document (the first ``max_chars`` characters), so over spreadsheets it
would merge partial totals: a target set made only of spreadsheets is refused before any model
call or host runner (``SpreadsheetsNeedCompute``), and a mixed one carries a ``hint``. The decision
is made on exactly the documents the run would read: the ids are resolved first, then read as ids.

The reply's shape is the caller's question's, not the engine's, so no schema is enforced: JSON is
asked for in words and checked to be an object (``mode`` ``prompt``, one re-ask).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.compute.frames import SPREADSHEET_MIMES
from context_engine.config import LLMConfig
from context_engine.errors import ContextEngineError, InvalidRequest
from context_engine.hooks import Hooks, UsageEvent
from context_engine.llm.base import HttpClientFactory
from context_engine.llm.factory import build_llm
from context_engine.llm.structured import LLMNotConfigured, structured_call
from context_engine.redaction.apply import Redactor
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_question

DEFAULT_LIMIT = 25
MAX_LIMIT = 100
MAX_INSTRUCTION_CHARS = 4000
#: ``await runner(instruction, source_ids=, document_ids=, principals=, limit=)`` -> dict
MapReduceRunner = Callable[..., Awaitable[dict[str, Any]]]

MAP_SYSTEM = (
    "You answer one question about one document, using only the document's text. "
    'Reply with a JSON object such as {"answer": ..., "evidence": "a short quote"}; '
    'when the document does not say, reply {"answer": null}.'
)
ANSWER_SCHEMA: dict[str, Any] = {"type": "object"}
REFUSAL = (
    "these documents are spreadsheets; asking each one would answer from a sample of its rows. "
    "Use compute over the whole sheet."
)


class SpreadsheetsNeedCompute(ContextEngineError):
    """Every document the run would read is a spreadsheet: ``details["next_action"]`` is the compute call."""

    code = "use_compute"
    status = 422


async def map_reduce(
    sql: AsyncEngine,
    instruction: str,
    *,
    scope: ReadScope,
    llm: LLMConfig | None,
    limit: int | None = None,
    runner: MapReduceRunner | None = None,
    redactor: Redactor | None = None,
    concurrency: int = 4,
    max_chars: int = 12_000,
    hooks: Hooks | None = None,
    http_client_factory: HttpClientFactory | None = None,
) -> dict[str, Any]:
    """Ask ``instruction`` of each of the newest ``limit`` documents the caller may see in ``scope``.

    Returns ``success``, ``results`` (``document_id``, ``document_name`` and ``data`` or ``error``),
    ``processed``, ``failed``, ``considered``, ``hint`` (mixed scopes only) and ``usage``. A host
    ``runner`` replaces the model calls (after the spreadsheet refusal); its reply is swept.
    ``hooks.on_usage`` gets the tokens of every map call.
    """
    instruction = check_question(instruction, "instruction", MAX_INSTRUCTION_CHARS)
    cap = _check_limit(limit)
    if runner is None and llm is None:
        raise LLMNotConfigured("map_reduce needs an LLM: configure the llm section, or pass a map_reduce runner")
    targets = await _targets(sql, scope, cap)
    sheets = [t for t in targets if t["mime"] in SPREADSHEET_MIMES]
    if targets and len(sheets) == len(targets):
        raise SpreadsheetsNeedCompute(
            REFUSAL, details={"next_action": {"action": "compute", "query": instruction}}
        )
    hint = (
        {"action": "compute", "reason": f"{len(sheets)} of these documents are spreadsheets; for figures over "
         "their rows use compute, which reads every row"}
        if sheets
        else None
    )
    ids = [str(t["id"]) for t in targets]
    if runner is not None:
        reply = await runner(
            instruction,
            source_ids=list(scope.source_ids) if scope.source_ids is not None else None,
            document_ids=ids or (list(scope.document_ids) if scope.document_ids is not None else None),
            principals=list(scope.principals) if scope.principals is not None else None,
            limit=cap,
        )
        plain = json.loads(json.dumps(reply, default=str))
        return redactor.obj(plain) if redactor is not None else plain
    if llm is None:
        raise LLMNotConfigured("map_reduce needs an LLM: configure the llm section, or pass a map_reduce runner")
    documents = await _read(sql, scope, ids, max_chars)
    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)
    in_flight = {"now": 0, "max": 0}
    tokens = {"llm": 0}
    client = build_llm(llm, http_client_factory)

    async def ask(doc: dict[str, Any]) -> dict[str, Any]:
        name = redactor.text(doc["name"]) if redactor is not None else doc["name"]
        body = redactor.text(doc["text"]) if redactor is not None else doc["text"]
        entry: dict[str, Any] = {"document_id": str(doc["id"]), "document_name": name}
        async with gate:
            in_flight["now"] += 1
            in_flight["max"] = max(in_flight["max"], in_flight["now"])
            try:
                answer = await structured_call(
                    client,
                    system=MAP_SYSTEM,
                    user=f"Document: {name}\n\n{body}\n\nQuestion: {instruction}",
                    schema=ANSWER_SCHEMA,
                    schema_name="map_answer",
                    enforce=False,
                )
                tokens["llm"] += answer.tokens
                entry["data"] = answer.value
            except ContextEngineError as exc:
                tokens["llm"] += int(exc.details.get("tokens", 0) or 0)
                entry["error"] = exc.message
            finally:
                in_flight["now"] -= 1
        return entry

    try:
        results = await asyncio.gather(*(ask(doc) for doc in documents))
    finally:
        await client.aclose()
    failed = sum(1 for r in results if "error" in r)
    out: dict[str, Any] = {
        "success": True,
        "results": list(results),
        "processed": len(results) - failed,
        "failed": failed,
        "considered": len(targets),
        "usage": {
            "kind": "map_reduce",
            "llm_calls": len(results),
            "provider_tokens": tokens,
            "concurrency": concurrency,
            "max_in_flight": in_flight["max"],
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 2),
        },
    }
    if hint is not None:
        out["hint"] = hint
    if hooks is not None:
        detail = {"action": "map_reduce", "calls": len(results)}
        await hooks.emit("on_usage", UsageEvent("llm_tokens", tokens["llm"], None, detail))
    return redactor.obj(out) if redactor is not None else out


async def _targets(sql: AsyncEngine, scope: ReadScope, cap: int) -> list[dict[str, Any]]:
    """The ids (and mimes) the run would read: newest first, ``cap`` of them, under the caller's ACL."""
    params: dict[str, Any] = {"n": cap}
    where = scope.document_predicate("d", params)
    query = (
        f"SELECT d.id, d.mime FROM ce_documents d WHERE d.status = 'completed' AND {where} "
        "ORDER BY d.updated_at DESC, d.id LIMIT :n"
    )
    async with sql.connect() as conn:
        return [dict(r) for r in (await conn.execute(sql_text(query), params)).mappings()]


async def _read(sql: AsyncEngine, scope: ReadScope, ids: list[str], max_chars: int) -> list[dict[str, Any]]:
    """Those documents' names and the first ``max_chars`` of their text, in the targets' order."""
    if not ids:
        return []
    params: dict[str, Any] = {"chars": max_chars}
    where = scope.document_predicate("d", params)
    params["ids"] = ids
    where += " AND d.id = ANY(CAST(:ids AS uuid[]))"
    query = f"SELECT d.id, d.name, left(d.text, :chars) AS text FROM ce_documents d WHERE {where}"
    async with sql.connect() as conn:
        rows = {str(r["id"]): dict(r) for r in (await conn.execute(sql_text(query), params)).mappings()}
    return [rows[i] for i in ids if i in rows]


def _check_limit(limit: Any) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be an integer between 1 and {MAX_LIMIT}")
    return limit
