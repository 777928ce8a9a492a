"""mcp tools against the official SDK's own server (``MCPServer`` over streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from context_engine import ContextEngine
from context_engine.tools import EgressRefused, ToolArgumentsInvalid, ToolConfig, ToolExecutionFailed
from tests import tools_support
from tests.tools_support import table_rows
from tests.waiting import until

hook_log = tools_support.hook_log  # a shared fixture
tools_engine = tools_support.tools_engine  # a shared fixture

TOKEN = "Bearer mcp-secret-71c0de55aa"
API_KEY = 'mk+ABC/def=ghi&j k"q'


class HeaderLog:
    """ASGI middleware recording the Authorization header of every request to the MCP app."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.authorizations: list[str | None] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            self.authorizations.append((headers.get(b"authorization") or b"").decode() or None)
        await self.app(scope, receive, send)


def build_server() -> MCPServer:
    server = MCPServer("inventory")

    @server.tool()
    def stock(sku: str) -> dict[str, Any]:
        """Units in stock for a SKU."""
        return {"sku": sku, "units": len(sku) * 10}

    @server.tool()
    def refuse(sku: str) -> str:
        """Always reports an error, naming the SKU and a quoted value."""
        raise ToolError(f"no record for sku {sku} (key 'internal-{sku}')")

    @server.tool()
    def revoked(sku: str) -> str:
        """Reports the caller's key as revoked, spelling it as a careless server might."""
        spelled = [
            quote_plus(API_KEY),
            quote(API_KEY, safe=""),
            json.dumps(API_KEY),
            base64.b64encode(API_KEY.encode()).decode(),
        ]
        raise ToolError(f"key revoked: {' / '.join(spelled)}")

    return server


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[tuple[str, HeaderLog]]:
    app = HeaderLog(build_server().streamable_http_app())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="fake-mcp", daemon=True)
    thread.start()
    until(lambda: server.started or not thread.is_alive(), "the MCP test server starting")
    if not server.started:
        raise RuntimeError("the MCP test server did not start")
    try:
        yield f"http://127.0.0.1:{port}/mcp", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def mcp_tool(url: str, remote: str, **extra: Any) -> ToolConfig:
    config = {
        "url": url,
        "tool": remote,
        "headers": {"Authorization": TOKEN},
        "allowed_hosts": ["127.0.0.1"],
        "parameters": {"properties": {"sku": {"type": "string"}}, "required": ["sku"]},
        **extra,
    }
    return ToolConfig(name=remote, kind="mcp", description="inventory " + remote, config=config)


async def test_an_mcp_tool_calls_the_remote_server(
    tools_engine: ContextEngine, mcp_server: tuple[str, HeaderLog], database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url, headers = mcp_server
    headers.authorizations.clear()
    await tools_engine.register_tool(mcp_tool(url, "stock"))
    out = await tools_engine.execute_tool("mcp_stock", {"sku": "abc"}, principals=[])
    assert out["result"]["structured"] == {"sku": "abc", "units": 30}
    assert out["result"]["content"][0]["type"] == "text"
    assert headers.authorizations and set(headers.authorizations) == {TOKEN}
    secret = TOKEN.split()[1]
    audit = json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str)
    for text in (json.dumps(out), audit, *(r.getMessage() for r in caplog.records)):
        assert secret not in text


async def test_a_remote_error_is_a_reduced_tool_failure(
    tools_engine: ContextEngine, mcp_server: tuple[str, HeaderLog], database_url: str
) -> None:
    url, _ = mcp_server
    await tools_engine.register_tool(mcp_tool(url, "refuse"))
    with pytest.raises(ToolExecutionFailed) as caught:
        await tools_engine.execute_tool("mcp_refuse", {"sku": "x1"}, principals=[])
    assert caught.value.message.endswith("no record for sku x1 (key '?')")
    assert caught.value.message.startswith("the remote tool reported an error: ")
    row = table_rows(database_url, "SELECT outcome, error_message FROM ce_tool_calls")[0]
    assert row == {"outcome": "error", "error_message": caught.value.message}


async def test_a_remote_error_spelling_a_secret_in_any_encoding_is_scrubbed(
    tools_engine: ContextEngine, mcp_server: tuple[str, HeaderLog], database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url, _ = mcp_server
    await tools_engine.register_tool(mcp_tool(url, "revoked", headers={"X-Api-Key": API_KEY}))
    with pytest.raises(ToolExecutionFailed) as caught:
        await tools_engine.execute_tool("mcp_revoked", {"sku": "x1"}, principals=[])
    assert caught.value.message.endswith('key revoked: [secret] / [secret] / "[secret]" / [secret]')
    spelled = {API_KEY, quote_plus(API_KEY), quote(API_KEY, safe=""), json.dumps(API_KEY)[1:-1]}
    spelled.add(base64.b64encode(API_KEY.encode()).decode())
    audit = json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str)
    # the fake remote server logs the key itself, in its own thread: those records are not ours
    ours = [r.getMessage() for r in caplog.records if not r.name.startswith(("mcp.server", "uvicorn"))]
    for text in (caught.value.message, audit, *ours):
        assert not [form for form in spelled if form in text], text


async def test_schema_and_egress_are_checked_before_connecting(
    tools_engine: ContextEngine, mcp_server: tuple[str, HeaderLog]
) -> None:
    url, headers = mcp_server
    headers.authorizations.clear()
    await tools_engine.register_tool(mcp_tool(url, "stock"))
    closed = mcp_tool(url, "stock", allowed_hosts=[])
    closed = closed.model_copy(update={"name": "closed"})
    await tools_engine.register_tool(closed)
    with pytest.raises(ToolArgumentsInvalid):
        await tools_engine.execute_tool("mcp_stock", {"sku": 5}, principals=[])
    with pytest.raises(EgressRefused):
        await tools_engine.execute_tool("mcp_closed", {"sku": "abc"}, principals=[])
    assert headers.authorizations == []


async def test_an_unreachable_mcp_server_fails_precisely(tools_engine: ContextEngine) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    await tools_engine.register_tool(mcp_tool(f"http://127.0.0.1:{port}/mcp", "stock", timeout=5))
    with pytest.raises(ToolExecutionFailed) as caught:
        await tools_engine.execute_tool("mcp_stock", {"sku": "abc"}, principals=[])
    assert caught.value.status == 502 and caught.value.code == "tool_failed"
