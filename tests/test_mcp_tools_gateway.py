"""``search_tools`` and ``execute_tool`` served beside the knowledge tool by ``create_mcp_app``, called
with the MCP SDK's own client over real HTTP: the caller sees only the tools its principals may see,
a gated tool answers ``approval_required`` until a person approves it in the host's approval scope,
and a refusal carries the library's stable code."""

from __future__ import annotations

from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from context_engine import ContextEngine
from context_engine.mcp import create_mcp_app
from context_engine.tools import resolve_approval
from tests import test_knowledge_tool_doors as doors
from tests.test_knowledge_tool_doors import ServerThread

module_database = doors.module_database
tool_engine = doors.tool_engine


async def call(url: str, tool: str, args: dict[str, Any], token: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert {"search_knowledge_base", "search_tools", "execute_tool"} <= listed
            result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return result.structured_content


async def test_tools_are_found_and_run_under_the_callers_principals(tool_engine: ContextEngine) -> None:
    calls: list[int] = []

    def add(a: int, b: int) -> int:
        calls.append(a + b)
        return a + b

    tool_engine.register_function_tool(add, name="add_numbers", description="add two numbers", acl=["group:hr"])
    tool_engine.register_function_tool(add, name="pay_out", description="moves money", requires_approval=True)
    tokens = {"hr": ["group:hr"], "guest": []}
    from context_engine.mcp import current_request

    def principals() -> list[str]:
        request = current_request()
        assert request is not None
        return tokens[(request.headers.get("authorization") or "").removeprefix("Bearer ")]

    app = create_mcp_app(tool_engine, principals=principals, scope=lambda: [], approval_scope="tenant-1")
    with ServerThread(app) as base:
        url = base + "/mcp"
        hr = await call(url, "search_tools", {"query": "add numbers"}, "hr")
        guest = await call(url, "search_tools", {"name_contains": "add"}, "guest")
        ran = await call(url, "execute_tool", {"name": "fn_add_numbers", "arguments": {"a": 2, "b": 3}}, "hr")
        hidden = await call(url, "execute_tool", {"name": "fn_add_numbers", "arguments": {"a": 2, "b": 3}}, "guest")
        gated = await call(url, "execute_tool", {"name": "fn_pay_out", "arguments": {"a": 1, "b": 1}}, "guest")
        approval_id = gated["approval_required"]["approval_id"]
        await resolve_approval(tool_engine, approval_id, "approved", approver="a person")
        paid = await call(url, "execute_tool", {"name": "fn_pay_out", "arguments": {"a": 1, "b": 1}}, "guest")
        bad = await call(url, "execute_tool", {"name": "fn_add_numbers", "surprise": 1}, "hr")
    assert [t["name"] for t in hr["tools"]] == ["fn_add_numbers"] and hr["success"] is True
    assert guest == {"success": True, "tools": [], "next_cursor": None}
    assert ran["success"] is True and ran["result"] == 5
    assert hidden["success"] is False and hidden["error"]["code"] == "tool_not_found"
    assert gated["success"] is False and approval_id
    assert paid["success"] is True and paid["result"] == 2
    assert bad == {"success": False, "error": {"code": "invalid_request", "message": "unknown arguments: surprise"}}
    assert calls == [5, 2]  # the hidden and the unapproved calls ran nothing
