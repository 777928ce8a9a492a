"""``compute`` and ``map_reduce`` through a host's own runner.

A runner replaces the built-in action (which this engine does not have yet), so the host applies
its own permission, billing and approval rules there. It receives the narrowed scope and the
caller's principals, never the redaction policy or its key; what it returns is masked here, whole.
"""

from __future__ import annotations

from typing import Any

from context_engine.knowledge.tool import reads
from context_engine.knowledge.tool.call import Refusal, ToolCall
from context_engine.knowledge.tool.search import compute_suggestion

MAP_REDUCE_DEFAULT_LIMIT = 25


def _masked(call: ToolCall, result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise Refusal(f"{call.action} could not run: the host's runner returned no result object.")
    body = call.redactor.obj(dict(result))
    body.setdefault("success", True)
    return body


async def compute(call: ToolCall) -> dict[str, Any]:
    assert call.compute is not None  # the action is OFF without a runner
    scope = call.narrowed()
    result = await call.compute(
        call.args["query"],
        source_ids=scope.source_ids,
        document_ids=scope.document_ids,
        principals=call.principals,
    )
    return _masked(call, result)


async def map_reduce(call: ToolCall) -> dict[str, Any]:
    """Refused before the runner when every document the run would read is a spreadsheet."""
    assert call.map_reduce is not None
    scope = call.narrowed()
    limit = call.args.get("limit", MAP_REDUCE_DEFAULT_LIMIT)
    db = await call.engine.database()
    targets = await reads.newest_targets(db, call.principals, scope, limit=limit)
    kinds = {t["kind"] for t in targets}
    if kinds == {"spreadsheet"}:
        raise Refusal(
            "these documents are spreadsheets: asking each one a question reads a sample of its rows, so the "
            "answers would be partial. Ask compute, which reads every row.",
            next_action={
                "action": "compute",
                "query": call.args["query"],
                "suggestion": await compute_suggestion(call, scope),
            },
        )
    ids = [str(t["id"]) for t in targets] or scope.document_ids
    result = await call.map_reduce(
        call.args["query"], source_ids=scope.source_ids, document_ids=ids, principals=call.principals, limit=limit
    )
    body = _masked(call, result)
    if "spreadsheet" in kinds:
        reason = "some of these documents are spreadsheets; compute reads every row"
        body["hint"] = {"action": "compute", "reason": reason}
    return body
