"""``compute``, ``map_reduce`` and ``query_meta``: the engine's built-in actions, or a host's runner.

A host runner replaces the built-in action, so the host applies its own permission, billing and
approval rules there. It receives the narrowed scope and the caller's principals, never the
redaction policy or its key; what it returns is masked here, whole. The built-in actions
(:mod:`context_engine.compute`, :mod:`context_engine.mapreduce`, :mod:`context_engine.document_fields`)
redact inside, with this call's policy.
"""

from __future__ import annotations

from typing import Any

from context_engine.knowledge.tool import reads
from context_engine.knowledge.tool.call import Refusal, ToolCall
from context_engine.knowledge.tool.search import aggregate_check, compute_suggestion
from context_engine.principals import TRUSTED

MAP_REDUCE_DEFAULT_LIMIT = 25


def _masked(call: ToolCall, result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise Refusal(f"{call.action} could not run: the host's runner returned no result object.")
    body = call.redactor.obj(dict(result))
    body.setdefault("success", True)
    return body


def _principals(call: ToolCall) -> Any:
    return TRUSTED if call.principals is None else list(call.principals)


async def compute(call: ToolCall) -> dict[str, Any]:
    scope = call.narrowed()
    if call.compute is None:  # the built-in worker (the action is OFF unless it is switched on)
        return await call.engine.compute(
            call.args["query"],
            principals=_principals(call),
            source_ids=scope.source_ids,
            document_ids=scope.document_ids,
            redaction=call.redaction,
            redaction_secret_key=call.secret_key,
        )
    result = await call.compute(
        call.args["query"],
        source_ids=scope.source_ids,
        document_ids=scope.document_ids,
        principals=call.principals,
    )
    return _masked(call, result)


async def query_meta(call: ToolCall) -> dict[str, Any]:
    """Each in-scope document's values for the fields the question names (no filtering by value).

    An aggregate question over spreadsheets only is sent to compute, as search sends it: the stored
    fields of a sheet hold no totals, so the answer would be nulls."""
    scope = call.narrowed()
    hint = await aggregate_check(call, scope, call.args["query"])
    result = await call.engine.query_meta(
        call.args["query"],
        principals=_principals(call),
        source_ids=scope.source_ids,
        document_ids=scope.document_ids,
        redaction=call.redaction,
        redaction_secret_key=call.secret_key,
    )
    answer = {"success": True, **result}
    if hint is not None:
        answer["hint"] = hint
    return answer


async def map_reduce(call: ToolCall) -> dict[str, Any]:
    """Refused before the runner when every document the run would read is a spreadsheet."""
    scope = call.narrowed()
    limit = call.args.get("limit", MAP_REDUCE_DEFAULT_LIMIT)
    db = await call.engine.database()
    targets = await reads.newest_targets(db, call.principals, scope, limit=limit)
    kinds = {t["kind"] for t in targets}
    if kinds == {"spreadsheet"} and call.engine.config.redirect_aggregates_to_compute:
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
    if call.map_reduce is None:  # the built-in: one model call per document, bounded concurrency
        body = await call.engine.map_reduce(
            call.args["query"],
            principals=_principals(call),
            source_ids=scope.source_ids,
            document_ids=ids,
            limit=limit,
            redaction=call.redaction,
            redaction_secret_key=call.secret_key,
        )
    else:
        result = await call.map_reduce(
            call.args["query"], source_ids=scope.source_ids, document_ids=ids, principals=call.principals, limit=limit
        )
        body = _masked(call, result)
    if "spreadsheet" in kinds:
        reason = "some of these documents are spreadsheets; compute reads every row"
        body["hint"] = {"action": "compute", "reason": reason}
    return body


async def graph(call: ToolCall) -> dict[str, Any]:
    """``get_neighbors``, ``traverse``, ``find_related``, ``community_summary`` under the ceiling."""
    from context_engine.graph.errors import GraphNotEnabled
    from context_engine.knowledge.tool.actions import get

    scope = call.narrowed()
    arguments = {k: v for k, v in call.args.items() if k != "source_ids"}
    try:
        answer = await call.engine.graph_query(
            call.action,
            principals=_principals(call),
            source_ids=scope.source_ids,
            document_ids=scope.document_ids,
            redaction=call.redaction,
            redaction_secret_key=call.secret_key,
            **arguments,
        )
    except GraphNotEnabled:
        action = get(call.action)
        raise Refusal(action.off_sentence if action is not None else f"{call.action} is off.") from None
    return {"success": True, **answer}
