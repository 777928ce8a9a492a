"""``POST /tools/execute`` and ``GET /tools`` through FastAPI, Flask and Django, answered identically:
200 with the result, 202 while a gated tool waits for approval in the host's approval scope (never a
body field), 404 ``tool_not_found`` alike for a missing tool and one the caller may not see, 409 when
two visible tools share a name, 400 for arguments that break the tool's schema."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from context_engine import ContextEngine
from context_engine.tools import resolve_approval
from tests.conftest import make_config
from tests.test_conformance import ADAPTERS, CLIENTS, TOKEN, Caller, HostLog, fresh_database, host_callables

SECRET = "k" * 32


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def add(a: int, b: int) -> int:
    return a + b


def transcript(adapter: str, pg_base_url: str) -> dict[str, Any]:
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url, secret_key=SECRET))
        engine.register_function_tool(add, name="add_numbers", description="add two numbers", acl=["group:hr"])
        engine.register_function_tool(add, name="twin", description="first twin")
        engine.register_function_tool(add, name="pay", description="moves money", requires_approval=True)
        auth, principals = host_callables(HostLog())

        def approval_scope(request: Any) -> str:
            return "tenant-" + (request.headers.get("X-Tenant") or "none")

        out: dict[str, Any] = {}
        with CLIENTS[adapter](engine, auth, principals, approval_scope=approval_scope) as send:
            call = Caller(send)
            out["list_hr"] = call("GET", "/tools", who="group:hr")
            out["list_guest"] = call("GET", "/tools", who="group:guest", query={"name_contains": "add"})
            out["run"] = call("POST", "/tools/execute", who="group:hr",
                              json_body={"name": "fn_add_numbers", "arguments": {"a": 2, "b": 3}})
            out["hidden"] = call("POST", "/tools/execute", who="group:guest",
                                 json_body={"name": "fn_add_numbers", "arguments": {"a": 2, "b": 3}})
            out["missing"] = call("POST", "/tools/execute", who="group:guest",
                                  json_body={"name": "fn_nothing_here", "arguments": {}})
            out["bad_args"] = call("POST", "/tools/execute", who="group:hr",
                                   json_body={"name": "fn_add_numbers", "arguments": {"a": "two"}})
            out["scope_in_body"] = call("POST", "/tools/execute", who="group:hr",
                                        json_body={"name": "fn_pay", "arguments": {}, "approval_scope": "x"})
            gated = call("POST", "/tools/execute", who="group:hr",
                         json_body={"name": "fn_pay", "arguments": {"a": 1, "b": 1}})
            out["gated"] = gated
            approval = gated.body["approval_required"]["approval_id"]
            _run(resolve_approval(engine, approval, "approved", approver="ops"))
            out["other_tenant"] = send("POST", "/context/tools/execute", json.dumps(
                {"name": "fn_pay", "arguments": {"a": 1, "b": 1}}).encode(), {
                "Authorization": f"Bearer {TOKEN}", "X-Principals": "group:hr", "X-Tenant": "other",
                "Content-Type": "application/json"})
            out["paid"] = call("POST", "/tools/execute", who="group:hr",
                               json_body={"name": "fn_pay", "arguments": {"a": 1, "b": 1}})
            out["replayed"] = call("POST", "/tools/execute", who="group:hr",
                                   json_body={"name": "fn_pay", "arguments": {"a": 1, "b": 1}})
    return out


@pytest.fixture(scope="module")
def transcripts(pg_base_url: str) -> dict[str, dict[str, Any]]:
    return {adapter: transcript(adapter, pg_base_url) for adapter in ADAPTERS}


def test_the_tool_routes(transcripts: dict[str, dict[str, Any]]) -> None:
    for adapter, t in transcripts.items():
        assert [x["name"] for x in t["list_hr"].body["tools"]] == ["fn_add_numbers", "fn_twin", "fn_pay"], adapter
        assert t["list_guest"].status == 200 and t["list_guest"].body == {"tools": [], "next_cursor": None}
        assert t["run"].status == 200 and t["run"].body["result"] == 5
        assert t["hidden"].status == 404 and t["hidden"].body["error"]["code"] == "tool_not_found"
        assert t["missing"].status == 404 and t["hidden"].body["error"] == {
            **t["missing"].body["error"],
            "message": t["hidden"].body["error"]["message"],
        }
        assert t["missing"].body["error"]["message"].replace("fn_nothing_here", "X") == t["hidden"].body["error"][
            "message"
        ].replace("fn_add_numbers", "X")
        assert t["bad_args"].status == 400
        assert t["scope_in_body"].status == 400 and "approval_scope" in t["scope_in_body"].body["error"]["message"]
        assert t["gated"].status == 202 and t["gated"].body["approval_required"]["approval_id"]
        assert t["other_tenant"].status == 202  # an approval holds in the scope it was asked in only
        assert t["paid"].status == 200 and t["paid"].body["result"] == 2
        assert t["replayed"].status == 202  # single use: the same call asks again
    statuses = {a: {k: r.status for k, r in t.items()} for a, t in transcripts.items()}
    assert statuses["fastapi"] == statuses["flask"] == statuses["django"]


def test_a_fixed_parameter_override_is_the_same_400_through_every_adapter(pg_base_url: str) -> None:
    from tests.fakes import FakeHTTPServer, json_reply

    answers: dict[str, Any] = {}
    with FakeHTTPServer() as server, fresh_database(pg_base_url) as url:
        server.route("GET", "/w", json_reply(200, {"ok": True}))
        engine = ContextEngine(make_config(url, secret_key=SECRET))
        config = {"url": server.url("/w"), "query": {"tenant_id": "acme-7f3"}, "allowed_hosts": ["127.0.0.1"]}
        _run(engine.register_tool({"name": "w", "kind": "http", "config": config}))
        auth, principals = host_callables(HostLog())
        for adapter in ADAPTERS:
            with CLIENTS[adapter](engine, auth, principals) as send:
                call = Caller(send)
                answers[adapter] = call(
                    "POST", "/tools/execute", json_body={"name": "http_w", "arguments": {"Tenant_ID": "other"}}
                )
                answers[adapter + "_ok"] = call("POST", "/tools/execute", json_body={"name": "http_w", "arguments": {}})
        assert [r.query["tenant_id"] for r in server.requests] == ["acme-7f3"] * 3
    for adapter in ADAPTERS:
        refused = answers[adapter]
        assert refused.status == 400 and refused.body["error"]["code"] == "fixed_parameter_override", adapter
        assert "'Tenant_ID'" in refused.body["error"]["message"] and "acme-7f3" not in json.dumps(refused.body)
        assert answers[adapter + "_ok"].status == 200
    assert answers["fastapi"].body == answers["flask"].body == answers["django"].body
