"""``execute_tool``: find the one visible tool, gate it, run it, shape the result, audit the call.

No database connection is held while a tool runs: the approval claim, the tool itself and the
audit row each take their turn. Whatever happens, the call leaves exactly one audit row and one
``on_tool_call`` event, both written after redaction.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ContextEngineError, InvalidRequest
from context_engine.hooks import Hooks, ToolCallEvent
from context_engine.redaction.apply import Redactor
from context_engine.tools import approvals, audit, kinds, registry
from context_engine.tools.availability import ToolsDisabled, stored_tools_off
from context_engine.tools.crypto import ConfigCipher
from context_engine.tools.egress import Resolver
from context_engine.tools.errors import (
    AmbiguousToolError,
    EgressRefused,
    ToolArgumentsInvalid,
    ToolExecutionFailed,
    ToolNotFound,
    ToolRoleRefused,
)
from context_engine.tools.errortext import masked_error_text
from context_engine.tools.functions import FunctionRegistry, FunctionTool
from context_engine.tools.plain import jsonable
from context_engine.tools.registry import ToolEntry
from context_engine.tools.schema import validate_arguments
from context_engine.tools.secrets import hidden_from_logs, scrub, secret_values
from context_engine.tools.shaping import ResponseMode, shape_result

log = logging.getLogger("context_engine.tools")
_OUTCOMES = {
    ToolNotFound: "not_found",
    AmbiguousToolError: "ambiguous",
    ToolArgumentsInvalid: "invalid_arguments",
    EgressRefused: "refused",
    ToolRoleRefused: "refused",
}


@dataclass(frozen=True)
class ToolRuntime:
    """What executing a tool depends on, handed in by the engine."""

    db: AsyncEngine
    secret_key: SecretStr | str | bytes | None
    functions: FunctionRegistry
    hooks: Hooks
    http_client_factory: Callable[[str], httpx.AsyncClient | None] | None = None
    resolver: Resolver | None = None


@dataclass(frozen=True)
class CallOptions:
    approval_scope: str | None = None
    tool_id: str | None = None
    result_max_chars: int | None = 8000
    result_max_rows: int | None = 100
    response_mode: ResponseMode | None = None
    approval_ttl: timedelta = approvals.DEFAULT_TTL


def _check_options(call_name: Any, arguments: Any, options: CallOptions) -> dict[str, Any]:
    if not isinstance(call_name, str) or not call_name.strip():
        raise InvalidRequest("name must be a non-empty string (the tool's call name)")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentsInvalid("arguments must be a JSON object")
    for label, value in (("result_max_chars", options.result_max_chars), ("result_max_rows", options.result_max_rows)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidRequest(f"{label} must be a positive integer or None")
    if options.response_mode not in (None, "json", "tsv"):
        raise InvalidRequest("response_mode must be 'json' or 'tsv'")
    if options.approval_scope is not None and not isinstance(options.approval_scope, str):
        raise InvalidRequest("approval_scope must be a string")
    return arguments


async def find_tool(
    runtime: ToolRuntime, call_name: str, caller: tuple[str, ...] | None, tool_id: str | None
) -> tuple[ToolEntry | FunctionTool, bytes]:
    """The one tool the caller means (and a stored tool's encrypted config); missing and invisible
    read the same."""
    function = runtime.functions.get(call_name)
    if function is not None:
        if function.visible_to(caller) and tool_id is None:
            return function, b""
        raise ToolNotFound(call_name)
    candidates = await registry.named(runtime.db, caller, call_name)
    if tool_id is not None:
        try:
            wanted = str(uuid.UUID(str(tool_id)))
        except ValueError:
            raise ToolNotFound(call_name) from None
        candidates = [c for c in candidates if c[0].tool_id == wanted]
    if not candidates:
        raise ToolNotFound(call_name)
    if len(candidates) > 1:
        raise AmbiguousToolError(
            f"{len(candidates)} tools you can see are named {call_name!r}; pass tool_id to say which one",
            details={"tool_ids": [c[0].tool_id for c in candidates]},
        )
    return candidates[0]


def _kind_of(tool: ToolEntry) -> kinds.ToolKindSpec:
    """The registered kind of a stored tool; a row of a kind no module registered in this process
    (a plug-in not loaded) cannot run, and says so before its config is decrypted."""
    spec = kinds.get(tool.kind)
    if spec is None:
        raise ToolExecutionFailed(
            "this tool's kind is not registered in this process (the module that registers it is not loaded)",
            code="tool_unavailable",
        )
    return spec


async def _run(
    runtime: ToolRuntime, tool: ToolEntry | FunctionTool, config: dict[str, Any], args: dict[str, Any]
) -> Any:
    if isinstance(tool, FunctionTool):
        return await tool.call(args)
    context = kinds.KindContext(
        http_client_factory=runtime.http_client_factory,
        resolver=runtime.resolver,
        db=runtime.db,
        secret_key=runtime.secret_key,
        tool_id=str(tool.tool_id),
    )
    return await _kind_of(tool).call(config, args, context)


def _approval_payload(record: approvals.ApprovalRecord) -> dict[str, Any]:
    return {
        "approval_required": {
            "approval_id": record.approval_id,
            "expires_at": record.expires_at.isoformat(),
            "tool_id": record.tool_id,
            "name": record.call_name,
            "approval_scope": record.approval_scope,
            "status": record.status,
        }
    }


async def execute_tool(
    runtime: ToolRuntime,
    call_name: Any,
    arguments: Any,
    *,
    caller: tuple[str, ...] | None,
    redactor: Redactor,
    options: CallOptions,
) -> dict[str, Any]:
    """Run one call through the governed path; see the module docstring."""
    record = audit.CallRecord(
        call_name=str(call_name)[:200],
        principals=list(caller) if caller is not None else None,
        started_at=datetime.now(UTC),
        approval_scope=options.approval_scope,
    )
    started = time.perf_counter()
    secrets: list[str] = []
    statements: list[str] = []
    # from the moment the config is read until the call is audited and its hook has run, no log
    # record made in this context carries one of its secrets
    with ExitStack() as hiding:
        try:
            args = _check_options(call_name, arguments, options)
            record.arguments = redactor.obj(jsonable(args))
            tool, sealed = await find_tool(runtime, call_name, caller, options.tool_id)
            record.tool_id = tool.tool_id if isinstance(tool, ToolEntry) else None
            record.kind = tool.kind if isinstance(tool, ToolEntry) else kinds.FUNCTION
            config: dict[str, Any] = {}
            if isinstance(tool, ToolEntry):
                off = stored_tools_off(runtime.secret_key)
                if off is not None:  # a deployment without the key: said at once, never a failure inside the call
                    raise ToolsDisabled(off)
                spec = _kind_of(tool)
                config = ConfigCipher(runtime.secret_key).decrypt(sealed, str(tool.tool_id))
                secrets = secret_values(config)
                hiding.enter_context(hidden_from_logs(secrets))
                record.arguments = scrub(record.arguments, secrets)
                validate_arguments(tool.parameters, args)
                if spec.check_arguments is not None:
                    spec.check_arguments(config, args)
                if spec.statements is not None:
                    statements = spec.statements(config, args)
            else:
                tool.check(args)
            if tool.requires_approval:
                pending = await _gate(runtime, record, args, caller, options)
                if pending is not None:
                    return _approval_payload(pending)
            raw = jsonable(await _run(runtime, tool, config, args))
            result = redactor.obj(scrub(raw, secrets))
            record.result, record.outcome = result, _success_outcome(tool, raw)
            mode = options.response_mode or config.get("response_mode") or "json"
            shaped = shape_result(
                result, mode=mode, max_chars=options.result_max_chars, max_rows=options.result_max_rows
            )
            return {
                "result": shaped,
                "usage": {"kind": "tool", "units": 1},
                "tool_id": record.tool_id,
                "call_id": record.call_id,
            }
        except ContextEngineError as exc:
            _reduce(exc, redactor, statements, secrets)
            record.outcome = next((o for t, o in _OUTCOMES.items() if isinstance(exc, t)), "error")
            record.error_code, record.error_message = exc.code, exc.message
            raise
        except Exception as exc:
            # a bug or an unexpected library error: the type for the operator, no text for anyone
            log.error("tool call %s failed unexpectedly (%s)", record.call_name, type(exc).__name__)
            failure = ToolExecutionFailed(f"the tool call failed unexpectedly ({type(exc).__name__})")
            record.error_code, record.error_message = failure.code, failure.message
            raise failure from None
        finally:
            record.duration_ms = round((time.perf_counter() - started) * 1000, 2)
            await _finish(runtime, record)


async def _gate(
    runtime: ToolRuntime,
    record: audit.CallRecord,
    args: dict[str, Any],
    caller: tuple[str, ...] | None,
    options: CallOptions,
) -> approvals.ApprovalRecord | None:
    """Claim an approval for this call (None: it may run), or open/join its pending record."""
    scope = options.approval_scope
    if scope is None:
        warnings.warn(
            "a gated tool call without approval_scope is unscoped; pass approval_scope (a run id is the "
            "usual shape): the next release refuses a gated call without one",
            DeprecationWarning,
            stacklevel=4,
        )
        scope = ""
    digest = approvals.request_hash(record.tool_id, record.call_name, args)
    claimed = await approvals.claim(runtime.db, digest, scope, caller)
    if claimed is not None:
        record.approval_id = claimed
        return None
    pending = await approvals.open_pending(
        runtime.db,
        digest=digest,
        scope=scope,
        caller=caller,
        tool_id=record.tool_id,
        call_name=record.call_name,
        arguments_text=json.dumps(record.arguments, ensure_ascii=False, default=str),
        ttl=options.approval_ttl,
    )
    record.outcome, record.approval_id = "approval_required", pending.approval_id
    return pending


def _success_outcome(tool: ToolEntry | FunctionTool, raw: Any) -> str:
    """``success``, or what the tool's kind makes of a result that still returns (an http tool whose
    server answered 4xx/5xx: ``http_error``)."""
    spec = kinds.get(tool.kind) if isinstance(tool, ToolEntry) else None
    return spec.outcome(raw) if spec is not None and spec.outcome is not None else "success"


def _reduce(exc: ContextEngineError, redactor: Redactor, statements: list[str], secrets: list[str]) -> None:
    """Reduce the message in place (stripped when it is a tool's own failure text, always masked)."""
    text = masked_error_text(
        exc.message,
        redactor.text,
        strip=isinstance(exc, ToolExecutionFailed),
        statements=statements,
        secrets=secrets,
    )
    exc.message = text
    exc.args = (text,)


async def _finish(runtime: ToolRuntime, record: audit.CallRecord) -> None:
    try:
        await audit.write(runtime.db, record)
    except Exception as exc:
        log.error("could not write the audit row of tool call %s (%s)", record.call_id, type(exc).__name__)
    fields = asdict(record)
    fields.pop("started_at")
    await runtime.hooks.emit("on_tool_call", ToolCallEvent(**fields))
