"""Governed tools: registering (stored http, db and mcp tools; in-memory function tools), finding,
executing under approval and audit, and the OAuth authorization of mcp tools."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from context_engine.errors import InvalidRequest
from context_engine.operations.context import EngineContext
from context_engine.principals import Principals, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.tools import approvals, audit, discovery, registry
from context_engine.tools.crypto import ConfigCipher
from context_engine.tools.errors import ToolNotFound
from context_engine.tools.execute import CallOptions, ToolRuntime
from context_engine.tools.execute import execute_tool as run_tool
from context_engine.tools.mcp_oauth import popup_page
from context_engine.tools.models import ApprovalRecord, tool_config
from context_engine.tools.registry import ToolEntry
from context_engine.validation import check_int_range


async def register_tool(ctx: EngineContext, tool: Any) -> dict[str, Any]:
    """Store an http, db or mcp tool (a ``ToolConfig`` or its fields as a dict); its config is
    encrypted under ``secret_key``.

    Returns its listing (``tool_id``, call ``name`` such as ``http_get_weather``, ...). Names are
    not unique: a second tool with the same name is a second tool, told apart by ``tool_id``.
    """
    tool = tool_config(tool)
    db = await ctx.db()
    entry = await registry.insert(db, tool, ConfigCipher(ctx.config.secret_key))
    listing = entry.public(trusted=True)
    if tool.kind == "mcp" and "oauth" in tool.config:
        try:  # a server that wants a person's consent answers with the popup's URL
            listing["authorization"] = await start_mcp_oauth(ctx, str(entry.tool_id))
        except BaseException:
            await registry.delete(db, str(entry.tool_id), None)  # nothing half-registered
            raise
    return listing


async def start_mcp_oauth(ctx: EngineContext, tool_id: str) -> dict[str, Any]:
    """Start (again) the OAuth authorization of a stored mcp tool that has an ``oauth`` section.

    ``{"status": "authorization_required", "authorization_url", "correlation_id", "expires_at"}``:
    open the URL in a popup; the provider sends it to ``oauth.redirect_uri``, whose handler calls
    ``complete_mcp_oauth``. ``{"status": "connected", ...}``: nothing to consent to.
    An operator's call, like registration (no principals).
    """
    checked = _stored_tool_id(tool_id)
    db = await ctx.db()
    sealed = await registry.sealed_mcp_config(db, checked)
    if sealed is None:
        raise ToolNotFound(checked)
    config = ConfigCipher(ctx.config.secret_key).decrypt(sealed, checked)
    return await ctx.oauth_flows.start(
        db,
        ctx.config.secret_key,
        checked,
        config,
        resolver=ctx.mcp_resolver,
        http_client_factory=ctx.services.http_client_factory,
    )


async def complete_mcp_oauth(ctx: EngineContext, params: Mapping[str, Any]) -> dict[str, Any]:
    """The popup's message for the provider's callback query (its ``code``, ``state``, ``error``, ``iss``).

    ``{"type": "mcp-oauth-success", "correlation_id", "tool_id"}`` or ``{"type": "mcp-oauth-error",
    "code", "message", "correlation_id"}`` (``mcp_oauth_popup`` also renders the page). Never raises
    for a bad callback: every failure is one of the six codes.
    """
    return await ctx.oauth_flows.complete(params)


async def mcp_oauth_popup(
    ctx: EngineContext, params: Mapping[str, Any]
) -> tuple[dict[str, Any], str, dict[str, str]]:
    """``complete_mcp_oauth``, with the callback's HTML page and its headers: the page posts the
    message to the opener on the origin of the tool's ``oauth.redirect_uri`` and nowhere else."""
    payload, origin = await ctx.oauth_flows.answer(params)
    page, headers = popup_page(payload, origin)
    return payload, page, headers


def register_function_tool(
    ctx: EngineContext,
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    acl: Sequence[str] | None = None,
    requires_approval: bool = False,
) -> dict[str, Any]:
    """Offer a Python callable as tool ``fn_<name>`` (kept in memory, never persisted).

    Arguments are validated against its signature; a sync function runs in a worker thread.
    """
    tool = ctx.functions.register(fn, name=name, description=description, acl=acl, requires_approval=requires_approval)
    return ToolEntry.of_function(tool).public(trusted=True)


async def list_tools(ctx: EngineContext, *, principals: Principals = None) -> list[dict[str, Any]]:
    """Every tool the caller may see (function tools first, then stored ones, oldest first)."""
    caller = resolve(principals)
    return [entry.public(trusted=caller is None) for entry in await _visible_tools(ctx, caller)]


async def search_tools(
    ctx: EngineContext,
    query: str = "",
    *,
    principals: Principals = None,
    kind: str | Sequence[str] | None = None,
    name_contains: str | None = None,
    requires_approval: bool | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> list[dict[str, Any]]:
    """A page (a list with ``next_cursor``) of the caller's tools that pass every filter.

    Filters AND together; a non-empty ``query`` ranks and also excludes tools none of its terms
    match; ``cursor`` only continues the same query and filters.
    """
    caller = resolve(principals)
    entries = await _visible_tools(ctx, caller)
    return discovery.search(
        entries,
        query,
        trusted=caller is None,
        kind=kind,
        name_contains=name_contains,
        requires_approval=requires_approval,
        limit=limit,
        cursor=cursor,
    )


async def delete_tool(ctx: EngineContext, tool_id: str, *, principals: Principals = None) -> None:
    """Remove a stored tool (``tool_id``) or a function tool (its call name)."""
    caller = resolve(principals)
    if isinstance(tool_id, str) and tool_id.startswith("fn_"):
        function = ctx.functions.get(tool_id)
        if function is None or not function.visible_to(caller):
            raise ToolNotFound(tool_id)
        ctx.functions.remove(tool_id)
        return
    checked = _stored_tool_id(tool_id)
    if not await registry.delete(await ctx.db(), checked, caller):
        raise ToolNotFound(checked)


async def execute_tool(
    ctx: EngineContext,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    principals: Principals = None,
    tool_id: str | None = None,
    approval_scope: str | None = None,
    result_max_chars: int | None = 8000,
    result_max_rows: int | None = 100,
    response_mode: str | None = None,
    approval_ttl_seconds: float = 3600,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> dict[str, Any]:
    """Run tool ``name`` for the caller: ``{"result", "usage", "tool_id", "call_id"}``, or
    ``{"approval_required": {...}}`` for a gated tool not yet approved in ``approval_scope``.

    Raises ``ToolNotFound`` (missing or invisible alike), ``AmbiguousToolError`` (several visible
    tools share the name and no ``tool_id``), ``ToolArgumentsInvalid``, ``EgressRefused`` and
    ``ToolExecutionFailed`` (its text stripped of row data and masked). Every call is audited.
    """
    caller = resolve(principals)
    ttl = approval_ttl_seconds
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 1 <= ttl <= 30 * 86400:
        raise InvalidRequest("approval_ttl_seconds must be between 1 and 2592000 (30 days)")
    options = CallOptions(
        approval_scope=approval_scope,
        tool_id=tool_id,
        result_max_chars=result_max_chars,
        result_max_rows=result_max_rows,
        response_mode=response_mode,  # type: ignore[arg-type]
        approval_ttl=timedelta(seconds=approval_ttl_seconds),
    )
    runtime = ToolRuntime(
        db=await ctx.db(),
        secret_key=ctx.config.secret_key,
        functions=ctx.functions,
        hooks=ctx.hooks,
        http_client_factory=ctx.services.http_client_factory,
        resolver=ctx.mcp_resolver,
    )
    redactor = ctx.redactor(caller, redaction, redaction_secret_key)
    return await run_tool(runtime, name, arguments, caller=caller, redactor=redactor, options=options)


async def resolve_tool_approval(
    ctx: EngineContext, approval_id: str, decision: str, *, approver: str | None = None
) -> ApprovalRecord:
    """Approve or deny a pending approval (``context_engine.tools.resolve_approval`` calls this)."""
    return await approvals.resolve(await ctx.db(), approval_id, decision, approver)


async def get_tool_approval(ctx: EngineContext, approval_id: str) -> ApprovalRecord:
    """One approval record, for a host showing it to an approver."""
    return await approvals.get(await ctx.db(), approval_id)


async def tool_calls(ctx: EngineContext, *, limit: int = 100, tool_id: str | None = None) -> list[dict[str, Any]]:
    """The latest tool-call audit rows, newest first (already redacted when written)."""
    check_int_range(limit, "limit", 1, 1000)
    return await audit.recent(await ctx.db(), limit=limit, tool_id=tool_id)


async def _visible_tools(ctx: EngineContext, caller: tuple[str, ...] | None) -> list[ToolEntry]:
    functions = [ToolEntry.of_function(f) for f in ctx.functions.all() if f.visible_to(caller)]
    return functions + await registry.visible(await ctx.db(), caller)


def _stored_tool_id(tool_id: Any) -> str:
    """A stored tool's id in its canonical form; anything else names no tool."""
    try:
        return str(uuid.UUID(str(tool_id)))
    except ValueError:
        raise ToolNotFound(str(tool_id)) from None
