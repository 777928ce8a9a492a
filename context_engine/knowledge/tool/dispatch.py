"""The one implementation behind every door: the engine method, ``call_knowledge_tool`` and MCP.

Each action is one record (:mod:`context_engine.knowledge.tool.actions`): its handler answers it,
unless its availability check says this call cannot run it (decided per call: a host runner turns
compute on for one call), when it answers its fixed OFF sentence.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from context_engine.errors import ContextEngineError, InvalidRequest, StorageUnavailable, known_failure
from context_engine.knowledge.tool import actions, arguments
from context_engine.knowledge.tool.call import ComputeRunner, MapReduceRunner, Refusal, ToolCall
from context_engine.knowledge.tool.capabilities import graph_available
from context_engine.knowledge.tool.engine_protocol import KnowledgeEngine
from context_engine.principals import resolve
from context_engine.redaction import RedactionPolicy
from context_engine.storage.scope import Scope, resolve_scope

log = logging.getLogger("context_engine.knowledge_tool")

async def run_knowledge_tool(
    engine: KnowledgeEngine,
    *,
    action: Any,
    principals: Any,
    scope: Scope | Sequence[str] | None,
    redaction: RedactionPolicy | None = None,
    secret_key: str | bytes | None = None,
    compute: ComputeRunner | None = None,
    map_reduce: MapReduceRunner | None = None,
    model_args: dict[str, Any],
) -> dict[str, Any]:
    """Answer one call. Host mistakes (no scope, a bad principals value) raise; everything a model
    can cause is answered ``{"success": false, "error": ...}``."""
    ceiling = resolve_scope(scope)
    caller = resolve(principals)
    if redaction is not None and not isinstance(redaction, RedactionPolicy):
        raise TypeError("redaction must be a RedactionPolicy")
    try:
        name, args = arguments.check(action, model_args)
        record = actions.get(name)
        if record is None:  # unregistered since the check
            raise Refusal(f"{name} is off on this deployment.")
        call = ToolCall(
            engine=engine,
            action=name,
            args=args,
            principals=caller,
            ceiling=ceiling,
            redactor=engine.output_redactor(caller, redaction, secret_key),
            redaction=redaction,
            secret_key=secret_key,
            compute=compute,
            map_reduce=map_reduce,
            graph_enabled=record.reads_graph and await graph_available(engine),
        )
        off = actions.off_reason(name, call)
        if off is not None:
            raise Refusal(off)
        return await record.handler(call)
    except Refusal as refusal:
        return refusal.answer()
    except InvalidRequest as exc:
        return {"success": False, "error": f"{exc.message.rstrip('.')}. Fix that argument and call again."}
    except StorageUnavailable:
        log.warning("knowledge tool: storage unavailable", exc_info=True)
        return {"success": False, "error": "the knowledge base is unavailable right now; try again shortly."}
    except ContextEngineError as exc:
        log.warning("knowledge tool: %s failed with %s", action, exc.code)
        return {"success": False, "error": f"{action} could not be answered ({exc.code}); try another action."}
    except Exception as exc:
        known = known_failure(exc)
        if known is None:
            raise
        log.warning("knowledge tool: %s failed with %s", action, known.code)
        return {"success": False, "error": "the knowledge base is busy right now; try again shortly."}
