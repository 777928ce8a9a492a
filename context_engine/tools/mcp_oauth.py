"""mcp tools whose server requires OAuth: the authorization flow, its popup contract, and governed calls.

The MCP SDK's own client does the protocol (``mcp.client.auth.OAuthClientProvider``: discovery
from the server's 401, dynamic registration, PKCE, the ``state`` and ``iss`` checks, the code
exchange and refresh). This module only decides where it runs and what people see:

* :meth:`McpOAuthFlows.start` connects to the server; if it answers 401 with OAuth metadata the
  SDK builds an authorization URL, which is handed back for a popup, and the flow waits (in this
  process, holding no pooled connection) for the provider to send the browser to the callback.
* :meth:`McpOAuthFlows.complete` takes the callback's query and answers the popup's message:
  ``{"type": "mcp-oauth-error", "code", "message", "correlation_id"}`` with one of six stable
  codes and a fixed sentence, or ``{"type": "mcp-oauth-success", "correlation_id", "tool_id"}``.
  The provider's own words and any exception text go to the log beside the correlation id only.
* :func:`call` runs a tool call with the stored tokens: an expired access token is refreshed by
  the SDK; one the server refuses is refreshed once; when nothing works the call fails with
  ``mcp_oauth_required`` (a person must connect the tool again), never with a token in sight.

Tokens and the client registration are stored encrypted under the engine's ``secret_key``
(:mod:`context_engine.tools.mcp_oauth_store`). Every request of a flow or call, to the MCP server
or its authorization server, passes the tool's egress check.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from context_engine.errors import ConfigError, ContextEngineError
from context_engine.tools import mcp_tool
from context_engine.tools.crypto import ConfigCipher
from context_engine.tools.egress import EgressPolicy, Resolver, checked_address
from context_engine.tools.errors import EgressRefused, ToolConfigInvalid, ToolExecutionFailed, missing_extra
from context_engine.tools.mcp_tool import first_of, request_hooks, reraise_refusal

log = logging.getLogger("context_engine.tools.mcp_oauth")

#: the purpose a host's ``http_client_factory`` would be asked for on these requests
PURPOSE = "mcp_oauth"
#: how long a started flow waits for the provider's callback (seconds)
FLOW_TTL_SECONDS = 600.0
CORRELATION_PREFIX = "mcpoauth_"
ERROR_TYPE = "mcp-oauth-error"
SUCCESS_TYPE = "mcp-oauth-success"

#: the popup's stable codes and the sentence a person sees for each (the sentence may be reworded)
MESSAGES: dict[str, str] = {
    "idp_denied": "The provider declined the connection. Ask your administrator to approve this app, then try again.",
    "malformed_callback": "The provider's response was incomplete. Please start the connection again.",
    "state_invalid": "This connection attempt expired. Please start again.",
    "token_endpoint_unreachable": "Could not reach the provider's servers. Please try again in a moment.",
    "token_exchange_failed": "The provider rejected the connection. Please try again.",
    "internal_error": "Something went wrong completing the connection.",
}
_MAX_CALLBACK_VALUE = 4096
#: flows one process keeps waiting at once (each holds a task and two futures, no connection)
MAX_PENDING_FLOWS = 256


class McpOAuthBusy(ContextEngineError):
    """Too many authorizations wait for their callback in this process; one ends within the TTL."""

    code = "mcp_oauth_busy"
    status = 503
    retry_after = 30


class McpOAuthRequired(ContextEngineError):
    """The tool's server needs an authorization the engine does not hold (or no longer holds)."""

    code = "mcp_oauth_required"
    status = 409


def uses_oauth(config: Mapping[str, Any]) -> bool:
    return "oauth" in config


def host_transport(factory: Callable[[str], Any] | None) -> Any:
    """An httpx2 transport sending through the host's ``http_client_factory("mcp_oauth")`` client, or ``None``.

    The host's client is long-lived and its own: it is never closed or changed here, and every
    request sent through it still passes the egress check (the hooks sit on the engine's client).
    """
    supplied = factory(PURPOSE) if factory is not None else None
    if supplied is None:
        return None
    import httpx2

    if not isinstance(supplied, httpx2.AsyncClient):
        raise ConfigError(
            "http_client_factory('mcp_oauth') must return an httpx2.AsyncClient (the MCP SDK's HTTP client) or None",
            code="invalid_http_client",
        )

    host_client: httpx2.AsyncClient = supplied

    class ThroughHostClient(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            return await host_client.send(request, stream=True, follow_redirects=False)

    return ThroughHostClient()


def _sdk() -> Any:
    try:
        from mcp.client import auth
    except ImportError:
        raise missing_extra("mcp", "mcp") from None
    return auth


def _provider(
    config: Mapping[str, Any],
    store: Any,
    redirect: Callable[[str], Awaitable[None]],
    callback: Callable[[], Awaitable[Any]],
) -> Any:
    from mcp.shared.auth import OAuthClientMetadata

    oauth = config["oauth"]
    metadata = OAuthClientMetadata(
        redirect_uris=[oauth["redirect_uri"]],
        client_name=oauth.get("client_name", "context-engine"),
        scope=oauth.get("scope"),
    )
    return _sdk().OAuthClientProvider(
        server_url=config["url"],
        client_metadata=metadata,
        storage=store,
        redirect_handler=redirect,
        callback_handler=callback,
    )


def new_correlation_id() -> str:
    return CORRELATION_PREFIX + secrets.token_hex(16)


def error_payload(code: str, correlation_id: str) -> dict[str, Any]:
    return {"type": ERROR_TYPE, "code": code, "message": MESSAGES[code], "correlation_id": correlation_id}


# ---------------------------------------------------------------------------------------- calls
class _NeedsPerson:
    """The redirect handler of a governed call: a call never waits for a person, it stops instead."""

    def __init__(self) -> None:
        self.tripped = False

    async def redirect(self, url: str) -> None:
        self.tripped = True
        raise McpOAuthRequired("the MCP server requires an authorization")

    async def callback(self) -> Any:  # never reached: redirect always raises first
        raise McpOAuthRequired("the MCP server requires an authorization")


async def call(
    db: Any,
    secret_key: Any,
    tool_id: str,
    config: dict[str, Any],
    arguments: dict[str, Any],
    *,
    resolver: Resolver | None = None,
    http_client_factory: Callable[[str], Any] | None = None,
) -> Any:
    """One ``tools/call`` with the tool's stored tokens (refreshed when expired or refused once)."""
    from context_engine.tools.mcp_oauth_store import McpTokenStore

    store = McpTokenStore(db, ConfigCipher(secret_key), tool_id)
    transport = host_transport(http_client_factory)
    for attempt in range(2):
        person = _NeedsPerson()
        provider = _provider(config, store, person.redirect, person.callback)
        # the SDK reads tokens from storage, but neither when they expire nor where to refresh them
        metadata, expires = await store.refresh_context()
        provider.context.oauth_metadata, provider.context.token_expiry_time = metadata, expires
        try:
            result = await mcp_tool.call(config, arguments, resolver=resolver, auth=provider, transport=transport)
        except ToolExecutionFailed:
            if not person.tripped:
                raise
        else:
            await _keep_metadata(store, provider, metadata)
            return result
        tokens = await store.get_tokens()
        if attempt == 0 and tokens is not None and tokens.refresh_token:
            await store.mark_expired()  # the server refused the access token: refresh it once
            continue
        break
    raise McpOAuthRequired(
        "this mcp tool's server requires an OAuth authorization that is missing or was revoked: "
        "connect the tool again (start_mcp_oauth)"
    )


# ---------------------------------------------------------------------------------------- flows
@dataclass
class _Pending:
    tool_id: str
    correlation_id: str
    code: asyncio.Future[Any]
    task: asyncio.Task[None]
    store: Any
    #: the host origin the popup posts its message to (that of ``oauth.redirect_uri``)
    origin: str


class McpOAuthFlows:
    """The authorization flows this process started, keyed by the ``state`` the SDK generated.

    A flow lives in the process that started it: the provider's callback must reach the same
    process (one worker, or sticky routing for the callback path). A callback for a flow this
    process does not hold answers ``state_invalid``.
    """

    def __init__(self, ttl_seconds: float = FLOW_TTL_SECONDS):
        self.ttl_seconds = ttl_seconds
        self._pending: dict[str, _Pending] = {}

    async def start(
        self,
        db: Any,
        secret_key: Any,
        tool_id: str,
        config: dict[str, Any],
        *,
        resolver: Resolver | None = None,
        http_client_factory: Callable[[str], Any] | None = None,
    ) -> dict[str, Any]:
        """Connect to the tool's server; ``{"status": "authorization_required", "authorization_url", ...}``
        when it wants a person's consent, ``{"status": "connected", ...}`` when it needs none (or
        the stored tokens still work)."""
        from context_engine.tools.mcp_oauth_store import McpTokenStore

        if not uses_oauth(config):
            raise ToolConfigInvalid("this mcp tool has no 'oauth' section: it connects without an authorization")
        _sdk()
        if len(self._pending) >= MAX_PENDING_FLOWS:
            raise McpOAuthBusy(f"{MAX_PENDING_FLOWS} authorizations already wait for their callback; retry later")
        transport = host_transport(http_client_factory)
        correlation_id = new_correlation_id()
        loop = asyncio.get_running_loop()
        shown: asyncio.Future[str] = loop.create_future()
        code: asyncio.Future[Any] = loop.create_future()
        store = McpTokenStore(db, ConfigCipher(secret_key), tool_id)

        async def redirect(url: str) -> None:
            if not shown.done():
                shown.set_result(url)

        async def callback() -> Any:
            return await asyncio.wait_for(code, self.ttl_seconds)

        provider = _provider(config, store, redirect, callback)
        task = loop.create_task(_connect(config, store, provider, resolver, transport))
        timeout = float(config.get("timeout", 30.0))
        waiting: set[asyncio.Future[Any]] = {shown, task}
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if shown.done():
            url = shown.result()
            state = (parse_qs(urlsplit(url).query).get("state") or [""])[0]
            self._pending[state] = _Pending(
                tool_id, correlation_id, code, task, store, origin_of(config["oauth"]["redirect_uri"])
            )
            task.add_done_callback(lambda _: self._pending.pop(state, None))
            expires = datetime.fromtimestamp(time.time() + self.ttl_seconds, UTC)
            log.info("mcp oauth %s: authorization started for tool %s", correlation_id, tool_id)
            return {
                "status": "authorization_required",
                "authorization_url": url,
                "correlation_id": correlation_id,
                "expires_at": expires.isoformat(),
            }
        if not task.done():
            task.cancel()
            log.warning("mcp oauth %s: the server did not answer within %g s", correlation_id, timeout)
            raise ToolExecutionFailed(
                f"the MCP server or its authorization server did not answer within {timeout:g} s",
                code="mcp_oauth_unavailable",
            )
        failure = task.exception()
        if failure is not None:
            reraise_refusal(failure)
            log.warning("mcp oauth %s: connecting failed: %s", correlation_id, _detail(failure))
            raise ToolExecutionFailed(
                f"could not start an authorization with the MCP server (reference {correlation_id})",
                code="mcp_oauth_unavailable",
            )
        return {"status": "connected", "correlation_id": correlation_id}

    async def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The popup's message for the provider's callback query (``code``/``state``/``error``/``iss``)."""
        return (await self.answer(params))[0]

    async def answer(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The popup's message and the origin to post it to (``None``: the callback matched no flow)."""
        state = _value(params, "state")
        pending = self._pending.pop(state, None) if state else None
        return await self._finish(params, state, pending), pending.origin if pending is not None else None

    async def _finish(self, params: Mapping[str, Any], state: str | None, pending: _Pending | None) -> dict[str, Any]:
        code, error = _value(params, "code"), _value(params, "error")
        correlation_id = pending.correlation_id if pending is not None else new_correlation_id()
        if state is None:
            return self._failed("malformed_callback", correlation_id, "the callback carries no usable state")
        if pending is None:
            return self._failed("state_invalid", correlation_id, "no flow of this process waits for that state")
        if error is not None:
            pending.code.cancel()
            description = _value(params, "error_description") or ""
            return self._failed("idp_denied", correlation_id, f"provider answered {error!r}: {description!r}")
        if code is None:
            pending.code.cancel()
            return self._failed("malformed_callback", correlation_id, "the callback carries no code")
        from mcp.shared.auth import AuthorizationCodeResult

        pending.code.set_result(AuthorizationCodeResult(code=code, state=state, iss=_value(params, "iss")))
        try:
            await asyncio.wait_for(asyncio.shield(pending.task), timeout=60.0)
        except TimeoutError:
            pending.task.cancel()
            return self._failed("token_endpoint_unreachable", correlation_id, "the exchange did not finish in 60 s")
        except Exception as exc:
            return self._failed(_failure_code(exc, pending.store.saved_tokens), correlation_id, _detail(exc))
        log.info("mcp oauth %s: tool %s connected", correlation_id, pending.tool_id)
        return {"type": SUCCESS_TYPE, "correlation_id": correlation_id, "tool_id": pending.tool_id}

    def _failed(self, code: str, correlation_id: str, detail: str) -> dict[str, Any]:
        log.warning("mcp oauth %s: %s (%s)", correlation_id, code, detail)
        return error_payload(code, correlation_id)

    async def aclose(self) -> None:
        """Cancel every flow still waiting for its callback."""
        pending, self._pending = list(self._pending.values()), {}
        for flow in pending:
            flow.task.cancel()
        await asyncio.gather(*(flow.task for flow in pending), return_exceptions=True)


async def _keep_metadata(store: Any, provider: Any, known: Any) -> None:
    """Store the authorization server's metadata when the SDK discovered it anew."""
    found = provider.context.oauth_metadata
    if found is not None and found != known:
        await store.set_metadata(found)


async def _connect(
    config: Mapping[str, Any], store: Any, provider: Any, resolver: Resolver | None, transport: Any
) -> None:
    """Open one MCP session through the SDK's OAuth provider (the flow runs inside its first request)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    policy = EgressPolicy.from_config(dict(config))
    await checked_address(httpx.URL(config["url"]), policy, resolver)
    timeout = float(config.get("timeout", 30.0))
    headers = dict(config.get("headers") or {})
    hooks = request_hooks(policy, resolver)
    async with httpx2.AsyncClient(
        headers=headers, timeout=timeout, trust_env=False, auth=provider, event_hooks=hooks, transport=transport
    ) as http:
        transport = streamable_http_client(config["url"], http_client=http)
        async with Client(transport, read_timeout_seconds=timeout, cache=None):
            pass
    await _keep_metadata(store, provider, None)


def _value(params: Mapping[str, Any], key: str) -> str | None:
    """One callback parameter as a bounded non-empty string (a repeated one: its last value)."""
    raw = params.get(key)
    if isinstance(raw, list | tuple):
        raw = raw[-1] if raw else None
    if not isinstance(raw, str) or not raw or len(raw) > _MAX_CALLBACK_VALUE:
        return None
    return raw


def _failure_code(exc: BaseException, saved_tokens: bool) -> str:
    """The popup code for a flow that failed after the provider sent the browser back."""
    import httpx2

    auth = _sdk()
    if saved_tokens:
        return "internal_error"  # the exchange worked; what failed afterwards is not the provider's
    if first_of(exc, auth.OAuthTokenError) is not None:
        return "token_exchange_failed"
    if first_of(exc, httpx2.TransportError) is not None or first_of(exc, EgressRefused) is not None:
        return "token_endpoint_unreachable"
    if first_of(exc, auth.OAuthFlowError) is not None:
        return "malformed_callback"  # the SDK refused the response itself (issuer mix-up, no code)
    return "internal_error"


def _detail(exc: BaseException) -> str:
    """What the log gets: the innermost exception's type and text (never shown to a person)."""
    inner = exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    return f"{type(inner).__name__}: {inner}"[:2000]


# ---------------------------------------------------------------------------------------- popup
def popup_page(payload: Mapping[str, Any], target_origin: str | None) -> tuple[str, dict[str, str]]:
    """The callback's HTML and its headers: posts ``payload`` to ``window.opener`` on ``target_origin``.

    ``target_origin`` is the host's own origin (that of the tool's ``oauth.redirect_uri``), never
    one read from the request, so the message cannot reach another site's window; ``None`` (a
    callback for no flow this process holds) shows the page without posting. The only script
    is allowed by its hash; nothing is cached, framed or sent on as a referrer (the URL held a code).
    """
    message = _script_literal(dict(payload))
    post = ""
    if target_origin:
        post = f"if(window.opener){{window.opener.postMessage(m,{_script_literal(target_origin)});}}"
    script = f'(function(){{var m={message};{post}if(m.type!=="{ERROR_TYPE}"){{window.close();}}}})();'
    failed = payload.get("type") == ERROR_TYPE
    headline = str(payload.get("message")) if failed else "Connected. You can close this window."
    reference = html.escape(str(payload.get("correlation_id", "")))
    page = (
        '<!doctype html><html><head><meta charset="utf-8"><title>Connection</title></head><body>'
        f"<p>{html.escape(headline)}</p><p>Reference: {reference}</p><script>{script}</script></body></html>"
    )
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": f"default-src 'none'; script-src 'sha256-{digest}'; frame-ancestors 'none'",
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    return page, headers


def _script_literal(value: Any) -> str:
    """``value`` as JSON that cannot end the script element or a JavaScript string early."""
    text = json.dumps(value, separators=(",", ":"))
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL, as ``postMessage`` names a target."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
