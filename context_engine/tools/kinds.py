"""The kinds a stored tool can be (``http``, ``db``, ``mcp``, ...), registered once by name.

A kind is one module holding one :class:`ToolKindSpec`: its name and call-name prefix, the check
that turns a config into the argument schema a model is shown, and the call that runs it. Every
door reads the kinds from here: ``ToolConfig``, registration, execution, the CLI's ``--kind``
choices, the ``kind`` filter of ``GET /tools`` and of the MCP ``search_tools`` tool, and the
OpenAPI document. The database stores the kind as text; registration is what checks it.

The built-in kinds register themselves in :mod:`context_engine.tools.builtin_kinds`, imported on the
first lookup, so the registry is never seen without them. A host or a test adds a kind with
:func:`register`. ``function`` is no stored kind: function tools live in the process
(``register_function_tool``) and are listed under that kind.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from context_engine.named_registry import NamedRegistry

if TYPE_CHECKING:
    import httpx

    from context_engine.tools.egress import Resolver

#: the kind every in-process function tool is listed as, and its call-name prefix
FUNCTION = "function"
FUNCTION_PREFIX = "fn_"
_NAME = re.compile(r"^[a-z][a-z0-9]{0,30}$")
_PREFIX = re.compile(r"^[a-z][a-z0-9]{0,30}_$")


@dataclass(frozen=True)
class KindContext:
    """What a call may use beyond its config and arguments, handed in by the engine."""

    http_client_factory: Callable[[str], httpx.AsyncClient | None] | None = None
    resolver: Resolver | None = None
    #: the engine's database and secret key, for a kind that keeps per-tool state (OAuth tokens)
    db: Any = None
    secret_key: Any = None
    tool_id: str | None = None


@dataclass(frozen=True)
class ToolKindSpec:
    """One tool kind: everything the governed path needs to register, gate and run its tools.

    ``check_config`` refuses a config it cannot run (``ToolConfigInvalid``, naming the key, never
    its value) and returns the JSON Schema of the model's arguments. ``call`` runs one call and
    returns a JSON-able result; it raises the tool errors of :mod:`context_engine.tools.errors`.
    The optional hooks: ``check_registration`` (async, before storing: e.g. a db role's privileges,
    on its own connection), ``check_arguments`` (before the approval gate: e.g. an argument that
    would override a fixed header), ``statements`` (text the call runs, stripped from its error
    messages) and ``outcome`` (the audit outcome of a result that still returns, e.g. ``http_error``).
    """

    name: str
    call_prefix: str
    summary: str
    check_config: Callable[[dict[str, Any]], dict[str, Any]]
    call: Callable[[dict[str, Any], dict[str, Any], KindContext], Awaitable[Any]]
    check_registration: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    check_arguments: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    statements: Callable[[dict[str, Any], dict[str, Any]], list[str]] | None = None
    outcome: Callable[[Any], str] | None = None


_KINDS = NamedRegistry[ToolKindSpec]("context_engine.tools.builtin_kinds")


def register(spec: ToolKindSpec) -> ToolKindSpec:
    """Add a kind. Its name and prefix must be new (a shared prefix would let two kinds' tools
    answer to one call name); call :func:`unregister` first to replace one."""
    if not isinstance(spec.name, str) or not _NAME.match(spec.name) or spec.name == FUNCTION:
        raise ValueError("a tool kind needs a name of lower-case letters and digits (at most 31), not 'function'")
    if not isinstance(spec.call_prefix, str) or not _PREFIX.match(spec.call_prefix):
        raise ValueError("a tool kind's call_prefix is lower-case letters and digits ending in '_' (e.g. 'http_')")
    known = _KINDS.check_free(spec.name, spec, "a tool kind")
    taken = {k.call_prefix: k.name for k in known.values() if k.name != spec.name}
    taken[FUNCTION_PREFIX] = FUNCTION
    if spec.call_prefix in taken:
        raise ValueError(f"call prefix {spec.call_prefix!r} is already the prefix of kind {taken[spec.call_prefix]!r}")
    return _KINDS.add(spec.name, spec)


def unregister(name: str) -> None:
    _KINDS.remove(name)


def get(name: str) -> ToolKindSpec | None:
    """The stored kind called ``name`` (None for ``function`` and for a kind no module registered)."""
    return _KINDS.loaded().get(name)


def names() -> list[str]:
    """The stored kinds: built-ins first, then in registration order."""
    return list(_KINDS.loaded())


def listed() -> list[str]:
    """Every kind a tool can be listed as: the stored kinds, then ``function``."""
    return [*names(), FUNCTION]


def call_prefix(kind: str) -> str:
    """The prefix of the call names of ``kind``'s tools (``http_get_weather``, ``fn_add``)."""
    if kind == FUNCTION:
        return FUNCTION_PREFIX
    spec = get(kind)
    if spec is None:
        raise ValueError(f"no tool kind is named {kind!r}")
    return spec.call_prefix


def filter_schema() -> dict[str, Any]:
    """The JSON Schema of a ``kind`` filter (the route's query parameter, the MCP tool's argument)."""
    return {"type": "string", "enum": listed()}
