"""mcp tools: one ``tools/call`` on a remote MCP server over streamable HTTP (the official SDK client).

The server's address passes the same egress check as an http tool before any connection is made;
the SDK itself follows a redirect only within the endpoint's origin. With a server's OAuth
provider (:mod:`context_engine.tools.mcp_oauth`, which calls :func:`call`), every request passes it.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx

from context_engine.tools.egress import EgressPolicy, Resolver, checked_address
from context_engine.tools.errors import (
    EgressRefused,
    ToolConfigInvalid,
    ToolExecutionFailed,
    ToolTimeout,
    missing_extra,
)
from context_engine.tools.schema import checked_schema, validate_arguments

DEFAULT_TIMEOUT = 30.0
_KEYS = {"url", "tool", "headers", "parameters", "timeout", "response_mode", "allow_private_network", "allowed_hosts"}
_KEYS |= {"oauth"}  # the section of a server that requires OAuth (``mcp_oauth``)
_OAUTH_KEYS = {"redirect_uri", "scope", "client_name"}
E = TypeVar("E", bound=BaseException)


def _http_url(value: Any) -> httpx.URL | None:
    """``value`` as an absolute http(s) URL with a host, else ``None``."""
    try:
        parsed = httpx.URL(value) if isinstance(value, str) else None
    except httpx.InvalidURL:
        return None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        return None
    return parsed


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """The argument schema of a valid mcp config; refuses anything it cannot run."""
    unknown = set(config) - _KEYS
    if unknown:
        raise ToolConfigInvalid(f"mcp tool config has unknown keys: {sorted(unknown)}")
    if _http_url(config.get("url")) is None:
        raise ToolConfigInvalid("mcp tool config needs the server's streamable HTTP url (http or https)")
    if not isinstance(config.get("tool"), str) or not config["tool"]:
        raise ToolConfigInvalid("mcp tool config needs 'tool', the name of the tool on the remote server")
    headers = config.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ToolConfigInvalid("mcp tool headers must be an object of strings")
    timeout = config.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
        raise ToolConfigInvalid("mcp tool timeout must be a number of seconds between 0 and 600")
    if "oauth" in config:
        check_oauth_config(config["oauth"])
    return checked_schema(config.get("parameters"))


def check_oauth_config(oauth: Any) -> None:
    """Refuse an ``oauth`` section the flow could not use."""
    if not isinstance(oauth, dict):
        raise ToolConfigInvalid("mcp tool 'oauth' must be an object with at least 'redirect_uri'")
    unknown = set(oauth) - _OAUTH_KEYS
    if unknown:
        raise ToolConfigInvalid(f"mcp tool 'oauth' has unknown keys: {sorted(unknown)}")
    redirect = _http_url(oauth.get("redirect_uri"))
    if redirect is None or redirect.fragment:
        raise ToolConfigInvalid(
            "mcp tool 'oauth.redirect_uri' must be the absolute http(s) URL of the host's OAuth callback"
        )
    for key in ("scope", "client_name"):
        if key in oauth and (not isinstance(oauth[key], str) or not oauth[key].strip() or len(oauth[key]) > 500):
            raise ToolConfigInvalid(f"mcp tool 'oauth.{key}' must be a non-empty string")


def request_hooks(policy: EgressPolicy, resolver: Resolver | None) -> dict[str, list[Any]]:
    """httpx2 event hooks running the egress check on every request a client sends (each hop)."""

    async def check(request: Any) -> None:
        await checked_address(httpx.URL(str(request.url)), policy, resolver)

    return {"request": [check]}


def first_of(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of ``kind`` in ``exc``, its causes, and any exception group inside."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def reraise_refusal(exc: BaseException) -> None:
    """Raise the egress refusal buried in ``exc`` (a hop to a host the policy refuses) as itself."""
    refused = first_of(exc, EgressRefused)
    if refused is not None:
        raise refused from None


async def call(
    config: dict[str, Any],
    arguments: dict[str, Any],
    *,
    resolver: Resolver | None = None,
    auth: Any = None,
    transport: Any = None,
) -> Any:
    """``{"content": [...], "structured": ..., "is_error": bool}`` from the remote tool.

    ``auth`` (an ``httpx2.Auth``, the SDK's OAuth provider) may send requests to other hosts (its
    authorization server), so with it every request passes the egress check, not only the first.
    ``transport`` (httpx2) carries the requests instead of the client's own connection pool.
    """
    try:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
    except ImportError:
        raise missing_extra("mcp", "mcp") from None

    validate_arguments(check_config(config), arguments)
    policy = EgressPolicy.from_config(config)
    await checked_address(httpx.URL(config["url"]), policy, resolver)
    timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
    headers = dict(config.get("headers") or {})
    hooks = None
    if auth is not None:
        hooks = request_hooks(policy, resolver)
    try:
        async with asyncio.timeout(timeout):
            async with httpx2.AsyncClient(
                headers=headers, timeout=timeout, trust_env=False, auth=auth, event_hooks=hooks, transport=transport
            ) as http:
                transport = streamable_http_client(config["url"], http_client=http)
                async with Client(transport, read_timeout_seconds=timeout, cache=None) as client:
                    result = await client.call_tool(config["tool"], arguments)
    except TimeoutError:
        raise ToolTimeout(f"the MCP server did not answer within {timeout:g} s") from None
    except Exception as exc:
        if auth is not None:
            reraise_refusal(exc)
        raise ToolExecutionFailed(f"the MCP server call failed ({type(exc).__name__})") from None
    content = [block.model_dump(mode="json", exclude_none=True, by_alias=True) for block in result.content]
    if result.is_error:
        text = " ".join(str(block.get("text", "")) for block in content).strip()
        raise ToolExecutionFailed(f"the remote tool reported an error: {text}" if text else "the remote tool failed")
    return {"content": content, "structured": result.structured_content}
