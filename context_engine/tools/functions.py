"""Function tools: Python callables of the host, validated against their own signature.

They live in memory on the engine (nothing is persisted), are named ``fn_<name>``, and take the
same ACL and approval gate as stored tools. A sync function runs in a worker thread so it never
blocks the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, ValidationError, create_model

from context_engine.tools.errors import ToolArgumentsInvalid, ToolConfigInvalid
from context_engine.tools.models import ToolConfig, call_name


@dataclass(frozen=True)
class FunctionTool:
    fn: Callable[..., Any]
    name: str
    description: str
    acl: tuple[str, ...]
    requires_approval: bool
    arguments_model: Any

    @property
    def call_name(self) -> str:
        return call_name("function", self.name)

    @property
    def parameters(self) -> dict[str, Any]:
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def visible_to(self, caller: tuple[str, ...] | None) -> bool:
        return caller is None or not self.acl or bool(set(self.acl) & set(caller))

    def check(self, arguments: Any) -> dict[str, Any]:
        """The keyword arguments for the function, or a precise refusal naming the first bad one."""
        if not isinstance(arguments, dict):
            raise ToolArgumentsInvalid("arguments must be a JSON object")
        try:
            parsed = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = "/".join(str(p) for p in first["loc"]) or "(root)"
            raise ToolArgumentsInvalid(
                f"arguments do not match the function's signature at {where}: {first['msg']}",
                details={"path": [str(p) for p in first["loc"]], "rule": first["type"]},
            ) from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def call(self, arguments: Any) -> Any:
        kwargs = self.check(arguments)
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


def _arguments_model(fn: Callable[..., Any], name: str) -> Any:
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolConfigInvalid(f"function tool {name!r}: only named parameters can be filled from arguments")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


class FunctionRegistry:
    """The function tools of one engine, by call name (registering a name again replaces it)."""

    def __init__(self) -> None:
        self._tools: dict[str, FunctionTool] = {}
        self._lock = threading.Lock()

    def register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        acl: Sequence[str] | None = None,
        requires_approval: bool = False,
    ) -> FunctionTool:
        if not callable(fn):
            raise ToolConfigInvalid("register_function_tool needs a callable")
        try:
            spec = ToolConfig(
                name=str(name or getattr(fn, "__name__", "")),
                kind="function",
                description=description if description is not None else inspect.getdoc(fn) or "",
                acl=list(acl or []),
                requires_approval=requires_approval,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ToolConfigInvalid(f"function tool: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        tool = FunctionTool(
            fn=fn,
            name=spec.name,
            description=spec.description,
            acl=tuple(spec.acl),
            requires_approval=spec.requires_approval,
            arguments_model=_arguments_model(fn, spec.name),
        )
        with self._lock:
            self._tools[tool.call_name] = tool
        return tool

    def get(self, call_name: str) -> FunctionTool | None:
        with self._lock:
            return self._tools.get(call_name)

    def all(self) -> list[FunctionTool]:
        with self._lock:
            return list(self._tools.values())

    def remove(self, call_name: str) -> bool:
        with self._lock:
            return self._tools.pop(call_name, None) is not None
