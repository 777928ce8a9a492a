"""The approval gate: a gated call waits for a single-use human approval bound to its scope, its
caller and its tool; replays, other scopes, other callers and expired approvals are refused; of 50
concurrent claimants of one approval exactly one runs; the audit shows every refusal."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import psycopg
import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import InvalidRequest
from context_engine.tools import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    ToolConfig,
    resolve_approval,
)
from tests import tools_support
from tests.fakes import FakeHTTPServer, json_reply
from tests.tools_support import table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

hook_log = tools_support.hook_log  # a shared fixture
tools_engine = tools_support.tools_engine  # a shared fixture


class Counter:
    """A function tool that counts how often it really ran."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, amount: int, to: str) -> dict[str, Any]:
        self.calls.append({"amount": amount, "to": to})
        return {"paid": amount, "to": to}


def gated(engine: ContextEngine, acl: list[str] | None = None) -> Counter:
    counter = Counter()
    engine.register_function_tool(counter, name="pay", requires_approval=True, acl=acl)
    return counter


async def test_a_gated_call_waits_then_runs_exactly_once(tools_engine: ContextEngine, database_url: str) -> None:
    counter = gated(tools_engine)
    args = {"amount": 10, "to": "acme"}
    first = await tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run-1")
    pending = first["approval_required"]
    assert set(pending) >= {"approval_id", "expires_at", "tool_id", "approval_scope"} and pending["tool_id"] is None
    again = await tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run-1")
    assert again["approval_required"]["approval_id"] == pending["approval_id"]  # one record per pending request
    assert counter.calls == []
    record = await resolve_approval(tools_engine, pending["approval_id"], "approved", approver="boss")
    assert record.status == "approved" and record.approver == "boss"
    assert record.arguments == args and record.principals == ["user:a"]  # what the approver is shown
    ran = await tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run-1")
    assert ran["result"] == {"paid": 10, "to": "acme"} and len(counter.calls) == 1
    replay = await tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run-1")
    assert "approval_required" in replay and replay["approval_required"]["approval_id"] != pending["approval_id"]
    assert len(counter.calls) == 1
    consumed = await tools_engine.get_tool_approval(pending["approval_id"])
    assert consumed.status == "consumed"
    audit = table_rows(database_url, "SELECT outcome, approval_id FROM ce_tool_calls ORDER BY started_at")
    assert [r["outcome"] for r in audit] == ["approval_required", "approval_required", "success", "approval_required"]
    assert str(audit[2]["approval_id"]) == pending["approval_id"]


async def test_an_approval_is_bound_to_scope_caller_and_arguments(tools_engine: ContextEngine) -> None:
    counter = gated(tools_engine)
    args = {"amount": 5, "to": "acme"}
    opened = await tools_engine.execute_tool("fn_pay", args, principals=["user:a", "team:x"], approval_scope="run-1")
    approval_id = opened["approval_required"]["approval_id"]
    await resolve_approval(tools_engine, approval_id, "approved", approver="boss")
    # another scope, another caller, other arguments: none of them claims it
    other_scope = await tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run-2")
    stranger = await tools_engine.execute_tool("fn_pay", args, principals=["user:b"], approval_scope="run-1")
    changed = await tools_engine.execute_tool(
        "fn_pay", {"amount": 5000, "to": "acme"}, principals=["user:a"], approval_scope="run-1"
    )
    for refused in (other_scope, stranger, changed):
        assert refused["approval_required"]["approval_id"] != approval_id
    assert counter.calls == []
    # a caller who overlaps the opener's principals may claim it
    ran = await tools_engine.execute_tool("fn_pay", args, principals=["team:x"], approval_scope="run-1")
    assert ran["result"]["paid"] == 5 and len(counter.calls) == 1


async def test_resolving_is_single_use_and_precise(tools_engine: ContextEngine) -> None:
    gated(tools_engine)
    opened = await tools_engine.execute_tool("fn_pay", {"amount": 1, "to": "a"}, principals=[], approval_scope="s")
    approval_id = opened["approval_required"]["approval_id"]
    await resolve_approval(tools_engine, approval_id, "denied", approver="boss")
    with pytest.raises(ApprovalAlreadyResolved) as twice:
        await resolve_approval(tools_engine, approval_id, "approved", approver="boss")
    assert twice.value.status == 409 and twice.value.code == "approval_already_resolved"
    with pytest.raises(ApprovalNotFound) as unknown:
        await resolve_approval(tools_engine, "00000000-0000-0000-0000-000000000000", "approved")
    assert unknown.value.status == 404
    with pytest.raises(ApprovalNotFound):
        await resolve_approval(tools_engine, "not-an-id", "approved")
    with pytest.raises(InvalidRequest):
        await resolve_approval(tools_engine, approval_id, "maybe")
    # a denied request asks again rather than running
    again = await tools_engine.execute_tool("fn_pay", {"amount": 1, "to": "a"}, principals=[], approval_scope="s")
    assert again["approval_required"]["approval_id"] != approval_id


def _expire(database_url: str, approval_id: str) -> None:
    """Let an approval's time run out now, as waiting past its TTL would."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE ce_tool_approvals SET expires_at = clock_timestamp() - interval '1 second' WHERE id::text = %s",
            (str(approval_id),),
        )


async def test_expired_approvals_cannot_be_approved_or_claimed(tools_engine: ContextEngine, database_url: str) -> None:
    counter = gated(tools_engine)
    args = {"amount": 3, "to": "late"}
    opened = await tools_engine.execute_tool(
        "fn_pay", args, principals=[], approval_scope="s", approval_ttl_seconds=600
    )
    _expire(database_url, opened["approval_required"]["approval_id"])
    with pytest.raises(ApprovalExpired) as caught:
        await resolve_approval(tools_engine, opened["approval_required"]["approval_id"], "approved")
    assert caught.value.status == 409 and caught.value.code == "approval_expired"
    # approved in time, but claimed after expiry: it asks again and does not run
    # (a long TTL, so approving in time never depends on the machine's speed; then its time runs out)
    fresh = await tools_engine.execute_tool("fn_pay", args, principals=[], approval_scope="s", approval_ttl_seconds=600)
    fresh_id = fresh["approval_required"]["approval_id"]
    assert fresh_id != opened["approval_required"]["approval_id"]
    await resolve_approval(tools_engine, fresh_id, "approved")
    _expire(database_url, fresh_id)
    late = await tools_engine.execute_tool("fn_pay", args, principals=[], approval_scope="s")
    assert "approval_required" in late and counter.calls == []
    statuses = table_rows(database_url, "SELECT status FROM ce_tool_approvals ORDER BY created_at")
    assert [r["status"] for r in statuses] == ["expired", "approved", "pending"]


async def test_fifty_concurrent_claimants_run_it_exactly_once(tools_engine: ContextEngine, database_url: str) -> None:
    counter = gated(tools_engine)
    args = {"amount": 99, "to": "race"}
    opened = await tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run")
    await resolve_approval(tools_engine, opened["approval_required"]["approval_id"], "approved", approver="boss")
    outcomes = await asyncio.gather(
        *(tools_engine.execute_tool("fn_pay", args, principals=["user:a"], approval_scope="run") for _ in range(50))
    )
    ran = [o for o in outcomes if "result" in o]
    asked = [o for o in outcomes if "approval_required" in o]
    assert len(ran) == 1 and len(asked) == 49 and len(counter.calls) == 1
    # the losers share the one new pending record
    assert len({o["approval_required"]["approval_id"] for o in asked}) == 1
    audit = table_rows(database_url, "SELECT outcome, count(*) AS n FROM ce_tool_calls GROUP BY outcome")
    assert {r["outcome"]: r["n"] for r in audit} == {"approval_required": 50, "success": 1}


async def test_an_approval_is_for_one_tool_not_a_name(tools_engine: ContextEngine) -> None:
    with FakeHTTPServer() as server:
        server.route("POST", "/a", json_reply(200, {"tool": "a"}))
        server.route("POST", "/b", json_reply(200, {"tool": "b"}))
        ids = []
        for path in ("/a", "/b"):
            config = {"url": server.url(path), "method": "POST", "allowed_hosts": ["127.0.0.1"]}
            entry = await tools_engine.register_tool(
                ToolConfig(name="transfer", kind="http", config=config, requires_approval=True)
            )
            ids.append(entry["tool_id"])
        first = await tools_engine.execute_tool(
            "http_transfer", {"n": 1}, principals=[], tool_id=ids[0], approval_scope="s"
        )
        assert first["approval_required"]["tool_id"] == ids[0]
        await resolve_approval(tools_engine, first["approval_required"]["approval_id"], "approved")
        other = await tools_engine.execute_tool(
            "http_transfer", {"n": 1}, principals=[], tool_id=ids[1], approval_scope="s"
        )
        assert other["approval_required"]["tool_id"] == ids[1]
        ran = await tools_engine.execute_tool(
            "http_transfer", {"n": 1}, principals=[], tool_id=ids[0], approval_scope="s"
        )
        assert ran["result"]["data"] == {"tool": "a"}
        assert [r.path for r in server.requests] == ["/a"]


async def test_a_gated_call_without_a_scope_warns(tools_engine: ContextEngine) -> None:
    gated(tools_engine, acl=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = await tools_engine.execute_tool("fn_pay", {"amount": 1, "to": "x"}, principals=TRUSTED)
    assert out["approval_required"]["approval_scope"] == ""
    assert any(issubclass(w.category, DeprecationWarning) and "approval_scope" in str(w.message) for w in caught)
