"""``create_mcp_app``: the knowledge tool served over MCP streamable HTTP with the official SDK.

The host's principals, scope, redaction policy and hash key are resolved on every tool call, each
from a value or a zero-argument callable (sync or async). While a resolver runs,
:func:`current_request` returns the incoming HTTP request, so a host can read its own auth from it.
The tool's answer is the same dict the engine method returns, sent as structured content and as
JSON text.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from context_engine.errors import ContextEngineError
from context_engine.knowledge.tool.call import ComputeRunner, MapReduceRunner
from context_engine.knowledge.tool.definition import MCP_SCOPE_SENTENCE, TOOL_NAME, deployment_definition
from context_engine.knowledge.tool.dispatch import run_knowledge_tool
from context_engine.tools import kinds

if TYPE_CHECKING:
    from context_engine.engine import ContextEngine

log = logging.getLogger("context_engine.mcp")

_request: contextvars.ContextVar[Request | None] = contextvars.ContextVar("context_engine_mcp_request", default=None)

HOST_ERROR = "this tool is not configured correctly on the server, so it cannot answer; tell the user."


def current_request() -> Request | None:
    """The HTTP request of the MCP tool call being resolved (None outside one)."""
    return _request.get()


async def _resolve(value: Any) -> Any:
    """A value, or what a zero-argument callable (sync or async) returns."""
    if callable(value):
        value = value()
    if inspect.isawaitable(value):
        value = await value
    return value


def _tool(definition: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name=definition["name"],
        description=f"{definition['description']}\n\n{MCP_SCOPE_SENTENCE}",
        input_schema=definition["input_schema"],
        annotations=types.ToolAnnotations(
            read_only_hint=definition["annotations"]["readOnlyHint"],
            open_world_hint=definition["annotations"]["openWorldHint"],
        ),
    )


#: the governed-tools pair served beside the knowledge tool (``context_engine.tools``)
SEARCH_TOOLS = "search_tools"
EXECUTE_TOOL = "execute_tool"


@dataclass(frozen=True)
class HostValues:
    """What the host's resolvers gave for one call: who calls, the ceiling, redaction, approvals."""

    caller: Any
    ceiling: Any
    policy: Any
    key: Any
    approval_scope: Any


#: answers one call of a served tool: the engine, the host's values and the model's arguments
Answer = Callable[["ContextEngine", HostValues, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ServedTool:
    """One tool the app serves: its listing (built per ``tools/list``) and what answers its calls."""

    name: str
    listing: Callable[[], Awaitable[types.Tool]]
    answer: Answer


def _search_tools_listing() -> types.Tool:
    return types.Tool(
        name=SEARCH_TOOLS,
        description=(
            "Find the tools you may call. Every filter narrows the list; a query also ranks it. "
            "Pass next_cursor back as cursor, with the same query and filters, for the next page."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 500},
                "kind": kinds.filter_schema(),
                "name_contains": {"type": "string", "maxLength": 200},
                "requires_approval": {"type": "boolean"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "cursor": {"type": "string", "maxLength": 2000},
            },
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )


def _execute_tool_listing() -> types.Tool:
    return types.Tool(
        name=EXECUTE_TOOL,
        description=(
            "Call one tool by the name search_tools listed, with its arguments. A tool that needs a "
            "person's approval answers approval_required with an approval_id: tell the user, then call "
            "again with the same arguments once it is approved. When two tools share a name, pass tool_id."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "arguments": {"type": "object"},
                "tool_id": {"type": "string", "maxLength": 100},
                "response_mode": {"type": "string", "enum": ["json", "tsv"]},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=False, open_world_hint=True),
    )


def _governed(listing: Callable[[], types.Tool], run: Answer) -> tuple[Callable[[], Awaitable[types.Tool]], Answer]:
    """A governed-tools answer: arguments outside its schema refused by name, and a refusal sent as
    ``success: false`` with its stable code."""

    async def listed() -> types.Tool:
        return listing()

    async def answer(engine: ContextEngine, host: HostValues, args: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(args) - set(listing().input_schema["properties"]))
        if unknown:
            message = f"unknown arguments: {', '.join(unknown)}"
            return {"success": False, "error": {"code": "invalid_request", "message": message}}
        try:
            return await run(engine, host, args)
        except ContextEngineError as exc:
            return {"success": False, "error": {"code": exc.code, "message": exc.message}}

    return listed, answer


async def _search_tools(engine: ContextEngine, host: HostValues, args: dict[str, Any]) -> dict[str, Any]:
    page = await engine.search_tools(
        args.get("query") or "",
        principals=host.caller,
        kind=args.get("kind"),
        name_contains=args.get("name_contains"),
        requires_approval=args.get("requires_approval"),
        limit=args.get("limit", 20),
        cursor=args.get("cursor"),
    )
    return {"success": True, "tools": list(page), "next_cursor": getattr(page, "next_cursor", None)}


async def _execute_tool(engine: ContextEngine, host: HostValues, args: dict[str, Any]) -> dict[str, Any]:
    answer = await engine.execute_tool(
        args.get("name"),  # type: ignore[arg-type]
        args.get("arguments"),
        principals=host.caller,
        tool_id=args.get("tool_id"),
        approval_scope=host.approval_scope,
        response_mode=args.get("response_mode"),
    )
    return {"success": "approval_required" not in answer, **answer}


def _knowledge_tool(
    engine: ContextEngine, compute: ComputeRunner | None, map_reduce: MapReduceRunner | None
) -> ServedTool:
    """``search_knowledge_base``: listed with this deployment's OFF marks, answered by the one dispatch."""

    async def listing() -> types.Tool:
        return _tool(await deployment_definition(engine, compute=compute, map_reduce=map_reduce))

    async def answer(engine: ContextEngine, host: HostValues, args: dict[str, Any]) -> dict[str, Any]:
        action = args.pop("action", None)
        try:
            return await run_knowledge_tool(
                engine,
                action=action,
                principals=host.caller,
                scope=host.ceiling,
                redaction=host.policy,
                secret_key=host.key,
                compute=compute,
                map_reduce=map_reduce,
                model_args=args,
            )
        except (TypeError, ValueError):
            log.exception("knowledge tool over MCP: the host passed an unusable value")
            return {"success": False, "error": HOST_ERROR}
        except Exception:
            log.exception("knowledge tool over MCP: %s failed", action)
            return {"success": False, "error": "the knowledge tool failed unexpectedly; try again shortly."}

    return ServedTool(TOOL_NAME, listing, answer)


def served_tools(
    engine: ContextEngine, compute: ComputeRunner | None = None, map_reduce: MapReduceRunner | None = None
) -> dict[str, ServedTool]:
    """Every tool the app serves, by name, in listing order: the knowledge tool, then the governed pair."""
    tools = [
        _knowledge_tool(engine, compute, map_reduce),
        ServedTool(SEARCH_TOOLS, *_governed(_search_tools_listing, _search_tools)),
        ServedTool(EXECUTE_TOOL, *_governed(_execute_tool_listing, _execute_tool)),
    ]
    return {tool.name: tool for tool in tools}


def _result(answer: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(answer, default=str))],
        structured_content=answer,
        is_error=not answer.get("success", False),
    )


#: the Host headers a server reached only through the loopback interface answers (any port)
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")


def _host_checks(allowed_hosts: Sequence[str] | None) -> TransportSecuritySettings:
    """The SDK's Host/Origin checks (DNS rebinding): on for the listed hosts; off only when the host
    passes ``None`` on purpose because its own server already decides which Host reaches the app."""
    if isinstance(allowed_hosts, str):
        raise TypeError('allowed_hosts must be a list of "host:port" strings, not a single string')
    if allowed_hosts is None:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = list(allowed_hosts)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class KnowledgeMcpApp:
    """An ASGI app serving the knowledge tool; mount it anywhere (``app.mount("/mcp", ...)``).

    Served on its own, its lifespan starts the SDK's session manager. Mounted inside another app
    (whose lifespan does not reach mounted apps) the manager starts on the first request; call
    :meth:`aclose` on shutdown, or enter :meth:`lifespan` from the host's own lifespan.
    """

    def __init__(self, server: Server[Any], allowed_hosts: Sequence[str] | None = None):
        self.server = server
        self._asgi = server.streamable_http_app(
            streamable_http_path="/",
            stateless_http=True,
            json_response=True,
            transport_security=_host_checks(allowed_hosts),
        )
        self._runner: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Any = None) -> AsyncIterator[None]:
        """Run the session manager for as long as the block lasts."""
        async with self.server.session_manager.run():
            self._started.set()
            try:
                yield
            finally:
                self._started = asyncio.Event()

    async def _run_until_closed(self) -> None:
        async with self.lifespan():
            await self._stop.wait()

    async def _ensure_started(self) -> None:
        async with self._lock:
            if self._started.is_set():
                return
            if self._runner is None:
                self._runner = asyncio.create_task(self._run_until_closed(), name="context-engine-mcp")
        await self._started.wait()

    async def aclose(self) -> None:
        """Stop a session manager this app started for itself."""
        if self._runner is not None:
            self._stop.set()
            await self._runner
            self._runner = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if scope["type"] == "http":
            await self._ensure_started()
            # the SDK's route sits at "/": whatever path this app is reached at becomes its root
            root = scope["path"].rstrip("/")
            scope = {**scope, "root_path": root, "path": root + "/"}
        await self._asgi(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol when this app is served on its own."""
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        self._runner = asyncio.create_task(self._run_until_closed(), name="context-engine-mcp")
        await self._started.wait()
        await send({"type": "lifespan.startup.complete"})
        while (await receive())["type"] != "lifespan.shutdown":
            pass
        await self.aclose()
        await send({"type": "lifespan.shutdown.complete"})


def create_mcp_app(
    engine: ContextEngine,
    *,
    principals: Any,
    scope: Any,
    redaction: Any = None,
    secret_key: Any = None,
    compute: ComputeRunner | None = None,
    map_reduce: MapReduceRunner | None = None,
    allowed_hosts: Sequence[str] | None = LOOPBACK_HOSTS,
    approval_scope: Any = None,
) -> KnowledgeMcpApp:
    """Serve ``search_knowledge_base`` over MCP streamable HTTP (stateless, JSON responses).

    ``principals`` (``[]`` is anonymous, ``TRUSTED`` skips the ACL) and ``scope`` (a list of source
    ids, a ``Scope`` or ``UNSCOPED``) are required: each is a value or a zero-argument callable,
    resolved on every call. A resolver that returns None fails that call with a model-facing error,
    so a missing resolver never opens the corpus. ``redaction`` / ``secret_key`` likewise.
    ``allowed_hosts`` (``"host:port"``, ``*`` for any port) are the Host headers the SDK's DNS-rebinding
    checks let through (Origin likewise, over http and https): by default the loopback names only, so
    a web page on another origin cannot drive a local server through a rebound name. A server reached
    by other names lists them; ``None`` turns the checks off, for an app whose own server already
    refuses unknown Host headers (e.g. Django's ``ALLOWED_HOSTS``, Starlette's ``TrustedHostMiddleware``).

    ``search_tools`` and ``execute_tool`` (governed tools, :mod:`context_engine.tools`) are served
    beside it under the same principals; ``approval_scope`` (a value or zero-argument callable, never a
    tool argument) is the scope an approval is granted in.
    """

    served = served_tools(engine, compute, map_reduce)

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=[await tool.listing() for tool in served.values()])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        tool = served.get(params.name)
        if tool is None:
            return _result({"success": False, "error": f"unknown tool {params.name!r}; call {TOOL_NAME}."})
        token = _request.set(ctx.request if isinstance(ctx.request, Request) else None)
        try:
            host = HostValues(
                caller=await _resolve(principals),
                ceiling=await _resolve(scope),
                policy=await _resolve(redaction),
                key=await _resolve(secret_key),
                approval_scope=await _resolve(approval_scope),
            )
        except Exception:
            log.exception("knowledge tool over MCP: a host resolver raised")
            return _result({"success": False, "error": HOST_ERROR})
        finally:
            _request.reset(token)
        if host.caller is None or host.ceiling is None:
            missing = "principals" if host.caller is None else "scope"
            log.error("knowledge tool over MCP: the host's %s resolver returned None", missing)
            return _result({"success": False, "error": HOST_ERROR})
        return _result(await tool.answer(engine, host, dict(params.arguments or {})))

    server: Server[Any] = Server("context-engine", on_list_tools=list_tools, on_call_tool=call_tool)
    return KnowledgeMcpApp(server, allowed_hosts)
